"""Parse the raw argument text a model produced, keeping what a lenient parser would hide."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ParsedArguments:
    """The arguments object, or the reason there is none."""

    value: dict[str, Any] | None
    reason: str | None = None
    field: str | None = None
    detail: str = ""


class _Duplicate(Exception):
    def __init__(self, key: str) -> None:
        self.key = key


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _Duplicate(key)
        seen[key] = value
    return seen


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_arguments(raw: str) -> ParsedArguments:
    """Parse ``raw`` as one JSON object with unique keys at every depth.

    Python's ``json`` keeps the last of duplicate keys; a model (or an attacker) can use
    that to show one value to a reviewer and another to the executor, so a duplicate
    anywhere rejects the candidate. NaN and Infinity are not JSON and are refused too.
    """
    try:
        value = json.loads(raw, object_pairs_hook=_no_duplicates, parse_constant=_no_constants)
    except _Duplicate as dup:
        return ParsedArguments(None, "tool.arguments.duplicate", None, f"duplicate key {dup.key!r}")
    except (ValueError, RecursionError) as exc:
        return ParsedArguments(None, "tool.arguments.malformed", None, str(exc)[:200])
    if not isinstance(value, dict):
        return ParsedArguments(None, "tool.arguments.malformed", None, "arguments are not an object")
    return ParsedArguments(value)
