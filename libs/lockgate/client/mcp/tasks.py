"""A call waiting for a reviewer as an MCP task (the ``io.modelcontextprotocol/tasks`` extension, SEP-2663).

A 2026-07-28 client that declares the extension in its request's client capabilities
(``_meta["io.modelcontextprotocol/clientCapabilities"].extensions``) gets a task instead
of the waiting note when its ``tools/call`` waits for a person: ``resultType: "task"``
with a ``taskId``. The task is no state of the front door's: it is the intent, read from
Lockgate's record each time (``Run.response``), so its status follows the intent:

    pending_approval, paused, withdrawal_requested,   working (statusMessage says which)
    interruption_requested, outcome_unknown
    executed, and every other answer (denied, ...)    completed, with the CallToolResult the
                                                      synchronous path gives (isError for
                                                      all but executed)
    withdrawn                                         cancelled

SEP-2663 keeps ``failed`` for a request that ended in a JSON-RPC error and ``completed``
for every tool result, ``isError`` included: a denied call is ``completed`` with the same
model-facing projection a client without tasks reads, so both see the same answer.

A handshake-era session (2025-11-25) that asks for a task (``params.task`` on
``tools/call``, as that era's experimental tasks have it) gets the same task in that
era's shape: ``{"task": ...}``, state by ``tasks/get``, the result by ``tasks/result``.
That era's schema counts a tool result with ``isError`` as ``failed`` (the extension
changed the rule), so there a denied, expired or refused call is ``failed``, and
``tasks/result`` gives the same model-facing result.

A task id names the run and the candidate, and carries a keyed digest of both: the key
is the bearer token's holder under the trusted configuration (tenant, actor, context),
so any front door process of that binding answers for it, and an id of another run,
tenant or binding, or one altered by a hair, is an unknown task, never a lookup.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import mcp_types as types

from lockgate.client.mcp import results
from lockgate.client.mcp.settings import FrontSettings
from lockgate.contracts.responses import ModelResponse

#: The extension's identifier, in a client's and the server's capabilities.
EXTENSION = "io.modelcontextprotocol/tasks"
#: How often a client is asked to poll ``tasks/get`` (each poll also waits ``status_wait_s``).
POLL_INTERVAL_MS = 1000
#: Statuses of an intent still on its way; their task is ``working``.
MOVING: dict[str, str] = {
    **results.WAITING,
    "withdrawal_requested": "Being withdrawn: an order may be with the adapter.",
    "interruption_requested": "Being interrupted: the call had already been sent.",
    "outcome_unknown": "Its outcome is not known yet; Lockgate is finding out.",
    "replaced": "A reviewer edited this call; the edited call is being decided.",
}
#: A task id: run id, candidate id, creation time (ms), tag.
_TASK_ID = re.compile(r"([A-Za-z0-9_-]{1,64})\.([A-Za-z0-9_-]{1,64})\.([0-9]{1,15})\.([0-9a-f]{32})")
#: Tasks whose creation time this process remembers, so a retried call names its first task.
MAX_REMEMBERED_TASKS = 4096


@dataclass(frozen=True)
class TaskRef:
    """What a task id names: a candidate of a run, and when its task was created."""

    run_id: str
    candidate_id: str
    created_ms: int

    @property
    def created_at(self) -> str:
        """The creation time, ISO 8601 (UTC)."""
        return _iso(self.created_ms)


class TaskIds:
    """Mints and reads task ids for one binding (the key says whose)."""

    def __init__(self, key: bytes) -> None:
        self._key = key
        self._created: OrderedDict[tuple[str, str], int] = OrderedDict()

    @classmethod
    def for_binding(cls, settings: FrontSettings, secret: str | None) -> TaskIds:
        """The ids of the bearer token's holder under the trusted configuration.

        ``secret`` None (stdio: the host launched this process, and nobody else talks to
        it): a key of this process's own, so its task ids mean nothing to another.
        """
        binding = json.dumps([settings.tenant, settings.actor, settings.context, settings.stage],
                             sort_keys=True, ensure_ascii=False)
        token = secret if secret is not None else secrets.token_hex(32)
        return cls(hashlib.sha256(f"lockgate-mcp-task\x1f{token}\x1f{binding}".encode()).digest())

    def mint(self, run_id: str, candidate_id: str) -> str:
        """The task id of a candidate (the same one for a retried call this process answered before)."""
        remembered = (run_id, candidate_id)
        created_ms = self._created.get(remembered)
        if created_ms is None:
            created_ms = int(time.time() * 1000)
            self._created[remembered] = created_ms
            while len(self._created) > MAX_REMEMBERED_TASKS:
                self._created.popitem(last=False)
        body = f"{run_id}.{candidate_id}.{created_ms}"
        return f"{body}.{self._tag(body)}"

    def read(self, task_id: object) -> TaskRef | None:
        """The task an id names, or None when it is none of this binding's (or not an id at all)."""
        if not isinstance(task_id, str):
            return None
        matched = _TASK_ID.fullmatch(task_id)
        if matched is None:
            return None
        run_id, candidate_id, created, tag = matched.groups()
        if not hmac.compare_digest(tag, self._tag(f"{run_id}.{candidate_id}.{created}")):
            return None
        return TaskRef(run_id, candidate_id, int(created))

    def _tag(self, body: str) -> str:
        return hmac.new(self._key, body.encode("ascii"), hashlib.sha256).hexdigest()[:32]


