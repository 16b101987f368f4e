"""The front door in both MCP eras: the stateless 2026-07-28 era beside the handshake one.

The official SDK's client pinned to each era (``mode="legacy"``, ``mode="2026-07-28"``)
over stdio and streamable HTTP; the tasks extension (SEP-2663) driven as a client sends
it, raw JSON-RPC over HTTP, since the Python client has no tasks support. Assertions
read the case-notes world's ledger and Lockgate's record.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp.client import Client, ClientSession
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp.shared.subscriptions import ToolsListChanged

from lockgate.client.mcp.results import IDEMPOTENCY_KEY_META
from lockgate.client.sdk import Gateway
from lockgate.operations.supervisor import parent_death_signal
from lockgate.testing.mcp_front import Front, front_env, http_front
from lockgate.testing.system import REPO, System
from lockgate.worlds.casenotes.world import World

TENANT = "tenant-a"
ACTOR = "user-42"
MODERN = "2026-07-28"
TASKS = "io.modelcontextprotocol/tasks"
INVALID_PARAMS = -32602


@pytest.fixture(scope="module")
def plain(system: System) -> Iterator[Front]:
    """A front door whose case takes notes at once."""
    with http_front(system, "case-load-11", "mcp-modern-plain", status_wait_s=1) as f:
        yield f


@pytest.fixture(scope="module")
def sensitive(system: System) -> Iterator[Front]:
    """A front door whose case's notes wait for a reviewer."""
    with http_front(system, "case-sensitive", "mcp-modern-sensitive", status_wait_s=1) as f:
        yield f


def envelope(*, tasks: bool) -> dict[str, Any]:
    """The per-request ``_meta`` a 2026-07-28 client sends (with the tasks extension, or not)."""
    capabilities: dict[str, Any] = {"extensions": {TASKS: {}}} if tasks else {}
    return {types.PROTOCOL_VERSION_META_KEY: MODERN, types.CLIENT_CAPABILITIES_META_KEY: capabilities,
            types.CLIENT_INFO_META_KEY: {"name": "raw-client", "version": "0"}}


async def rpc(http: httpx2.AsyncClient, url: str, method: str, params: dict[str, Any], request_id: object, *,
              tasks: bool = False, name: str | None = None, meta: object = None,
              version: str = MODERN) -> dict[str, Any]:
    """One stateless request as a client sends it (headers mirror the body); its JSON-RPC answer."""
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
               "MCP-Protocol-Version": version, "Mcp-Method": method}
    if name is not None:
        headers["Mcp-Name"] = name
    body = {"jsonrpc": "2.0", "id": request_id, "method": method,
            "params": {**params, "_meta": envelope(tasks=tasks) if meta is None else meta}}
    answer = await http.post(url, content=json.dumps(body), headers=headers)
    if answer.headers.get("content-type", "").startswith("text/event-stream"):
        frames = [json.loads(line[5:]) for line in answer.text.splitlines() if line.startswith("data:")]
        return next(frame for frame in frames if frame.get("id") == request_id)
    decoded: dict[str, Any] = answer.json()
    return decoded


async def call(front: Front, note: str, request_id: object, *, tasks: bool = False) -> dict[str, Any]:
    async with front.client() as http:
        return await rpc(http, front.url, "tools/call", {"name": "case.add_note", "arguments": {"note": note}},
                         request_id, tasks=tasks, name="case.add_note")


async def task_rpc(front: Front, method: str, task_id: str, request_id: object = 7) -> dict[str, Any]:
    async with front.client() as http:
        return await rpc(http, front.url, method, {"taskId": task_id}, request_id, tasks=True, name=task_id)


def notes_on(world: World, case_id: str) -> list[dict[str, str]]:
    return [row for row in world.ledger() if row["case_id"] == case_id]


def candidate_of(task_id: str) -> str:
    """A task id names its run and candidate (``run.candidate.created.tag``)."""
    return task_id.split(".")[1]


