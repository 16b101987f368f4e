"""What a provider's response or stream becomes: calls to propose, or failures to record.

A provider's item is hostile input from a network peer: everything here is total (a
value or a typed failure, never an exception from a malformed item), bounded (an item
kept as evidence is at most ``MAX_ITEM_BYTES``; a failure's text at most
``MAX_FAILURE_TEXT_BYTES``) and deterministic (the same bytes give the same call ids,
so handing a response again proposes the same intents and Lockgate deduplicates them).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from lockgate.client.sdk import ClientError
from lockgate.contracts.messages import Tool
from lockgate.core.ids import derived_id, is_subject_token

#: The provider formats this package reads and writes.
PROVIDERS = ("openai.chat", "openai.responses", "anthropic.messages", "gemini")

#: Every reason code this package records on a candidate (``assembly_failure``), with
#: its meaning. Public contract: a test pins the list.
FAILURES: dict[str, str] = {
    "stream.truncated": "the stream ended, or the item's terminal boundary came, with arguments that are not complete JSON",
    "stream.conflicting-delta": "a second id or name for one item, or deltas for an item after it closed",
    "stream.repeated-field": "a field that may appear once in a stream appeared again",
    "stream.too-large": "the arguments grew past the size limit mid-stream; accumulation stopped",
    "stream.cancelled": "the runtime cancelled the stream while the item was open",
    "provider.unknown-item": "an item kind this code does not know (recorded, not guessed at)",
    "provider.item-malformed": "a tool-call item without the fields its format requires",
}

#: Largest provider item kept verbatim on a candidate; a larger one is kept as its size and digest.
MAX_ITEM_BYTES = 8 * 1024
#: Largest prefix of what arrived that a failure records as its arguments.
MAX_FAILURE_TEXT_BYTES = 4 * 1024
#: Default limit on one call's argument text. A candidate message may have 2 MiB
#: (``MAX_CANDIDATE_MESSAGE_BYTES``) and JSON escaping can grow text up to six-fold,
#: so anything past this could not be sent in one candidate anyway.
MAX_ARGUMENTS_BYTES = 256 * 1024
#: Deepest nesting of a provider item kept verbatim: intake refuses an envelope deeper
#: than 64 levels, so a deep item is kept as its digest rather than sink the candidate.
MAX_ITEM_DEPTH = 24

#: What the providers send for "no arguments" becomes this (the original stays in the item).
NO_ARGUMENTS = "{}"


class ProviderError(ClientError):
    """A provider response or stream event that cannot be read at all (not JSON, wrong shape).

    Nothing can be recorded for it: there is no item to attribute it to. An item that is
    readable but wrong becomes a recorded failure instead.
    """


@dataclass(frozen=True)
class ProviderCall:
    """One item of a provider's response: a call to propose, or a failure to record.

    ``call_id`` is Lockgate's (a subject token); ``provider_call_id`` the provider's own,
    which the tool result must name. ``failure`` is a reason code of ``FAILURES``, and
    then ``arguments`` is a bounded prefix of what arrived. ``answered`` says whether the
    provider expects a tool result for the item (a server-side tool or a cancelled
    stream expects none).
    """

    provider: str
    position: str
    tool: str
    """The capability name (the provider-facing name mapped back through the turn's catalogue)."""
    arguments: str
    call_id: str
    provider_call_id: str | None
    provider_item: dict[str, Any]
    provider_tool: str = ""
    """The tool name as the model wrote it (what a Gemini ``functionResponse`` must repeat)."""
    failure: str | None = None
    answered: bool = True
    detail: str = ""


@dataclass(frozen=True)
class ParsedResponse:
    """Every item of one provider response that Lockgate must see, in order."""

    provider: str
    model: str
    response_id: str
    calls: tuple[ProviderCall, ...] = field(default=())

    @property
    def failures(self) -> tuple[ProviderCall, ...]:
        """The items recorded as failures (never run)."""
        return tuple(c for c in self.calls if c.failure is not None)


@dataclass(frozen=True)
class Draft:
    """An open streamed item, for a runtime to show as "drafting": never a call."""

    position: str
    tool: str
    size_bytes: int


# --- tool names --------------------------------------------------------------------


def provider_tool_name(name: str) -> str:
    """The name a capability is offered under to a provider, whose tool names may not hold dots.

    OpenAI and Anthropic accept only ``[A-Za-z0-9_-]``. The way back goes through the
    turn's catalogue (``tool_names``), never by replacing text, so a name the model
    made up is not turned into one it was offered.
    """
    return name.replace(".", "__")


def tool_names(tools: Sequence[Tool]) -> dict[str, str]:
    """The provider-facing name of every offered tool, mapped to its capability name.

    Raises:
        ProviderError: two offered capabilities map to the same provider name.
    """
    names: dict[str, str] = {}
    for tool in tools:
        offered = provider_tool_name(tool.name)
        if names.get(offered, tool.name) != tool.name:
            raise ProviderError(f"{tool.name} and {names[offered]} are both offered as {offered}",
                                code="provider.tool-names-collide")
        names[offered] = tool.name
    return names


def capability_name(name: str, names: Mapping[str, str]) -> str:
    """The capability a provider-facing tool name stands for (unknown names pass as they are:
    intake refuses a tool that was not offered, on the record)."""
    return names.get(name, name)


# --- bounds and identities ---------------------------------------------------------


def utf8_prefix(text: str, limit: int = MAX_FAILURE_TEXT_BYTES) -> str:
    """At most ``limit`` UTF-8 bytes of ``text``, cut on a character boundary."""
    # A lone surrogate (text a runtime decoded itself may hold one) cannot be sent as
    # JSON text: it is kept as "?", which is evidence enough of a failure.
    data = text.encode("utf-8", "replace")
    # "ignore" drops only the character the cut split.
    return data[:limit].decode("utf-8", "ignore")


def is_text(value: str) -> bool:
    """True when ``value`` can be sent as UTF-8 (it holds no lone surrogate)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def joined(pieces: Sequence[str]) -> str:
    """Argument fragments as one text: a surrogate pair split across two fragments is one character."""
    text = "".join(pieces)
    if any("\ud800" <= ch <= "\udfff" for ch in text):
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "surrogatepass")
    return text


def _depth(value: object) -> int:
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            deepest = max(deepest, level)
            stack.extend((v, level + 1) for v in node.values())
        elif isinstance(node, list):
            deepest = max(deepest, level)
            stack.extend((v, level + 1) for v in node)
    return deepest


def digest(data: bytes) -> str:
    """The ``sha256:`` digest of ``data``."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def bounded_item(item: Mapping[str, Any], raw: bytes | None = None) -> dict[str, Any]:
    """The provider item as kept on the record: itself, or its size and digest when too big or deep.

    ``raw`` is the item's bytes as the provider sent them, when known: the digest names
    those, so it can be matched against a stored response.
    """
    try:
        encoded = msgspec.json.encode(item)
    except (msgspec.EncodeError, UnicodeEncodeError, TypeError, RecursionError, OverflowError):
        encoded = b""
    evidence = raw if raw is not None else encoded
    size = max(len(encoded), len(evidence))
    if encoded and size <= MAX_ITEM_BYTES and _depth(item) <= MAX_ITEM_DEPTH:
        return dict(item)
    return {"truncated": True, "bytes": size, "digest": digest(evidence)}


def response_key(response_id: object, raw: bytes) -> str:
    """What a response's derived call ids are made from: its id, or the digest of its bytes."""
    if isinstance(response_id, str) and response_id:
        return "id:" + response_id
    return digest(raw)


def call_id_for(provider: str, key: str, position: str, provider_id: object) -> str:
    """Lockgate's call id for an item: the provider's when it is a subject token, else derived.

    Derived, never random: handing the same response again must propose the same
    intents, so Lockgate deduplicates them instead of acting twice.
    """
    if isinstance(provider_id, str) and is_subject_token(provider_id):
        return provider_id
    return "lg-" + derived_id("provider-call", provider, key, position)


def is_complete_json(text: str) -> bool:
    """True when ``text`` is one complete JSON value (duplicate keys allowed: intake judges them)."""
    if not is_text(text):
        return False
    try:
        msgspec.json.decode(text.encode("utf-8"))
    except msgspec.DecodeError:
        return False
    except RecursionError:
        return True  # complete but deep: intake refuses it, on the record
    return True