def client_supports_tasks(meta: Mapping[str, Any] | None) -> bool:
    """True when a request's ``_meta`` declares the tasks extension among the client's capabilities."""
    if not isinstance(meta, Mapping):
        return False
    capabilities = meta.get(types.CLIENT_CAPABILITIES_META_KEY)
    if not isinstance(capabilities, Mapping):
        return False
    extensions = capabilities.get("extensions")
    return isinstance(extensions, Mapping) and isinstance(extensions.get(EXTENSION), Mapping)


def status_of(response: ModelResponse) -> str:
    """The task status of an intent's latest answer."""
    if response.status in MOVING:
        return "working"
    if response.status == "withdrawn":
        return "cancelled"
    return "completed"


def snapshot(task_id: str, ref: TaskRef, response: ModelResponse, *, updated_ms: int) -> dict[str, Any]:
    """The task as ``tasks/get`` answers it: its state, and the tool's result once it has one."""
    status = status_of(response)
    task: dict[str, Any] = {
        "taskId": task_id,
        "status": status,
        "statusMessage": _message(response),
        "createdAt": ref.created_at,
        "lastUpdatedAt": _iso(max(updated_ms, ref.created_ms)),
        # The intent stays on Lockgate's record: the task is kept as long as it is.
        "ttlMs": None,
        "pollIntervalMs": POLL_INTERVAL_MS,
    }
    if status == "completed":
        result = results.tool_result(response).model_dump(by_alias=True, mode="json", exclude_none=True)
        task["result"] = {"resultType": "complete", **result}
    return task


def handshake_status_of(response: ModelResponse) -> str:
    """The task status of an intent's latest answer in the 2025-11-25 era: ``failed`` for every
    ended call that did not execute ("for tool calls, a result with ``isError``")."""
    status = status_of(response)
    if status == "completed" and response.status != results.EXECUTED:
        return "failed"
    return status


def handshake_task(task_id: str, ref: TaskRef, response: ModelResponse, *, updated_ms: int) -> dict[str, Any]:
    """The task in the 2025-11-25 era's shape (its experimental tasks): state only, the result by ``tasks/result``."""
    return {
        "taskId": task_id,
        "status": handshake_status_of(response),
        "statusMessage": _message(response),
        "createdAt": ref.created_at,
        "lastUpdatedAt": _iso(max(updated_ms, ref.created_ms)),
        "ttl": None,
        "pollInterval": POLL_INTERVAL_MS,
    }


def created(task_id: str, ref: TaskRef, response: ModelResponse) -> dict[str, Any]:
    """The ``tools/call`` answer that hands the client a task instead of a result."""
    task = snapshot(task_id, ref, response, updated_ms=ref.created_ms)
    task.pop("result", None)
    return {"resultType": "task", **task}


def _message(response: ModelResponse) -> str:
    waiting = MOVING.get(response.status)
    if waiting is not None:
        return waiting
    return f"{response.status} ({response.code})"


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