async def settled(front: Front, task_id: str) -> dict[str, Any]:
    """Poll ``tasks/get`` (each answer waits briefly itself) until the task is no longer working."""
    for _ in range(60):
        got = await task_rpc(front, "tasks/get", task_id)
        if got["result"]["status"] != "working":
            return dict(got["result"])
    raise AssertionError(f"task {task_id} still working")


# --- both eras, the SDK's own client ----------------------------------------------


@pytest.mark.parametrize("mode", ["legacy", MODERN])
async def test_http_each_era_lists_and_calls(plain: Front, world: World, mode: str) -> None:
    before = len(notes_on(world, "case-load-11"))
    async with plain.client() as http, Client(streamable_http_client(plain.url, http_client=http), mode=mode,
                                              read_timeout_seconds=60) as client:
        assert client.protocol_version == ("2025-11-25" if mode == "legacy" else MODERN)
        listed = await client.list_tools()
        assert {"case.add_note", "lockgate_status"} <= {tool.name for tool in listed.tools}
        done = await client.call_tool("case.add_note", {"note": f"Over HTTP, era {mode}."})
    assert done.is_error is not True, done
    assert done.structured_content is not None and done.structured_content["status"] == "executed"
    assert len(notes_on(world, "case-load-11")) == before + 1


@pytest.mark.parametrize("mode", ["legacy", MODERN])
async def test_stdio_each_era_lists_and_calls(system: System, world: World, mode: str) -> None:
    params = StdioServerParameters(command=sys.executable, args=["-m", "lockgate.client.mcp", "--stdio"],
                                   env=front_env(system, "case-load-12", status_wait_s=1), cwd=str(REPO))
    before = len(notes_on(world, "case-load-12"))
    async with Client(params, mode=mode, read_timeout_seconds=60) as client:
        assert client.protocol_version == ("2025-11-25" if mode == "legacy" else MODERN)
        listed = await client.list_tools()
        assert "case.add_note" in {tool.name for tool in listed.tools}
        done = await client.call_tool("case.add_note", {"note": f"Over stdio, era {mode}."})
    assert done.structured_content is not None and done.structured_content["status"] == "executed"
    assert len(notes_on(world, "case-load-12")) == before + 1


async def test_discover_names_the_era_and_the_tasks_extension(plain: Front) -> None:
    async with plain.client() as http:
        found = await rpc(http, plain.url, "server/discover", {}, 1)
    assert MODERN in found["result"]["supportedVersions"]
    capabilities = found["result"]["capabilities"]
    assert capabilities["extensions"][TASKS] == {}
    assert capabilities["tools"]["listChanged"] is True  # subscriptions/listen is served


# --- the stateless era's call ids ---------------------------------------------------


async def test_a_stateless_retry_is_the_same_intent(plain: Front, world: World) -> None:
    """The same request sent twice, on two connections, with no session: one write."""
    before = len(notes_on(world, "case-load-11"))
    first = await call(plain, "Retried without a session.", 1)
    again = await call(plain, "Retried without a session.", 1)
    assert first["result"]["structuredContent"]["status"] == "executed"
    assert again["result"]["structuredContent"] == first["result"]["structuredContent"]
    assert len(notes_on(world, "case-load-11")) == before + 1


async def test_two_clients_whose_ids_collide_are_two_intents(plain: Front, world: World) -> None:
    """Both clients start at id 0: their different calls are two intents, two writes."""
    before = len(notes_on(world, "case-load-11"))
    one = await call(plain, "Client one's first call.", 0)
    two = await call(plain, "Client two's first call.", 0)
    assert one["result"]["structuredContent"]["status"] == "executed"
    assert two["result"]["structuredContent"]["status"] == "executed"
    written = notes_on(world, "case-load-11")[before:]
    assert len(written) == 2
    assert len({row["intent_id"] for row in written}) == 2


async def keyed_call(front: Front, note: str, request_id: object, key: object) -> dict[str, Any]:
    """A stateless call that names its own idempotency key in ``_meta``."""
    meta = {**envelope(tasks=False), IDEMPOTENCY_KEY_META: key}
    async with front.client() as http:
        return await rpc(http, front.url, "tools/call", {"name": "case.add_note", "arguments": {"note": note}},
                         request_id, name="case.add_note", meta=meta)


