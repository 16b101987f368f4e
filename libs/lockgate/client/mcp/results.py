"""MCP's shapes for Lockgate's answers: the model-facing projection, nothing more.

A tool call's result carries what ``providers.model_content`` lets a model read
(status, code, the argument at fault, a result nested under ``untrusted_data`` and
labelled ``untrusted-data``); never an internal reason. ``executed`` is a result; a call
waiting for a reviewer (or for policy's evidence) is a result too, not an error, saying
how to learn its outcome; every other status is ``isError``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

import mcp_types as types

from lockgate.client.providers.formats import model_content
from lockgate.contracts.responses import ModelResponse

#: The front door's own tool: the current answer to a call that was waiting.
STATUS_TOOL = "lockgate_status"
#: Statuses of a call that has not ended: the host is told to ask again later.
WAITING: dict[str, str] = {
    "pending_approval": "Waiting for a reviewer: this call runs only once a person approves it.",
    "paused": "Paused: policy is waiting for evidence before this call may run.",
}
#: The one status that is a plain result.
EXECUTED = "executed"

#: Codes the front door itself answers with (Lockgate's own codes pass through as they are).
STATUS_UNKNOWN_CANDIDATE = "status.unknown-candidate"
STATUS_MALFORMED = "status.malformed"
FRONT_CODES = (STATUS_UNKNOWN_CANDIDATE, STATUS_MALFORMED)

#: The status tool's declaration: one candidate id, as a waiting result gave it.
STATUS_TOOL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"candidate_id": {
        "type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$",
        "description": "The candidate_id a waiting call's result gave."}},
    "required": ["candidate_id"],
    "additionalProperties": False,
}
STATUS_TOOL_DESCRIPTION = (
    "The current outcome of a call that was waiting (for a reviewer's approval, or for policy): "
    "pass the candidate_id its result gave. Answers within a few seconds, still waiting or not."
)


def arguments_text(arguments: dict[str, Any] | None) -> str:
    """The MCP arguments object as JSON text, the same text for the same object every time.

    Keys sorted, no insignificant whitespace, non-ASCII as is: a retried request proposes
    the same bytes, and so is the same intent. No arguments is ``{}``.
    """
    return json.dumps(arguments if arguments is not None else {}, sort_keys=True,
                      separators=(",", ":"), ensure_ascii=False)


def call_id_for(request_id: str | int) -> str:
    """The Lockgate call id of an MCP request: derived from its JSON-RPC id, so a retry is the same call.

    JSON-RPC ids are unique within a session and a session has its own run, so the id
    names one call of the run; ``1`` and ``"1"`` are different ids.
    """
    kind = "n" if isinstance(request_id, int) else "s"
    return "mcp-" + hashlib.sha256(f"{kind}:{request_id}".encode("utf-8", "surrogatepass")).hexdigest()[:32]


def stateless_call_id_for(request_id: str | int, name: str, arguments: str) -> str:
    """The Lockgate call id of a stateless (2026-07-28) request: its JSON-RPC id, tool and argument text.

    Without a session, JSON-RPC ids are unique only within one client's connection: two
    clients both start at 0 or 1. The era gives a first request nothing else that stays
    the same when it is sent again (``requestState`` and task ids are the server's, handed
    out in an answer; ``clientInfo`` is self-reported), so the id is derived from what a
    retry repeats byte for byte: its id, its tool and its arguments (``arguments_text``).
    A retry is the same call, so the same intent; two clients' calls under one id are two
    calls unless they are the very same call of the same tool, which is one intent
    (at most once: never a second effect). A client that must make the very same call
    twice names each with its own idempotency key (``keyed_call_id_for``).
    """
    kind = "n" if isinstance(request_id, int) else "s"
    body = f"{kind}:{request_id}\x1f{name}\x1f{arguments}"
    return "mcp2-" + hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest()[:32]


#: A stateless client's own name for one call, kept when it retries (``_meta``, Lockgate's prefix).
IDEMPOTENCY_KEY_META = "io.lockgate/idempotency-key"
#: An idempotency key is 1 to this many characters of printable ASCII.
MAX_IDEMPOTENCY_KEY_CHARS = 256
_IDEMPOTENCY_KEY = re.compile(rf"[\x21-\x7e]{{1,{MAX_IDEMPOTENCY_KEY_CHARS}}}")


class BadIdempotencyKey(ValueError):
    """A request's ``_meta`` names an idempotency key that is not 1-256 printable ASCII characters."""


def idempotency_key(meta: Mapping[str, Any] | None) -> str | None:
    """The client's idempotency key in a request's ``_meta`` (``io.lockgate/idempotency-key``), if it sent one.

    Raises:
        BadIdempotencyKey: it sent one that is not a string of 1-256 printable ASCII characters.
    """
    if not isinstance(meta, Mapping) or IDEMPOTENCY_KEY_META not in meta:
        return None
    key = meta[IDEMPOTENCY_KEY_META]
    if not isinstance(key, str) or _IDEMPOTENCY_KEY.fullmatch(key) is None:
        raise BadIdempotencyKey(f"{IDEMPOTENCY_KEY_META} must be 1 to {MAX_IDEMPOTENCY_KEY_CHARS} "
                                "printable ASCII characters")
    return key


def keyed_call_id_for(key: str) -> str:
    """The Lockgate call id of a stateless request that names its own idempotency key.

    The key alone names the call: the same key again is the same intent, whatever its
    JSON-RPC id, and the same key with another tool or other arguments is refused by
    Lockgate as a call id reused with other bytes (``proposal.invalid``), never run.
    """
    return "mcpk-" + hashlib.sha256(key.encode("ascii")).hexdigest()[:32]


def _text(value: object) -> types.TextContent:
    return types.TextContent(type="text", text=json.dumps(value, ensure_ascii=False, sort_keys=True))


def tool_result(response: ModelResponse) -> types.CallToolResult:
    """What the MCP client sees of a response: the projection, as JSON text and as structured content."""
    content = model_content(response)
    if response.status in WAITING:
        content = {**content, "candidate_id": response.candidate_id}
        note = (f"{WAITING[response.status]} Call {STATUS_TOOL} with "
                f'{{"candidate_id": "{response.candidate_id}"}} to learn its outcome.')
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=note), _text(content)],
            structured_content=content, is_error=False)
    return types.CallToolResult(content=[_text(content)], structured_content=content,
                                is_error=response.status != EXECUTED)


def error_result(code: str, message: str, *, candidate_id: str | None = None) -> types.CallToolResult:
    """A call Lockgate did not answer (``lockgate.unavailable``, ``response.timeout``, ...) or refused outright.

    ``candidate_id`` is set when the call may still be in flight: ``lockgate_status``
    then tells how it ended.
    """
    content: dict[str, Any] = {"status": "error", "code": code, "message": message}
    if candidate_id is not None:
        content["candidate_id"] = candidate_id
    return types.CallToolResult(content=[_text(content)], structured_content=content, is_error=True)
