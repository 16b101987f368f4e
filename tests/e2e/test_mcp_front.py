"""Lockgate as an MCP server: the front door as a real process, driven by the official SDK's client.

Over stdio (the client launches it, as a host does) and over streamable HTTP (behind its
bearer token): the catalogue is the turn's, a call is the model-facing projection, a
retried request is the same intent, a waiting call is no error and its outcome can be
asked for, and the session never chooses the tenant or the case.
"""

from __future__ import annotations

import contextlib
import socket
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import pytest
from mcp.client import Client, ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher

from lockgate.client.sdk import Gateway
from lockgate.testing.mcp_front import Front, front_env, http_front
from lockgate.testing.system import REPO, System
from lockgate.worlds.casenotes.world import World

TENANT = "tenant-a"
ACTOR = "user-42"


def stdio_params(system: System, case_id: str) -> StdioServerParameters:
    """How a host launches the front door over stdio."""
    return StdioServerParameters(command=sys.executable, args=["-m", "lockgate.client.mcp", "--stdio"],
                                 env=front_env(system, case_id), cwd=str(REPO))


class Raw:
    """An MCP session whose request ids the test chooses (a retried request reuses its id)."""

    def __init__(self, session: ClientSession, dispatcher: JSONRPCDispatcher[Any]) -> None:
        self.session = session
        self.dispatcher = dispatcher

    async def call(self, name: str, arguments: dict[str, Any], request_id: str) -> types.CallToolResult:
        raw = await self.dispatcher.send_raw_request(
            "tools/call", {"name": name, "arguments": arguments}, {"request_id": request_id, "timeout": 60})
        return types.CallToolResult.model_validate(raw, by_name=False)


@contextlib.asynccontextmanager
async def raw_session(streams: contextlib.AbstractAsyncContextManager[Any]) -> AsyncIterator[Raw]:
    async with streams as (read_stream, write_stream):
        dispatcher: JSONRPCDispatcher[Any] = JSONRPCDispatcher(read_stream, write_stream)
        async with ClientSession(dispatcher=dispatcher, read_timeout_seconds=60) as session:
            await session.initialize()
            yield Raw(session, dispatcher)


def structured(result: types.CallToolResult) -> dict[str, Any]:
    assert result.structured_content is not None, result
    return dict(result.structured_content)


def notes_on(world: World, case_id: str) -> list[dict[str, str]]:
    return [row for row in world.ledger() if row["case_id"] == case_id]


# --- stdio --------------------------------------------------------------------------


async def test_stdio_lists_the_turns_catalogue(system: System, gw: Gateway) -> None:
    """The SDK's default client: it probes for the 2026 era first, and the front door serves it."""
    async with Client(stdio_params(system, "case-123"), read_timeout_seconds=60) as client:
        listed = await client.list_tools()
    run = await gw.open_run(tenant=TENANT, actor=ACTOR, context={"case_id": "case-123"})
    turn = await run.open_turn()
    offered = {tool.name: tool for tool in listed.tools}
    assert "case.add_note" in offered
    assert "lockgate_status" in offered
    assert set(offered) - {"lockgate_status"} == {tool.name for tool in turn.tools}
    for tool in turn.tools:  # Lockgate's own descriptions and schemas, as the demo offers them
        assert offered[tool.name].description == tool.description
        assert offered[tool.name].input_schema == tool.parameters


async def test_stdio_note_executes_once_and_a_retried_request_writes_nothing_more(
    system: System, world: World,
) -> None:
    """A call before any tools/list opens its turn; the same request id again is the same intent."""
    before = len(notes_on(world, "case-123"))
    async with raw_session(stdio_client(stdio_params(system, "case-123"))) as mcp:
        first = await mcp.call("case.add_note", {"note": "Called the customer back."}, "note-1")
        assert first.is_error is not True, first
        assert structured(first)["status"] == "executed"
        assert structured(first)["result_label"] == "untrusted-data"
        assert "untrusted_data" in structured(first)["result"]
        assert "candidate_id" not in structured(first)  # the projection only
        assert len(notes_on(world, "case-123")) == before + 1

        again = await mcp.call("case.add_note", {"note": "Called the customer back."}, "note-1")
        assert structured(again) == structured(first)
        assert len(notes_on(world, "case-123")) == before + 1

        other = await mcp.call("case.add_note", {"note": "Called the customer back."}, "note-2")
        assert structured(other)["status"] == "executed"  # another request is another call
    assert len(notes_on(world, "case-123")) == before + 2