async def test_the_very_same_call_under_two_idempotency_keys_is_two_intents(plain: Front, world: World) -> None:
    """Without a key, the same id, tool and arguments are one call; a key tells two such calls apart."""
    before = len(notes_on(world, "case-load-11"))
    one = await keyed_call(plain, "Said twice, meant twice.", 0, "order-7f3a-1")
    two = await keyed_call(plain, "Said twice, meant twice.", 0, "order-7f3a-2")
    assert one["result"]["structuredContent"]["status"] == "executed"
    assert two["result"]["structuredContent"]["status"] == "executed"
    written = notes_on(world, "case-load-11")[before:]
    assert len(written) == 2 and len({row["intent_id"] for row in written}) == 2


async def test_a_key_retried_under_another_request_id_is_the_same_intent(plain: Front, world: World) -> None:
    before = len(notes_on(world, "case-load-11"))
    first = await keyed_call(plain, "Retried by key.", 3, "retry-by-key-1")
    again = await keyed_call(plain, "Retried by key.", "a-new-id", "retry-by-key-1")
    assert first["result"]["structuredContent"]["status"] == "executed"
    assert again["result"]["structuredContent"] == first["result"]["structuredContent"]
    assert len(notes_on(world, "case-load-11")) == before + 1


async def test_a_key_reused_with_other_arguments_is_refused_and_runs_nothing(plain: Front, world: World) -> None:
    before = len(notes_on(world, "case-load-11"))
    first = await keyed_call(plain, "The key's own call.", 1, "reused-key-1")
    other = await keyed_call(plain, "Another call under that key.", 2, "reused-key-1")
    assert first["result"]["structuredContent"]["status"] == "executed"
    assert other["result"]["isError"] is True
    assert other["result"]["structuredContent"] == {"status": "rejected", "code": "proposal.invalid"}
    assert [row["intent_id"] for row in notes_on(world, "case-load-11")[before:]] == [
        notes_on(world, "case-load-11")[before]["intent_id"]]


@pytest.mark.parametrize("key", ["", "x" * 257, "tab\there", "caf\u00e9", 7, None, ["k"]])
async def test_a_malformed_idempotency_key_is_invalid_params_and_runs_nothing(
    plain: Front, world: World, key: object,
) -> None:
    before = len(notes_on(world, "case-load-11"))
    answer = await keyed_call(plain, "A malformed key.", 9, key)
    assert answer["error"]["code"] == INVALID_PARAMS
    assert "idempotency-key" in answer["error"]["message"]
    assert len(notes_on(world, "case-load-11")) == before


# --- a waiting call as a task -------------------------------------------------------


async def test_a_waiting_call_is_a_task_that_completes_once_approved(
    system: System, sensitive: Front, reviewer: Gateway, world: World,
) -> None:
    before = len(notes_on(world, "case-sensitive"))
    created = (await call(sensitive, "Task, approved.", "approve-1", tasks=True))["result"]
    assert (created["resultType"], created["status"]) == ("task", "working")
    assert created["ttlMs"] is None and created["pollIntervalMs"] > 0
    assert "reviewer" in created["statusMessage"]
    task_id = created["taskId"]

    working = (await task_rpc(sensitive, "tasks/get", task_id))["result"]
    assert (working["resultType"], working["taskId"], working["status"]) == ("complete", task_id, "working")
    assert "result" not in working
    assert len(notes_on(world, "case-sensitive")) == before

    review = await system.review_requested(TENANT, candidate_of(task_id))
    await reviewer.decide_review(tenant=TENANT, candidate_id=candidate_of(task_id), review_id=review.review_id,
                                 digest=review.digest, approve=True)
    done = await settled(sensitive, task_id)
    assert done["status"] == "completed"
    assert done["result"]["isError"] is False
    assert done["result"]["structuredContent"]["status"] == "executed"
    assert len(notes_on(world, "case-sensitive")) == before + 1

    # Retrying the call is the same intent: the same task, which is done.
    again = (await call(sensitive, "Task, approved.", "approve-1", tasks=True))["result"]
    assert again["structuredContent"]["status"] == "executed"
    assert len(notes_on(world, "case-sensitive")) == before + 1


