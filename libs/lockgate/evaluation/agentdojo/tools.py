"""An AgentDojo suite's tool functions as Lockgate capabilities, each acting on its run's environment.

AgentDojo describes each tool as a ``Function`` (``agentdojo.functions_runtime``): a name,
a description, a pydantic model of the model's arguments and the parts of the suite's
environment it takes (``Depends("inbox")``). What AgentDojo cannot say is what the tool
does to the world; a suite's ``Declaration`` says it once per tool (``Tool``: the effect
class, the data classes, whether its results carry outside content, which arguments
name a destination or an amount). ``capabilities`` turns every tool of a suite into a
``@capability`` function, generically: its signature is the tool's arguments plus the
``account`` the run's trusted context names, and its body runs the tool with AgentDojo's
own ``FunctionsRuntime`` on that account's environment (``Environments``). A later suite
needs a declaration table, nothing else.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from agentdojo.functions_runtime import Function, FunctionCall, FunctionsRuntime, TaskEnvironment
from pydantic import Field
from pydantic_core import PydanticUndefined

from lockgate.adapters.api import Rejected
from lockgate.adapters.functions import CapabilityFunction, Context, Effect, capability
from lockgate.core.errors import LockgateError
from lockgate.core.ids import random_id

#: The run-context key (and the argument) naming the account a run acts on: the Cedar
#: resource of every tool, and the environment copy its calls change.
ACCOUNT = "account"
#: The largest result the model is shown: a workspace's mailbox search returns tens of kB.
RESULT_MAX_BYTES = 64 * 1024
#: The reason a tool that raised is refused with (AgentDojo shows the model the error).
TOOL_ERROR = "agentdojo.tool-error"


class DeclarationMismatch(LockgateError):
    """A suite's declaration table and its tools do not name the same functions."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="agentdojo.declaration-mismatch")


@dataclass(frozen=True)
class Tool:
    """What one tool does to the world, as Lockgate's contract says it."""

    effect: Effect
    data_classes: tuple[str, ...] = ()
    #: Its results carry content from outside the user's control (mail, files, events,
    #: transaction subjects written by others).
    outside_results: bool = False
    #: The arguments naming whom or where the effect reaches.
    destination_arguments: tuple[str, ...] = ()
    #: The argument whose number adds to the run's spending totals.
    amount_argument: str | None = None


@dataclass(frozen=True)
class Declaration:
    """One suite's tools, declared once: the only suite-specific part of the evaluation."""

    #: AgentDojo's name of the suite (``banking``), also the capabilities' first name part.
    suite: str
    tools: Mapping[str, Tool]
    #: The user's own identifiers in an environment (their IBAN, their mail address): the
    #: run's trusted context names them, so an effect reaching the user is no stranger's.
    user: Callable[[Any], tuple[str, ...]]
    #: The Cedar entity type every tool acts on (the account's).
    resource: str = "Account"

    def capability_name(self, function: str) -> str:
        """The capability a tool becomes (``banking.send_money``)."""
        return f"{self.suite}.{function}"


class Environments:
    """Each run's AgentDojo environment by account id, and the calls that ran on it.

    The adapter's functions run in worker threads; each account is one run's, whose calls
    come one at a time, so no two threads change one environment at once.
    """

    def __init__(self) -> None:
        self._environments: dict[str, TaskEnvironment] = {}
        self._calls: dict[str, list[FunctionCall]] = {}

    def open(self, environment: TaskEnvironment) -> str:
        """Give ``environment`` an account id of its own (the run's context names it)."""
        account = random_id()
        self._environments[account] = environment
        self._calls[account] = []
        return account

    def environment(self, account: str) -> TaskEnvironment:
        """The environment of ``account``.

        Raises:
            Rejected: no such account (an order for a run that ended).
        """
        try:
            return self._environments[account]
        except KeyError:
            raise Rejected("agentdojo.no-account", f"no environment for account {account}") from None

    def ran(self, account: str, call: FunctionCall) -> None:
        """Note that ``call`` ran on ``account``'s environment."""
        self._calls[account].append(call)

    def close(self, account: str) -> tuple[TaskEnvironment, list[FunctionCall]]:
        """Forget ``account``; return its environment as the run left it, and what ran on it."""
        return self._environments.pop(account), self._calls.pop(account)


def _parameters(function: Function) -> list[inspect.Parameter]:
    """The model's arguments of ``function`` as keyword parameters, described as AgentDojo does."""
    params = []
    for name, info in function.parameters.model_fields.items():
        default = inspect.Parameter.empty if info.default is PydanticUndefined else info.default
        params.append(inspect.Parameter(
            name, inspect.Parameter.KEYWORD_ONLY, default=default,
            annotation=Annotated[info.annotation, Field(description=info.description)]))
    return params


def _runner(function: Function, environments: Environments) -> Callable[..., Any]:
    """A plain function running ``function`` with AgentDojo's runtime on the account's environment."""
    runtime = FunctionsRuntime([function])

    def run(**arguments: Any) -> Any:
        account = arguments.pop(ACCOUNT)
        environment = environments.environment(account)
        try:
            result, _ = runtime.run_function(environment, function.name, arguments,
                                             raise_on_error=True)
        except Exception as exc:  # the tool refused (an unknown id, say): nothing changed
            raise Rejected(TOOL_ERROR, f"{type(exc).__name__}: {exc}") from exc
        environments.ran(account, FunctionCall(function=function.name, args=arguments))
        return result

    return run


def capability_of(function: Function, declaration: Declaration, environments: Environments
                  ) -> CapabilityFunction:
    """``function`` as the capability its declaration says, acting on ``environments``.

    Raises:
        DeclarationMismatch: the declaration has no entry for it, or one of its arguments
            is named as the account.
    """
    tool = declaration.tools.get(function.name)
    if tool is None:
        raise DeclarationMismatch(f"{declaration.suite}: {function.name} is not declared")
    params = _parameters(function)
    if any(p.name == ACCOUNT for p in params):
        raise DeclarationMismatch(f"{function.name} has an argument named {ACCOUNT!r}")
    params.append(inspect.Parameter(ACCOUNT, inspect.Parameter.KEYWORD_ONLY,
                                    annotation=Annotated[str, Context(ACCOUNT)]))
    run = _runner(function, environments)
    returned = function.return_type if function.return_type is not None else Any
    run.__signature__ = inspect.Signature(params, return_annotation=returned)  # type: ignore[attr-defined]
    run.__annotations__ = {**{p.name: p.annotation for p in params}, "return": returned}
    run.__name__ = run.__qualname__ = function.name
    return capability(
        declaration.capability_name(function.name), effect=tool.effect,
        description=function.description, resource=(declaration.resource, ACCOUNT),
        data_classes=tool.data_classes, outside_results=tool.outside_results,
        destination_arguments=tool.destination_arguments, amount_argument=tool.amount_argument,
        result_max_bytes=RESULT_MAX_BYTES,
    )(run)


def capabilities(declaration: Declaration, functions: list[Function],
                 environments: Environments) -> list[CapabilityFunction]:
    """Every tool of a suite as a capability, in the suite's order.

    Raises:
        DeclarationMismatch: a tool without a declaration, or a declaration without a tool.
    """
    extra = sorted(set(declaration.tools) - {f.name for f in functions})
    if extra:
        raise DeclarationMismatch(f"{declaration.suite}: declared, but no tool of the suite: "
                                  f"{', '.join(extra)}")
    return [capability_of(f, declaration, environments) for f in functions]
