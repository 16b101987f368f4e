"""A typed Python function becomes a governed capability: its contract and the adapter serving it.

::

    from typing import Annotated
    from pydantic import Field
    from lockgate.adapters.sdk import Context, IntentKey, Rejected, capability

    @capability("ticket.comment", effect="write", resource=("Ticket", "ticket_id"))
    async def comment(ticket_id: Annotated[str, Context()],
                      text: Annotated[str, Field(min_length=1, max_length=2000)],
                      key: IntentKey) -> dict[str, str]:
        \"\"\"Comment on the ticket you are working on.\"\"\"   # what the model is told
        ...

    @comment.query
    async def find(key: IntentKey) -> dict[str, str] | None: ...   # by identity

``comment.contract`` is the ``CapabilityContract``; ``comment.adapter()`` an ``Adapter``
that serves it (``lockgate adapter serve module:attr`` runs a module's functions as one
adapter process, with a broker user of its own). The function itself stays callable as it
was; it runs, as every effect does, only in the adapter process, only for an order that
matches what was authorized.

What the signature says:

- every parameter needs a type hint (``DeclarationError`` names the one without);
- ``Annotated[T, Context()]`` (or ``Context("case_id")`` to name the run-context key, or
  ``context={"param": Context(...)}`` for a function you cannot annotate): taken from the
  run's trusted context, never from the model (``context_arguments``: a model that
  supplies it is refused);
- ``IntentKey``: receives the intent key, which the remote system can deduplicate by (the
  contract then declares ``Idempotency``);
- ``SendBoundary``: receives the send boundary, for a function that prepares first and then
  ``await boundary.cross()`` right before its write (async functions only); without it the
  worker crosses right before calling the function;
- ``ExecutionOrder``: receives the order (tenant, actor, intent);
- every other parameter is the model's: the argument JSON Schema comes from them through
  pydantic (``create_model``), with their ``Field`` constraints and defaults, and no other
  property allowed.

Defaults, each overridable by a keyword of :func:`capability`:

- the description is the docstring; the resource is ``(<first word of the name, title-cased>,
  <the capability name>)`` unless ``resource=(type, argument)`` names the argument holding
  its id; the destination is ``<capability>:<tenant>/<resource id>`` unless a format string
  over the arguments is given; facts are none unless ``@fn.facts`` gives them;
- a ``read`` or ``derive`` needs no query. A ``write`` (``publish``, ``destroy``) without a
  query is never tried again once its send boundary is crossed: an unknown outcome goes to
  an operator. With ``@fn.query`` the reconciler asks it (and, with an ``IntentKey``, the
  same intent may be tried again when the query finds the effect absent);
- a function that raises ``Rejected`` (e.g. ``Rejected("ticket.locked")``) reports that the
  remote system refused; ``disclose={"ticket.locked": Disclosure(...)}`` says what the model
  may learn of it. Any other exception after the boundary leaves the outcome unknown (the
  effect may have happened), never "failed";
- a sync function runs in a worker thread (``asyncio.to_thread``), never on the event loop;
- the result is the return value dumped by pydantic to JSON: a dict as it is, anything
  else as ``{"value": ...}``; the model sees it within ``result_max_bytes``.

Normalization validates the model's arguments with the same pydantic model; a validation
error becomes ``argument.<field>.<problem>`` with its field (``missing``, ``empty``,
``too-short``, ``too-long``, ``out-of-range``, ``unexpected``, ``invalid``), which the model
is told as it is. The normalized arguments are pydantic's JSON dump plus the context
arguments.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    PydanticUserError,
    TypeAdapter,
    ValidationError,
    create_model,
)

from lockgate.adapters.api import Adapter, Completed, NotSent, SendBoundary
from lockgate.adapters.parameters import (
    Context,
    DeclarationError,
    IntentKey,
    Param,
    ParamKind,
    call_function,
    call_with,
    is_async_function,
    read_params,
    type_hints,
)
from lockgate.adapters.shapes import (
    RECEIPT_ENTRIES,
    arguments_model_name,
    receipt_of,
    result_schema_of,
    validation_reason,
)
from lockgate.contracts.capability import (
    CapabilityContract,
    Disclosure,
    EffectClass,
    Idempotency,
)
from lockgate.contracts.consequence import Consequence
from lockgate.contracts.messages import (
    ExecutionOrder,
    Facts,
    FactsRequest,
    NormalizeRequest,
    NormalizeResult,
    QueryRequest,
    QueryResult,
)
from lockgate.contracts.offer import Offer
from lockgate.contracts.vocabulary import QueryFinding
from lockgate.core.ids import is_capability_name

Effect = Literal["read", "derive", "write", "publish", "destroy"]

#: How long the remote system keeps an intent key (``Idempotency.retention_s``) unless told.
KEY_RETENTION_S = 7 * 24 * 3600

__all__ = [
    "KEY_RETENTION_S",
    "RECEIPT_ENTRIES",
    "CapabilityFunction",
    "Context",
    "DeclarationError",
    "Effect",
    "FunctionAdapter",
    "IntentKey",
    "Param",
    "ParamKind",
    "capability",
    "collect",
    "validation_reason",
]


class CapabilityFunction:
    """A function declared as a capability: call it as before, serve it with ``adapter()``.

    ``contract`` is derived from the declaration each time it is read (a ``@query`` added
    after decoration changes the recovery it declares).
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str,
        effect: Effect,
        description: str | None,
        resource: tuple[str, str] | None,
        destination: str | None,
        context: Mapping[str, Context],
        options: Mapping[str, Any],
        localns: Mapping[str, Any] | None = None,
    ) -> None:
        self.__wrapped__ = fn
        self.name = name
        self.qualname = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
        functools.update_wrapper(self, fn)
        if not is_capability_name(name):
            raise DeclarationError(self.qualname, f"{name!r} is not a capability name (lower-case "
                                                  "dotted, e.g. ticket.comment)")
        try:
            self.effect = EffectClass(effect)
        except ValueError:
            raise DeclarationError(self.qualname, f"effect {effect!r} is not one of "
                                                  f"{', '.join(e.value for e in EffectClass)}") from None
        self.is_async = is_async_function(fn)
        # Hints naming a class local to where the function was declared resolve there, as
        # pydantic resolves a model's (the ``from __future__ import annotations`` case).
        self._localns = dict(localns or {})
        self.params = read_params(fn, self.qualname, context, is_async=self.is_async,
                              localns=self._localns)
        self.description = (description or inspect.getdoc(fn) or "").strip()
        if not self.description:
            raise DeclarationError(self.qualname, "needs a description: a docstring, or "
                                                  "description=, is what the model is told")
        model_params = [p for p in self.params if p.kind == "model"]
        try:
            self.arguments: type[BaseModel] = create_model(  # type: ignore[call-overload]
                arguments_model_name(name),
                __config__=ConfigDict(extra="forbid"),
                **{p.name: (p.annotation, p.default) for p in model_params},
            )
            self.argument_schema: dict[str, Any] = self.arguments.model_json_schema()
        except PydanticUserError as exc:
            # A type pydantic cannot validate or describe (a client object, say): the model
            # cannot be offered it. Context(convert=...) makes such a value from the context.
            raise DeclarationError(self.qualname, f"an argument the model controls has no JSON "
                                                  f"Schema: {exc}") from exc
        names = {p.name for p in self.params if p.kind in ("model", "context")}
        if resource is not None:
            rtype, rarg = resource
            if rarg not in names:
                raise DeclarationError(self.qualname, "resource= names no argument of the "
                                                      "function (model or context)", rarg)
            self.resource_type, self.resource_argument = rtype, rarg
        else:
            self.resource_type, self.resource_argument = name.split(".", 1)[0].title(), ""
        _check_named(self.qualname, names, options)
        if not self.resource_type.isidentifier():
            raise DeclarationError(self.qualname, f"resource type {self.resource_type!r} is not "
                                                  "a Cedar entity type name")
        self.destination = destination
        self._options = dict(options)
        hints = type_hints(fn, self.qualname, self._localns)
        returned = hints.get("return", Any)
        try:
            self._result: TypeAdapter[Any] = TypeAdapter(returned)
        except PydanticUserError as exc:
            raise DeclarationError(self.qualname, f"its return type cannot be dumped to JSON: "
                                                  f"{exc}", "return") from exc
        #: The result's JSON Schema (the executor checks every result against it), and
        #: whether the return value is wrapped as ``{"value": ...}`` (``None``: decided by
        #: the value, for a function without a return type).
        self.result_schema, self._wraps = result_schema_of(self._result, returned)
        self.query_function: Callable[..., Any] | None = None
        self._query_params: list[Param] = []
        self.facts_function: Callable[..., Any] | None = None
        self._facts_args: list[str] = []

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function itself (a test, a script): nothing governs this call."""
        return self.__wrapped__(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<capability {self.name} ({self.effect}) of {self.qualname}>"

    # -- the declaration's other parts ---------------------------------------------------

    def query(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Declare how to find the effect by its identity; returns ``fn`` unchanged.

        ``fn`` takes an ``IntentKey`` and any of the capability's arguments by name, and
        returns the effect's receipt (a ``dict[str, str]``) or ``None`` when it is absent;
        raising means the query could not tell.

        Raises:
            DeclarationError: a parameter the capability cannot give it.
        """
        qualname = f"{self.qualname}.query ({getattr(fn, '__qualname__', fn)!r})"
        params = read_params(fn, qualname, {}, is_async=is_async_function(fn), localns=self._localns)
        own = {p.name: p for p in self.params if p.kind in ("model", "context")}
        for p in params:
            if p.kind == "intent_key":
                continue
            if p.kind == "model" and p.name in own:
                params[params.index(p)] = own[p.name]
                continue
            raise DeclarationError(qualname, "a query takes an IntentKey and the capability's "
                                             "own arguments by name, nothing else", p.name)
        self.query_function, self._query_params = fn, params
        return fn

    def facts(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Declare the facts policies judge the resource by; returns ``fn`` unchanged.

        ``fn`` takes any of ``resource_id``, ``tenant`` and ``actor`` (text) and returns a
        flat ``dict`` of text, integers and booleans: the resource's attributes in Cedar.

        Raises:
            DeclarationError: a parameter it cannot be given.
        """
        qualname = f"{self.qualname}.facts ({getattr(fn, '__qualname__', fn)!r})"
        names = list(inspect.signature(fn).parameters)
        for name in names:
            if name not in ("resource_id", "tenant", "actor"):
                raise DeclarationError(qualname, "facts take resource_id, tenant and actor, "
                                                 "nothing else", name)
        self.facts_function, self._facts_args = fn, names
        return fn

    # -- what it derives ------------------------------------------------------------------

    @property
    def has_query(self) -> bool:
        """Whether ``@query`` was declared."""
        return self.query_function is not None

    @property
    def contract(self) -> CapabilityContract:
        """The capability contract the declaration makes."""
        takes_key = any(p.kind == "intent_key" for p in self.params)
        reads = self.effect in (EffectClass.READ, EffectClass.DERIVE)
        if self.has_query:
            recovery: tuple[str, ...] = (
                ("query", "retry_same_intent", "operator") if takes_key else ("query", "operator"))
        else:
            recovery = ("operator",)
        options = dict(self._options)
        disclose: dict[str, Disclosure] = dict(options.pop("disclose", None) or {})
        retention_s = int(options.pop("retention_s", KEY_RETENTION_S))
        return CapabilityContract(
            name=self.name,
            description=self.description,
            argument_schema=self.argument_schema,
            context_arguments=tuple(p.name for p in self.params if p.kind == "context"),
            effect_class=self.effect,
            idempotency=Idempotency("intent_key", retention_s) if takes_key else None,
            query_by_identity=self.has_query,
            result_schema=self.result_schema,
            recovery=recovery,
            alternatives=options.pop("alternatives", None)
            or (("stop",) if reads else ("ask_owner", "stop")),
            disclosure=disclose,
            **options,
        )

    def adapter(self) -> Adapter:
        """An ``Adapter`` serving this capability (run it with ``run_adapter`` or ``serve``)."""
        return FunctionAdapter(self)

    # -- what the adapter does ------------------------------------------------------------

    def normalize(self, req: NormalizeRequest) -> NormalizeResult:
        """Validate the model's arguments with pydantic, add the context, name the resource."""
        try:
            checked = self.arguments.model_validate(req.arguments)
        except ValidationError as exc:
            reason, field = validation_reason(exc)
            return NormalizeResult(reason=reason, field=field)
        arguments: dict[str, Any] = checked.model_dump(mode="json")
        for p in self.params:
            if p.kind != "context":
                continue
            value = req.context.get(p.key)
            if not value:
                return NormalizeResult(reason="run.context.missing")
            arguments[p.name] = value
        resource_id = str(arguments[self.resource_argument]) if self.resource_argument else self.name
        resource = {"type": self.resource_type, "id": resource_id, "tenant": req.tenant}
        if self.destination is None:
            destination = f"{self.name}:{req.tenant}/{resource_id}"
        else:
            destination = self.destination.format_map({**arguments, "tenant": req.tenant})
        return NormalizeResult(arguments=arguments, resource=resource, destination=destination)

    def values(self, arguments: Mapping[str, Any], context_only: bool = False) -> dict[str, Any]:
        """The function's own values for normalized ``arguments`` (validated again, converted).

        Raises:
            ValidationError: the arguments are not what normalization made.
            KeyError: a context argument is missing.
        """
        model_names = [p.name for p in self.params if p.kind == "model"]
        checked = self.arguments.model_validate({k: arguments[k] for k in model_names if k in arguments})
        values: dict[str, Any] = {name: getattr(checked, name) for name in model_names}
        for p in self.params:
            if p.kind == "context":
                raw = str(arguments[p.name])
                values[p.name] = p.convert(raw) if p.convert is not None else raw
        return values

    def result(self, value: Any) -> dict[str, Any]:
        """The return value as the report's result: pydantic's JSON dump, an object as it is,
        anything else as ``{"value": ...}`` (as ``result_schema`` says)."""
        dumped = self._result.dump_python(value, mode="json")
        if self._wraps or not isinstance(dumped, dict):
            return {"value": dumped}
        return dumped

    async def find(self, req: QueryRequest) -> QueryResult:
        """Ask ``@query`` whether the effect with this intent key happened."""
        if self.query_function is None:
            # Nothing to ask (a read, or a write that goes to an operator): no evidence.
            return QueryResult(finding=QueryFinding.UNKNOWN)
        own = self.values(req.arguments) if any(
            p.kind in ("model", "context") for p in self._query_params) else {}
        values = {p.name: req.intent_key if p.kind == "intent_key" else own[p.name]
                  for p in self._query_params}
        args, kwargs = call_with(self._query_params, values)
        found = await call_function(self.query_function, is_async_function(self.query_function), args, kwargs)
        if found is None:
            return QueryResult(finding=QueryFinding.ABSENT)
        return QueryResult(finding=QueryFinding.FOUND, receipt=receipt_of(found, req.intent_key))

    async def facts_of(self, req: FactsRequest) -> Facts:
        """The resource's facts from ``@facts`` (none when it was not declared)."""
        if self.facts_function is None:
            return Facts(facts={})
        given = {"resource_id": req.resource.get("id", ""), "tenant": req.tenant, "actor": req.actor}
        found = await call_function(self.facts_function, is_async_function(self.facts_function), (),
                            {n: given[n] for n in self._facts_args})
        return Facts(facts=dict(found))

    async def run(self, order: ExecutionOrder, boundary: SendBoundary) -> Completed:
        """Call the function for ``order``: cross first unless it crosses itself."""
        try:
            values = self.values(order.arguments)
        except (ValidationError, KeyError, ValueError, TypeError) as exc:
            # Before the boundary: nothing was sent.
            raise NotSent("adapter.error", f"the order's arguments: {exc}") from exc
        for p in self.params:
            if p.kind == "intent_key":
                values[p.name] = order.intent_key
            elif p.kind == "boundary":
                values[p.name] = boundary
            elif p.kind == "order":
                values[p.name] = order
        if not any(p.kind == "boundary" for p in self.params):
            await boundary.cross()
        args, kwargs = call_with(self.params, values)
        returned = await call_function(self.__wrapped__, self.is_async, args, kwargs)
        result = self.result(returned)
        return Completed(receipt=receipt_of(result, order.intent_key), result=result)



class FunctionAdapter(Adapter):
    """Serves one ``CapabilityFunction`` (``capability(...)(fn).adapter()``)."""

    def __init__(self, function: CapabilityFunction) -> None:
        self.function = function
        self.contract = function.contract

    async def normalize(self, req: NormalizeRequest) -> NormalizeResult:
        """Validate with pydantic, add the run's context, name the resource."""
        return self.function.normalize(req)

    async def facts(self, req: FactsRequest) -> Facts:
        """The facts ``@facts`` declares (none by default)."""
        return await self.function.facts_of(req)

    async def execute(self, order: ExecutionOrder, boundary: SendBoundary) -> Completed:
        """Call the function (the worker maps what it raises onto the attempt's outcome)."""
        return await self.function.run(order, boundary)

    async def query(self, req: QueryRequest) -> QueryResult:
        """Ask ``@query``; without one the answer is no evidence (``unknown``)."""
        return await self.function.find(req)


def _check_named(qualname: str, names: set[str], options: Mapping[str, Any]) -> None:
    """``destination_arguments=`` and ``amount_argument=`` must name arguments of the function."""
    for argument in (*options.get("destination_arguments", ()), options.get("amount_argument")):
        if argument is not None and argument not in names:
            raise DeclarationError(qualname, "destination_arguments= and amount_argument= name "
                                             "arguments of the function", argument)


def capability(
    name: str,
    *,
    effect: Effect = "write",
    description: str | None = None,
    resource: tuple[str, str] | None = None,
    destination: str | None = None,
    context: Mapping[str, Context] | None = None,
    data_classes: Sequence[str] = (),
    outside_results: bool = False, destination_arguments: Sequence[str] = (),
    amount_argument: str | None = None,
    offer: Offer | None = None,
    disclose: Mapping[str, Disclosure] | None = None,
    max_argument_bytes: int = 16 * 1024, result_max_bytes: int = 4096,
    outcome_deadline_s: float = 30.0, retention_s: int = KEY_RETENTION_S,
    approval_hint: str = "",
    consequence: Consequence | None = None,
    alternatives: Sequence[str] | None = None,
    serialize_per_resource: bool = False,
    budget_cost: int = 1,
    send_boundary: str = "the function called",
    postconditions: Sequence[str] = (),
) -> Callable[[Callable[..., Any]], CapabilityFunction]:
    """Declare a typed function as the capability ``name`` (see this module's docstring).

    Args:
        name: the capability's name, lower-case dotted (``ticket.comment``).
        effect: ``read``, ``derive``, ``write``, ``publish`` or ``destroy``.
        description: what the model is told (default: the docstring).
        resource: ``(entity type, argument)``: the Cedar entity type and the argument (model
            or context) holding its id (default: ``(<first word>, <capability name>)``).
        destination: a format string over the arguments and ``tenant``.
        context: parameters taken from the run's context, for a function you cannot annotate.
        data_classes: what kinds of data it moves (a run may exclude some).
        outside_results: its results carry outside content (mail, files, web pages).
        destination_arguments: the arguments naming whom or where the effect reaches.
        amount_argument: the argument (a number) the run's totals add up.
        offer: when it is offered (stages, roles, what must have run first).
        disclose: reason code → what the model may learn of it.
        max_argument_bytes: the largest raw arguments intake accepts.
        result_max_bytes: the largest result the model is shown.
        outcome_deadline_s: how long an attempt may take before its outcome is unknown.
        retention_s: how long the remote system keeps an intent key (with an ``IntentKey``).
        approval_hint: what a reviewer is told first.
        consequence: how the effect reads to a reviewer.
        alternatives: next steps offered to a model that is denied.
        serialize_per_resource: effects on the same resource one at a time.
        budget_cost: what one effect costs of the run's budgets.
        send_boundary: what crossing the boundary means, for the record.
        postconditions: what holds once it completed.

    Returns a decorator turning the function into a ``CapabilityFunction``.

    Raises:
        DeclarationError: (a ``TypeError``, at decoration) a parameter without a type hint,
            a context argument with a default, a resource naming no argument, and the like.
    """
    options: dict[str, Any] = dict(
        data_classes=tuple(data_classes), outside_results=outside_results,
        destination_arguments=tuple(destination_arguments), amount_argument=amount_argument,
        offer=offer or Offer(), disclose=dict(disclose or {}),
        max_argument_bytes=max_argument_bytes, result_max_bytes=result_max_bytes,
        outcome_deadline_s=outcome_deadline_s, retention_s=retention_s,
        approval_hint=approval_hint, consequence=consequence,
        alternatives=tuple(alternatives) if alternatives is not None else None,
        serialize_per_resource=serialize_per_resource, budget_cost=budget_cost,
        send_boundary=send_boundary, postconditions=tuple(postconditions),
    )

    def declare(fn: Callable[..., Any]) -> CapabilityFunction:
        caller = sys._getframe(1)
        # A function's own module resolves its hints; a caller's locals only add the classes
        # of the function body it is declared in (at module level they are another module's
        # globals, which must not shadow the function's own: a wrapped third-party function).
        local = caller.f_locals if caller.f_locals is not caller.f_globals else {}
        return CapabilityFunction(fn, name=name, effect=effect, description=description,
                                  resource=resource, destination=destination,
                                  context=dict(context or {}), options=options, localns=local)

    return declare


def collect(target: object) -> list[CapabilityFunction]:
    """The capability functions ``target`` holds: itself, a list, tuple or dict of them, or a
    module's (in definition order).

    Raises:
        TypeError: ``target`` holds none, or something else besides them.
    """
    if isinstance(target, CapabilityFunction):
        return [target]
    if isinstance(target, list | tuple):
        items: list[object] = list(target)
    elif isinstance(target, dict):
        items = list(target.values())
    elif inspect.ismodule(target):
        items = [v for v in vars(target).values() if isinstance(v, CapabilityFunction)]
        if not items:
            raise TypeError(f"module {target.__name__} declares no capability function")
    else:
        raise TypeError(f"{target!r} is neither a capability function nor a list, tuple, dict "
                        "or module of them")
    bad = [i for i in items if not isinstance(i, CapabilityFunction)]
    if bad:
        raise TypeError(f"{bad[0]!r} is not a capability function (decorate it with @capability)")
    found = [i for i in items if isinstance(i, CapabilityFunction)]
    if not found:
        raise TypeError(f"{target!r} holds no capability function")
    names = [f.name for f in found]
    if len(set(names)) != len(names):
        raise TypeError(f"two functions declare the same capability: {sorted(names)}")
    return found