async def test_a_denied_task_completes_with_the_refusal(
    system: System, sensitive: Front, reviewer: Gateway, world: World,
) -> None:
    """SEP-2663: ``failed`` is a JSON-RPC error; a refused tool call is a result with isError."""
    before = len(notes_on(world, "case-sensitive"))
    task_id = (await call(sensitive, "Task, denied.", "deny-1", tasks=True))["result"]["taskId"]
    review = await system.review_requested(TENANT, candidate_of(task_id))
    await reviewer.decide_review(tenant=TENANT, candidate_id=candidate_of(task_id), review_id=review.review_id,
                                 digest=review.digest, approve=False, reason="not this one")
    done = await settled(sensitive, task_id)
    assert done["status"] == "completed"
    assert done["result"]["isError"] is True
    assert done["result"]["structuredContent"]["status"] not in ("executed", "pending_approval")
    assert "not this one" not in json.dumps(done)  # the projection only, never the reason
    assert len(notes_on(world, "case-sensitive")) == before


async def test_cancelling_a_task_withdraws_its_call(sensitive: Front, world: World) -> None:
    before = len(notes_on(world, "case-sensitive"))
    task_id = (await call(sensitive, "Task, cancelled.", "cancel-1", tasks=True))["result"]["taskId"]
    cancelled = (await task_rpc(sensitive, "tasks/cancel", task_id))["result"]
    assert (cancelled["resultType"], cancelled["status"]) == ("complete", "cancelled")
    got = (await task_rpc(sensitive, "tasks/get", task_id))["result"]
    assert got["status"] == "cancelled"
    # The intent is withdrawn on the record, and the world was never touched.
    async with sensitive.client() as http:
        status = await rpc(http, sensitive.url, "tools/call",
                           {"name": "lockgate_status", "arguments": {"candidate_id": candidate_of(task_id)}},
                           8, name="lockgate_status")
    assert status["result"]["structuredContent"]["status"] == "withdrawn"
    assert len(notes_on(world, "case-sensitive")) == before


async def test_a_cancel_after_the_call_executed_answers_completed(
    system: System, sensitive: Front, reviewer: Gateway, world: World,
) -> None:
    before = len(notes_on(world, "case-sensitive"))
    task_id = (await call(sensitive, "Task, approved then cancelled.", "late-1", tasks=True))["result"]["taskId"]
    review = await system.review_requested(TENANT, candidate_of(task_id))
    await reviewer.decide_review(tenant=TENANT, candidate_id=candidate_of(task_id), review_id=review.review_id,
                                 digest=review.digest, approve=True)
    assert (await settled(sensitive, task_id))["status"] == "completed"
    late = (await task_rpc(sensitive, "tasks/cancel", task_id))["result"]
    assert late["status"] == "completed"
    assert late["result"]["structuredContent"]["status"] == "executed"
    assert len(notes_on(world, "case-sensitive")) == before + 1


async def test_without_tasks_support_a_waiting_call_is_todays_note(sensitive: Front) -> None:
    answer = (await call(sensitive, "No tasks here.", "note-1", tasks=False))["result"]
    assert answer.get("resultType") == "complete"
    assert answer["isError"] is False
    assert answer["structuredContent"]["status"] == "pending_approval"
    assert "lockgate_status" in answer["content"][0]["text"]