async def test_stdio_wrong_argument_type_is_rejected_as_an_error(system: System, world: World) -> None:
    before = len(world.ledger())
    async with Client(stdio_params(system, "case-123"), read_timeout_seconds=60) as client:
        await client.list_tools()
        result = await client.call_tool("case.add_note", {"note": 42})
    assert result.is_error is True
    answer = structured(result)
    assert answer["status"] == "rejected"
    assert answer["code"].startswith(("argument.note.", "proposal.invalid"))
    assert len(world.ledger()) == before


async def test_stdio_tool_not_listed_still_goes_to_lockgate_and_is_refused(
    system: System, world: World,
) -> None:
    before = len(world.ledger())
    async with Client(stdio_params(system, "case-123"), read_timeout_seconds=60) as client:
        await client.list_tools()
        result = await client.call_tool("case.delete_everything", {})
    assert result.is_error is True
    assert (structured(result)["status"], structured(result)["code"]) == ("rejected", "proposal.invalid")
    assert len(world.ledger()) == before


async def test_sensitive_case_waits_for_a_reviewer_then_status_reports_executed(
    system: System, reviewer: Gateway, world: World,
) -> None:
    before = len(notes_on(world, "case-sensitive"))
    async with Client(stdio_params(system, "case-sensitive"), read_timeout_seconds=60) as client:
        await client.list_tools()
        pending = await client.call_tool("case.add_note", {"note": "Escalated to legal."})
        assert pending.is_error is not True, pending  # waiting is not a failure
        answer = structured(pending)
        assert (answer["status"], answer["code"]) == ("pending_approval", "approval.pending")
        text = pending.content[0]
        assert isinstance(text, types.TextContent) and "reviewer" in text.text
        candidate_id = answer["candidate_id"]
        assert len(notes_on(world, "case-sensitive")) == before

        still = await client.call_tool("lockgate_status", {"candidate_id": candidate_id})
        assert still.is_error is not True
        assert structured(still)["status"] == "pending_approval"

        review = await system.review_requested(TENANT, candidate_id)
        assert review.summary.startswith("Add a note to case case-sensitive")
        await reviewer.decide_review(tenant=TENANT, candidate_id=candidate_id, review_id=review.review_id,
                                     digest=review.digest, approve=True)
        done = await client.call_tool("lockgate_status", {"candidate_id": candidate_id})
        assert done.is_error is not True, done
        assert (structured(done)["status"], structured(done)["code"]) == ("executed", "operation.executed")

        unknown = await client.call_tool("lockgate_status", {"candidate_id": "0" * 32})
        assert unknown.is_error is True
        assert structured(unknown)["code"] == "status.unknown-candidate"
    assert len(notes_on(world, "case-sensitive")) == before + 1

    # Another session is another run: it cannot read this one's candidates.
    async with Client(stdio_params(system, "case-sensitive"), read_timeout_seconds=60) as other:
        foreign = await other.call_tool("lockgate_status", {"candidate_id": candidate_id})
    assert foreign.is_error is True
    assert structured(foreign)["code"] == "status.unknown-candidate"


