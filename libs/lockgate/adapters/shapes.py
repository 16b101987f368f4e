"""Pydantic's answers in the contract's terms: a validation error as the reason the model is
told, a return type as the result's JSON Schema, a result as the receipt that evidences it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import PydanticUserError, TypeAdapter, ValidationError

from lockgate.adapters.api import bounded

#: At most this many of a result's text entries become its receipt (the evidence).
RECEIPT_ENTRIES = 8


def _problem(error: Mapping[str, Any]) -> str:
    """The ``<problem>`` word of ``argument.<field>.<problem>`` for one pydantic error."""
    kind = str(error.get("type", ""))
    if kind == "missing":
        return "missing"
    if kind == "extra_forbidden":
        return "unexpected"
    if kind in ("string_too_short", "too_short"):
        value = error.get("input")
        # Blank text (before a strip_whitespace constraint) is empty too.
        blank = isinstance(value, str) and not value.strip()
        return "empty" if blank or value in ([], {}) else "too-short"
    if kind in ("string_too_long", "too_long"):
        return "too-long"
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal", "multiple_of"):
        return "out-of-range"
    return "invalid"


def validation_reason(exc: ValidationError) -> tuple[str, str | None]:
    """Map a pydantic validation error onto ``(argument.<field>.<problem>, field)``."""
    errors = exc.errors()
    if not errors or not errors[0]["loc"]:
        return "tool.arguments.invalid", None
    field = str(errors[0]["loc"][0])
    return f"argument.{field}.{_problem(errors[0])}", field



def result_schema_of(adapter: TypeAdapter[Any], returned: Any) -> tuple[dict[str, Any] | None, bool | None]:
    """The JSON Schema of the result a return type makes, and whether it is wrapped."""
    if returned is Any:
        return None, None
    try:
        schema = adapter.json_schema(mode="serialization")
    except PydanticUserError:
        return None, None  # dumpable, not describable: the executor checks the size only
    if schema.get("type") == "object":
        return schema, False
    defs = schema.pop("$defs", None)
    wrapped: dict[str, Any] = {"type": "object", "properties": {"value": schema},
                               "required": ["value"], "additionalProperties": False}
    if defs:
        wrapped["$defs"] = defs  # a $ref in the value resolves against the root
    return wrapped, True


def arguments_model_name(capability: str) -> str:
    """The name of the pydantic model of ``capability``'s arguments (``TicketCommentArguments``)."""
    return "".join(part.title() for part in capability.replace("-", "_").replace(".", "_").split("_")) + "Arguments"


def receipt_of(value: Any, intent_key: str) -> dict[str, str]:
    """Evidence of the effect: the intent key and the first few text entries of ``value``."""
    receipt = {"intent_key": intent_key}
    if isinstance(value, Mapping):
        texts = [(str(k), v) for k, v in value.items() if isinstance(v, str | int | bool)]
        receipt.update({k: bounded(str(v)) for k, v in texts[:RECEIPT_ENTRIES]})
    return receipt