async def test_a_task_of_another_binding_or_altered_is_unknown(plain: Front, sensitive: Front) -> None:
    task_id = (await call(sensitive, "Whose task?", "foreign-1", tasks=True))["result"]["taskId"]
    # Another front door (another case: another binding), the same bearer token.
    foreign = await task_rpc(plain, "tasks/get", task_id)
    assert foreign["error"]["code"] == INVALID_PARAMS
    assert candidate_of(task_id) not in json.dumps(foreign)
    run_id, candidate_id, created, tag = task_id.split(".")
    for altered in (f"{run_id}.{'0' * 32}.{created}.{tag}", f"{run_id}.{candidate_id}.{int(created) + 1}.{tag}",
                    "not-a-task", "x" * 200):
        answer = await task_rpc(sensitive, "tasks/get", altered)
        assert answer["error"]["code"] == INVALID_PARAMS, altered
    # The genuine id still answers.
    assert (await task_rpc(sensitive, "tasks/get", task_id))["result"]["taskId"] == task_id


# --- hostile requests ---------------------------------------------------------------


async def test_hostile_requests_get_typed_errors_and_nothing_is_lost(plain: Front, world: World) -> None:
    before = len(notes_on(world, "case-load-11"))
    call_params = {"name": "case.add_note", "arguments": {"note": "Hostile."}}
    async with plain.client() as http:
        malformed = await rpc(http, plain.url, "tools/call", call_params, 1, name="case.add_note", meta="not-an-object")
        missing = await rpc(http, plain.url, "tools/call", call_params, 2, name="case.add_note",
                            meta={types.PROTOCOL_VERSION_META_KEY: MODERN})
        unknown = await rpc(http, plain.url, "tools/call", call_params, 3, name="case.add_note", version="2099-01-01",
                            meta={**envelope(tasks=False), types.PROTOCOL_VERSION_META_KEY: "2099-01-01"})
        huge_task = await rpc(http, plain.url, "tasks/get", {"taskId": "t" * 100_000}, 4, tasks=True)
        wrong_name = await rpc(http, plain.url, "tools/call", call_params, 5, name="case.delete_everything")
    assert malformed["error"]["code"] == INVALID_PARAMS
    assert missing["error"]["code"] == INVALID_PARAMS
    assert unknown["error"]["code"] == types.UNSUPPORTED_PROTOCOL_VERSION
    assert MODERN in unknown["error"]["data"]["supported"]
    assert huge_task["error"]["code"] == INVALID_PARAMS
    assert wrong_name["error"]["code"] == types.HEADER_MISMATCH
    assert len(notes_on(world, "case-load-11")) == before

    # A huge id is an id like any other: its call runs once, and again is the same call.
    huge_id = "i" * 10_000
    first = await call(plain, "Huge id.", huge_id)
    again = await call(plain, "Huge id.", huge_id)
    assert first["id"] == huge_id
    assert first["result"]["structuredContent"]["status"] == "executed"
    assert again["result"]["structuredContent"] == first["result"]["structuredContent"]
    assert len(notes_on(world, "case-load-11")) == before + 1


# --- a catalogue that changes -------------------------------------------------------

READ_FILE = "repo.read_file"
PATCH = "repo.prepare_patch"  # offered once the run has read a file


def repo_env(system: System) -> dict[str, str]:
    return {**front_env(system, "unused"), "LOCKGATE_FRONT_CONTEXT": json.dumps({"repo_id": "repo-1"})}