async def test_the_session_cannot_choose_the_case(system: System, world: World) -> None:
    """The case is the configured one: an argument naming another is refused, and nothing lands there."""
    before = {case: len(notes_on(world, case)) for case in ("case-load-02", "case-load-03")}
    async with Client(stdio_params(system, "case-load-02"), read_timeout_seconds=60) as client:
        await client.list_tools()
        steered = await client.call_tool("case.add_note", {"note": "Moved.", "case_id": "case-load-03"})
        assert steered.is_error is True
        assert structured(steered)["status"] == "rejected"
        plain = await client.call_tool("case.add_note", {"note": "Here, where I was sent."})
        assert structured(plain)["status"] == "executed"
    written = notes_on(world, "case-load-02")
    assert len(written) == before["case-load-02"] + 1
    assert {row["tenant"] for row in written[before["case-load-02"]:]} == {TENANT}
    assert len(notes_on(world, "case-load-03")) == before["case-load-03"]


async def test_an_unreachable_broker_is_an_mcp_error_never_a_traceback(
    system: System, tmp_path: Path,
) -> None:
    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    params = stdio_params(system, "case-123")
    params.env = {**(params.env or {}), "LOCKGATE_FRONT_NATS_URL": f"nats://127.0.0.1:{port}"}
    errlog = tmp_path / "front.stderr"
    with errlog.open("w") as err:
        async with Client(stdio_client(params, errlog=err), read_timeout_seconds=60) as client:
            with pytest.raises(MCPError) as listing:
                await client.list_tools()
            called = await client.call_tool("case.add_note", {"note": "Nobody hears this."})
    assert "lockgate.unavailable" in listing.value.message
    assert called.is_error is True
    assert structured(called)["code"] == "lockgate.unavailable"
    assert "Traceback" not in errlog.read_text()


# --- streamable HTTP ----------------------------------------------------------------


@pytest.fixture(scope="module")
def front(system: System) -> Iterator[Front]:
    with http_front(system, "case-load-01", "mcp-front-http") as f:
        yield f


_INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
_ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


async def test_http_refuses_a_missing_or_wrong_bearer_token(front: Front) -> None:
    async with httpx2.AsyncClient(timeout=10) as http:
        missing = await http.post(front.url, json=_INITIALIZE, headers=_ACCEPT)
        wrong = await http.post(front.url, json=_INITIALIZE,
                                headers={**_ACCEPT, "Authorization": "Bearer " + "x" * 43})
        right = await http.post(front.url, json=_INITIALIZE,
                                headers={**_ACCEPT, "Authorization": f"Bearer {front.token}"})
    assert missing.status_code == 401
    assert wrong.status_code == 401
    assert "mcp-session-id" not in missing.headers and "mcp-session-id" not in wrong.headers
    assert right.status_code == 200
    assert "mcp-session-id" in right.headers


async def test_http_lists_the_catalogue_and_calls_once(front: Front, world: World) -> None:
    before = len(notes_on(world, "case-load-01"))
    async with front.client() as http, Client(streamable_http_client(front.url, http_client=http),
                                              read_timeout_seconds=60) as client:
        listed = await client.list_tools()
        assert "case.add_note" in {tool.name for tool in listed.tools}
        done = await client.call_tool("case.add_note", {"note": "Over HTTP."})
        assert done.is_error is not True, done
        assert structured(done)["status"] == "executed"
    assert len(notes_on(world, "case-load-01")) == before + 1


async def test_http_retried_request_is_the_same_intent(front: Front, world: World) -> None:
    before = len(notes_on(world, "case-load-01"))
    async with front.client() as http, raw_session(streamable_http_client(front.url, http_client=http)) as mcp:
        await mcp.session.list_tools()
        first = await mcp.call("case.add_note", {"note": "Retried over HTTP."}, "retry-1")
        await mcp.session.list_tools()  # a newer turn: the retry still goes to its first try's
        again = await mcp.call("case.add_note", {"note": "Retried over HTTP."}, "retry-1")
    assert structured(first)["status"] == "executed"
    assert structured(again) == structured(first)
    assert len(notes_on(world, "case-load-01")) == before + 1


def test_http_bound_port_is_written_and_the_token_file_is_private(system: System, front: Front) -> None:
    token_file = system.root / "secrets" / "mcp-front.token"
    assert token_file.stat().st_mode & 0o077 == 0
    assert Path(system.root / "mcp-front-http.port").read_text().strip() == front.url.split(":")[2].split("/")[0]
