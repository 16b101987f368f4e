"""Where each parameter of a capability function takes its value from, read off its signature.

A parameter is the model's (its hint becomes the argument schema), the run's trusted context
(``Context``), the intent key (``IntentKey``), the send boundary or the order; anything the
signature cannot say is a ``DeclarationError`` at decoration. ``lockgate.adapters.functions``
says what each means to an author; this module reads them and calls the function with them.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import PydanticUserError, TypeAdapter
from pydantic_core import PydanticUndefined

from lockgate.adapters.api import SendBoundary
from lockgate.contracts.messages import ExecutionOrder


class Context:
    """Marks a parameter whose value the run's trusted context gives, never the model.

    ``key``: the run-context key (default: the parameter's name). ``convert``: turns the
    context's text into what the function takes (``git.Repo``, say), in the adapter process.
    """

    def __init__(self, key: str | None = None, *, convert: Callable[[str], Any] | None = None) -> None:
        self.key = key
        self.convert = convert

    def __repr__(self) -> str:
        return f"Context({self.key!r})" if self.key else "Context()"


class _IntentKeyMarker:
    def __repr__(self) -> str:
        return "IntentKey"


_INTENT_KEY = _IntentKeyMarker()
#: A parameter annotated ``IntentKey`` receives the intent key (a ``str``).
IntentKey = Annotated[str, _INTENT_KEY]


class DeclarationError(TypeError):
    """A function that cannot become a capability as declared; ``parameter`` names the culprit."""

    def __init__(self, function: str, message: str, parameter: str | None = None) -> None:
        where = f"{function}, parameter {parameter!r}" if parameter else function
        super().__init__(f"{where}: {message}")
        self.function = function
        self.parameter = parameter


ParamKind = Literal["model", "context", "intent_key", "boundary", "order"]


@dataclass(frozen=True)
class Param:
    """One parameter of the function and where its value comes from."""

    name: str
    kind: ParamKind
    annotation: Any
    default: Any = PydanticUndefined
    positional_only: bool = False
    #: The run-context key (``kind == "context"``).
    key: str = ""
    convert: Callable[[str], Any] | None = None


def _metadata(annotation: Any) -> tuple[Any, ...]:
    return tuple(getattr(annotation, "__metadata__", ()))


def type_hints(fn: Callable[..., Any], qualname: str,
               localns: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``fn``'s type hints, extras kept, names local to its declaration resolved in ``localns``.

    Raises:
        DeclarationError: a hint that does not resolve.
    """
    try:
        return typing.get_type_hints(fn, localns=dict(localns or {}), include_extras=True)
    except Exception as exc:  # a forward reference that does not resolve, say
        raise DeclarationError(qualname, f"its type hints do not resolve: {exc}") from exc


def read_params(
    fn: Callable[..., Any], qualname: str, context: Mapping[str, Context], *, is_async: bool,
    localns: Mapping[str, Any] | None = None,
) -> list[Param]:
    """Classify each parameter of ``fn`` by where its value comes from.

    Raises:
        DeclarationError: an unannotated, variadic or doubly declared parameter.
    """
    hints = type_hints(fn, qualname, localns)
    signature = inspect.signature(fn)
    unknown = set(context) - set(signature.parameters)
    if unknown:
        raise DeclarationError(qualname, "context= names no parameter of the function",
                               sorted(unknown)[0])
    params: list[Param] = []
    for name, p in signature.parameters.items():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise DeclarationError(qualname, "*args and **kwargs have no schema; name each argument",
                                   name)
        if name not in hints:
            raise DeclarationError(qualname, "needs a type hint (the model's schema, or where "
                                             "its value comes from, is read from it)", name)
        hint = hints[name]
        meta = _metadata(hint)
        marked = [m for m in meta if isinstance(m, Context)]
        default = PydanticUndefined if p.default is p.empty else p.default
        positional = p.kind is p.POSITIONAL_ONLY
        if name in context and marked:
            raise DeclarationError(qualname, "is marked Context() and named in context= too", name)
        if name in context or marked:
            ctx = context.get(name) or marked[0]
            if _INTENT_KEY in meta:
                raise DeclarationError(qualname, "cannot be both IntentKey and Context()", name)
            if default is not PydanticUndefined:
                raise DeclarationError(
                    qualname, "a context argument takes its value from the run; a default would "
                              "hide a run that lacks it", name)
            convert = ctx.convert
            if convert is None:
                try:
                    # The context is text; the function's type says what it becomes ("7"
                    # for an int), as pydantic's lax mode reads it.
                    convert = TypeAdapter(hint).validate_python
                except PydanticUserError as exc:
                    raise DeclarationError(qualname, "its type cannot be read from the context's "
                                                     "text: give Context(convert=...)", name) from exc
            params.append(Param(name, "context", hint, positional_only=positional,
                                key=ctx.key or name, convert=convert))
        elif _INTENT_KEY in meta:
            params.append(Param(name, "intent_key", hint, positional_only=positional))
        elif inspect.isclass(hint) and issubclass(hint, SendBoundary):
            if not is_async:
                raise DeclarationError(qualname, "a sync function cannot await boundary.cross(); "
                                                 "make it async, or drop the parameter and let "
                                                 "the worker cross right before calling it", name)
            params.append(Param(name, "boundary", hint, positional_only=positional))
        elif inspect.isclass(hint) and issubclass(hint, ExecutionOrder):
            params.append(Param(name, "order", hint, positional_only=positional))
        else:
            params.append(Param(name, "model", hint, default, positional_only=positional))
    for kind in ("intent_key", "boundary", "order"):
        twice = [p.name for p in params if p.kind == kind]
        if len(twice) > 1:
            raise DeclarationError(qualname, f"only one parameter may take the {kind}", twice[1])
    return params



def call_with(params: Sequence[Param], values: Mapping[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """The positional and keyword arguments that pass ``values`` to the parameters ``params``."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for p in params:
        if p.name not in values:
            continue
        if p.positional_only:
            args.append(values[p.name])
        else:
            kwargs[p.name] = values[p.name]
    return args, kwargs


async def call_function(fn: Callable[..., Any], is_async: bool, args: Sequence[Any],
                        kwargs: Mapping[str, Any]) -> Any:
    """Call ``fn`` and return what it returned: awaited, or a sync function in a worker thread."""
    if is_async:
        return await fn(*args, **kwargs)
    # A sync function may block (files, a subprocess, a socket): never on the loop.
    return await asyncio.to_thread(functools.partial(fn, *args, **kwargs))


def is_async_function(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` is a coroutine function (awaited, not run in a thread)."""
    return inspect.iscoroutinefunction(fn)