@contextlib.contextmanager
def repo_front(system: System, name: str) -> Iterator[Front]:
    """A front door on the repository world, whose patch tool is offered only after a read."""
    port_file = system.root / f"{name}.port"
    port_file.unlink(missing_ok=True)
    with open(system.log(name), "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "lockgate.client.mcp", "--http", "--port", "0", "--port-file", str(port_file)],
            env={**os.environ, **repo_env(system)}, cwd=REPO, stdout=log, stderr=log,
            preexec_fn=parent_death_signal())
    try:
        deadline = time.monotonic() + 30
        while not port_file.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the front door did not start: see {system.log(name)}")
            time.sleep(0.05)
        token = (system.root / "secrets" / "mcp-front.token").read_text().strip()
        yield Front(f"http://127.0.0.1:{int(port_file.read_text())}/mcp", token)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def test_a_session_is_told_when_the_next_turn_offers_other_tools(system: System) -> None:
    heard: list[object] = []

    async def handler(message: object) -> None:
        heard.append(message)

    with repo_front(system, "mcp-modern-repo-legacy") as front:
        async with front.client() as http, Client(streamable_http_client(front.url, http_client=http),
                                                  mode="legacy", message_handler=handler,
                                                  read_timeout_seconds=60) as client:
            capabilities = client.session.initialize_result
            assert capabilities is not None and capabilities.capabilities.tools is not None
            assert capabilities.capabilities.tools.list_changed is True
            before = {tool.name for tool in (await client.list_tools()).tools}
            assert READ_FILE in before and PATCH not in before
            read = await client.call_tool(READ_FILE, {"path": "docs/report.md"})
            assert read.structured_content is not None and read.structured_content["status"] == "executed"
            for _ in range(200):  # the notification rides the call's own response stream
                if any(isinstance(m, types.ToolListChangedNotification) for m in heard):
                    break
                await anyio.sleep(0.05)
            assert any(isinstance(m, types.ToolListChangedNotification) for m in heard), heard
            after = {tool.name for tool in (await client.list_tools()).tools}
    assert PATCH in after


async def test_a_stateless_listener_is_told_when_the_next_turn_offers_other_tools(system: System) -> None:
    with repo_front(system, "mcp-modern-repo-stateless") as front:
        async with front.client() as http, Client(streamable_http_client(front.url, http_client=http),
                                                  mode=MODERN, read_timeout_seconds=60) as client:
            before = {tool.name for tool in (await client.list_tools()).tools}
            assert PATCH not in before
            async with client.listen(tools_list_changed=True) as subscription:
                read = await client.call_tool(READ_FILE, {"path": "docs/report.md"})
                assert read.structured_content is not None
                assert read.structured_content["status"] == "executed"
                with anyio.fail_after(30):  # a guard against hanging, not a measure
                    event = await anext(aiter(subscription))
            assert isinstance(event, ToolsListChanged)
            after = {tool.name for tool in (await client.list_tools()).tools}
    assert PATCH in after


# --- the handshake era's tasks (2025-11-25) -------------------------------------------


@contextlib.asynccontextmanager
async def session_of(front: Front) -> AsyncIterator[tuple[ClientSession, JSONRPCDispatcher[Any]]]:
    """A 2025-11-25 session whose requests the test writes whole (a task-augmented call, tasks/*)."""
    async with front.client() as http, streamable_http_client(front.url, http_client=http) as (reader, writer):
        dispatcher: JSONRPCDispatcher[Any] = JSONRPCDispatcher(reader, writer)
        async with ClientSession(dispatcher=dispatcher, read_timeout_seconds=60) as session:
            initialized = await session.initialize()
            assert initialized.protocol_version == "2025-11-25"
            tasks = initialized.capabilities.tasks
            assert tasks is not None and tasks.requests is not None and tasks.requests.tools is not None
            assert tasks.requests.tools.call is not None and tasks.cancel is not None
            yield session, dispatcher


async def test_a_session_that_asks_for_a_task_gets_one_and_its_result(
    system: System, sensitive: Front, reviewer: Gateway, world: World,
) -> None:
    before = len(notes_on(world, "case-sensitive"))
    async with session_of(sensitive) as (session, raw):
        listed = await session.list_tools()
        [note_tool] = [tool for tool in listed.tools if tool.name == "case.add_note"]
        assert note_tool.execution is not None and note_tool.execution.task_support == "optional"
        created = await raw.send_raw_request(
            "tools/call", {"name": "case.add_note", "arguments": {"note": "A session's task."}, "task": {}},
            {"request_id": "session-task-1", "timeout": 60})
        task = created["task"]
        assert (task["status"], task["ttl"]) == ("working", None)
        task_id = task["taskId"]
        got = await raw.send_raw_request("tasks/get", {"taskId": task_id}, {"timeout": 60})
        assert (got["taskId"], got["status"]) == (task_id, "working")
        assert len(notes_on(world, "case-sensitive")) == before

        review = await system.review_requested(TENANT, candidate_of(task_id))
        await reviewer.decide_review(tenant=TENANT, candidate_id=candidate_of(task_id),
                                     review_id=review.review_id, digest=review.digest, approve=True)
        result = await raw.send_raw_request("tasks/result", {"taskId": task_id}, {"timeout": 60})
        assert result["structuredContent"]["status"] == "executed"
        assert result["isError"] is False
        assert result["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": task_id}
        assert (await raw.send_raw_request("tasks/get", {"taskId": task_id}, {"timeout": 60}))["status"] == "completed"
        with pytest.raises(MCPError) as ended:  # 2025-11-25: an ended task cannot be cancelled
            await raw.send_raw_request("tasks/cancel", {"taskId": task_id}, {"timeout": 60})
        assert ended.value.error.code == INVALID_PARAMS
    assert len(notes_on(world, "case-sensitive")) == before + 1


