"""Read what a runtime sent, keeping what a lenient parser would hide and refusing what it would choke on.

Both readers here are total: whatever the bytes, they return a value or a reason, never
raise. Nesting is bounded before anything is decoded (msgspec and ``json`` both recurse
and raise ``RecursionError`` a thousand levels down), and text that cannot be stored as
UTF-8 (a lone surrogate written as a ``\\ud800`` escape) is refused at the door instead
of failing the first encoder it meets.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

import msgspec

from lockgate.contracts.messages import Candidate
from lockgate.core.text import safe_text

#: Deepest nesting of ``{`` and ``[`` accepted in a candidate's envelope (the provider
#: item included) and in its arguments. A model's tool call is rarely deeper than five.
MAX_ENVELOPE_DEPTH = 64
MAX_ARGUMENTS_DEPTH = 32

# A JSON string; possessive, so a long unterminated one costs one pass, not a backtrack.
_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+"', re.DOTALL)
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"{}[]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def nesting_within(data: bytes, limit: int) -> bool:
    """True when the JSON text ``data`` nests ``{``/``[`` at most about ``limit`` deep.

    Cheap: a count when there are few brackets at all; otherwise strings are cut out
    (a regular expression), everything but brackets deleted, and innermost pairs
    removed ``limit`` times (C-speed ``bytes`` operations, no recursion). Accepted text
    is at most ``2 * limit`` deep; text ``limit`` deep is always accepted. Unbalanced
    brackets are not "within" anything.
    """
    if data.count(b"{") + data.count(b"[") <= limit:
        return True
    brackets = _STRING.sub(b"", data).translate(None, _NOT_BRACKET)
    for _ in range(limit):
        shorter = brackets.replace(b"{}", b"").replace(b"[]", b"")
        if not shorter:
            return True
        if len(shorter) == len(brackets):
            return False
        brackets = shorter
    return False


@dataclass(frozen=True)
class DecodedCandidate:
    """The candidate envelope, or why it cannot be read (``candidate`` is then ``None``)."""

    candidate: Candidate | None
    detail: str = ""


_candidate = msgspec.json.Decoder(Candidate)


def decode_candidate(data: bytes) -> DecodedCandidate:
    """Decode a candidate message, whatever its bytes."""
    if not nesting_within(data, MAX_ENVELOPE_DEPTH):
        return DecodedCandidate(None, f"nested deeper than {MAX_ENVELOPE_DEPTH} levels")
    try:
        return DecodedCandidate(_candidate.decode(data))
    except (msgspec.MsgspecError, RecursionError, ValueError) as exc:
        return DecodedCandidate(None, safe_text(str(exc), 200))


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


def _finite(text: str) -> float:
    # 1e999 is valid JSON that Python reads as infinity: no canonical form, no digest.
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is out of range")
    return value


#: I-JSON (RFC 7493): integers beyond a double's exact range do not survive other
#: parsers, and RFC 8785 (the digest's serializer) refuses them.
_SAFE_INT = 2**53 - 1


def _interoperable_int(text: str) -> int:
    value = int(text)
    if abs(value) > _SAFE_INT:
        raise ValueError(f"integer {text[:40]} is out of the interoperable range")
    return value


def _storable(value: Any) -> bool:
    """True when every string in ``value`` encodes as UTF-8 (no lone surrogates)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True
    if isinstance(value, dict):
        return all(_storable(k) and _storable(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_storable(v) for v in value)
    return True


def parse_arguments(raw: str) -> ParsedArguments:
    """Parse ``raw`` as one JSON object with unique keys at every depth.

    Python's ``json`` keeps the last of duplicate keys; a model (or an attacker) can use
    that to show one value to a reviewer and another to the executor, so a duplicate
    anywhere rejects the candidate. NaN, Infinity, numbers out of a double's (exact)
    range, lone surrogates and nesting deeper than ``MAX_ARGUMENTS_DEPTH`` are refused
    too: none has a canonical form to digest or store.
    """
    if not nesting_within(raw.encode("utf-8", "surrogatepass"), MAX_ARGUMENTS_DEPTH):
        return ParsedArguments(None, "tool.arguments.too-deep", None,
                               f"nested deeper than {MAX_ARGUMENTS_DEPTH} levels")
    try:
        value = json.loads(raw, object_pairs_hook=_no_duplicates, parse_constant=_no_constants,
                           parse_float=_finite, parse_int=_interoperable_int)
    except _Duplicate as dup:
        return ParsedArguments(None, "tool.arguments.duplicate", None,
                               safe_text(f"duplicate key {dup.key!r}", 200))
    except (ValueError, RecursionError) as exc:
        return ParsedArguments(None, "tool.arguments.malformed", None, safe_text(str(exc), 200))
    if not isinstance(value, dict):
        return ParsedArguments(None, "tool.arguments.malformed", None, "arguments are not an object")
    if _SURROGATE_ESCAPE.search(raw) and not _storable(value):
        return ParsedArguments(None, "tool.arguments.malformed", None, "a string holds a lone surrogate")
    return ParsedArguments(value)