async def test_a_sessions_denied_task_is_failed_with_the_refusal_as_its_result(
    system: System, sensitive: Front, reviewer: Gateway, world: World,
) -> None:
    """2025-11-25's schema: "failed ... includes a tool call result with isError" (the extension changed it)."""
    before = len(notes_on(world, "case-sensitive"))
    async with session_of(sensitive) as (_, raw):
        created = await raw.send_raw_request(
            "tools/call", {"name": "case.add_note", "arguments": {"note": "A session's denied task."}, "task": {}},
            {"request_id": "session-task-deny", "timeout": 60})
        task_id = created["task"]["taskId"]
        review = await system.review_requested(TENANT, candidate_of(task_id))
        await reviewer.decide_review(tenant=TENANT, candidate_id=candidate_of(task_id),
                                     review_id=review.review_id, digest=review.digest, approve=False,
                                     reason="not in a session either")
        result = await raw.send_raw_request("tasks/result", {"taskId": task_id}, {"timeout": 60})
        assert result["isError"] is True
        assert result["structuredContent"]["status"] not in ("executed", "pending_approval")
        assert "not in a session either" not in json.dumps(result)
        got = await raw.send_raw_request("tasks/get", {"taskId": task_id}, {"timeout": 60})
        assert got["status"] == "failed"
        with pytest.raises(MCPError) as ended:  # an ended task cannot be cancelled
            await raw.send_raw_request("tasks/cancel", {"taskId": task_id}, {"timeout": 60})
        assert ended.value.error.code == INVALID_PARAMS
    assert len(notes_on(world, "case-sensitive")) == before


async def test_a_session_cancelling_its_task_withdraws_the_call(sensitive: Front, world: World) -> None:
    before = len(notes_on(world, "case-sensitive"))
    async with session_of(sensitive) as (_, raw):
        created = await raw.send_raw_request(
            "tools/call", {"name": "case.add_note", "arguments": {"note": "A session's cancelled task."},
                           "task": {"ttl": 60000}},
            {"request_id": "session-task-2", "timeout": 60})
        task_id = created["task"]["taskId"]
        cancelled = await raw.send_raw_request("tasks/cancel", {"taskId": task_id}, {"timeout": 60})
        assert (cancelled["taskId"], cancelled["status"]) == (task_id, "cancelled")
        result = await raw.send_raw_request("tasks/result", {"taskId": task_id}, {"timeout": 60})
        assert result["isError"] is True
        assert result["structuredContent"]["status"] == "withdrawn"
    assert len(notes_on(world, "case-sensitive")) == before


async def test_a_session_that_asks_for_no_task_gets_todays_note(sensitive: Front) -> None:
    async with session_of(sensitive) as (_, raw):
        plain = await raw.send_raw_request(
            "tools/call", {"name": "case.add_note", "arguments": {"note": "No task asked."}},
            {"request_id": "session-note-1", "timeout": 60})
    assert "task" not in plain
    assert plain["structuredContent"]["status"] == "pending_approval"
    assert "lockgate_status" in plain["content"][0]["text"]
