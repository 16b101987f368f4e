"""MCP servers' tools as governed capabilities, end to end: real servers, real broker, every service.

The two fixture servers (``lockgate.worlds.mcpservers``) run as real processes: P over
stdio (an idempotent private draft, found by ``get_item``) and Q over streamable HTTP behind
a bearer token (publishes and notifies its subscribers, found by ``find_item``). Both call
their tool ``create_item``; they become two different capabilities. The MCP adapter connects to both
as the system starts it. The tests run in order: what is quarantined, what an operator's
mapping offers and executes, what a description change does to a pending approval, how a
lost response is settled, and that the token never reaches the record.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from lockgate.client.sdk import Gateway, Run
from lockgate.contracts import mcp_subjects
from lockgate.eventstore.jetstream import JetStreamEventStore
from lockgate.intent.codec import decode_event
from lockgate.intent.events import (
    CandidateNormalized,
    EffectCompleted,
    ExecutionAuthorized,
    GateRefused,
    OutcomeUnknown,
    Reconciled,
    ReviewRequested,
)
from lockgate.testing.system import REPO, System, running
from lockgate.worlds.mcpservers import HttpServerProcess, State, arm, stdio_command

TOKEN = "q-token-" + "7f3a9c2e41d8b6a0"
BOARD = {"board_id": "board-1"}


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    """The whole system, with the fixture servers P (stdio) and Q (HTTP, behind a bearer
    token named by handle) configured for the MCP adapter."""
    root = tmp_path_factory.mktemp("mcp-system")
    (root / "secrets" / "mcp").mkdir(parents=True)
    token_file = root / "secrets" / "mcp" / "q-token"
    token_file.write_text(TOKEN + "\n")
    with HttpServerProcess("q", root / "board-q", token_file=token_file) as q_server:
        servers = {"servers": [
            {"name": "p", "transport": "stdio", "command": stdio_command("p", root / "board-p")[0],
             "args": list(stdio_command("p", root / "board-p")[1:]), "env": {"LOCKGATE_FIXTURE": "p"},
             "capabilities": ["board.draft_private"], "relist_s": 0.5, "call_timeout_s": 2},
            {"name": "q", "transport": "http", "url": q_server.url,
             "auth": {"secret": "q-token"}, "capabilities": ["board.publish"], "relist_s": 0.5,
             "call_timeout_s": 2},
        ]}
        (root / "mcp").mkdir()
        (root / "mcp" / "servers.yaml").write_text(yaml.safe_dump(servers))
        with running(System(root)) as s:
            yield s


@pytest.fixture
async def gw(system: System) -> AsyncIterator[Gateway]:
    gateway = await system.gateway("tenant-a")
    try:
        yield gateway
    finally:
        await gateway.close()


@pytest.fixture
async def reviewer(system: System) -> AsyncIterator[Gateway]:
    async with await system.person("reviewer-alice") as gateway:
        yield gateway


def state(system: System, server: str) -> Path:
    return system.root / f"board-{server}"


def items(system: System, server: str) -> list[dict[str, Any]]:
    """Every item the server made (drafts on P, publications on Q), as its own ledger says."""
    return State(state(system, server)).items()


async def ask(system: System, verb: str, body: dict[str, Any]) -> dict[str, Any]:
    """An operator's request to the MCP adapter, as operator ``ops``."""
    nc = await system.connect("operator-ops")
    try:
        reply = await nc.request(mcp_subjects.op(verb, "ops"), json.dumps(body).encode(), timeout=10)
    finally:
        await nc.close()
    answer: dict[str, Any] = json.loads(reply.data)
    return answer


async def until(check: Any, timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s}s: {check.__name__}")
        await asyncio.sleep(0.3)


async def offered(run: Run) -> set[str]:
    return {t.name for t in (await run.open_turn()).tools}


def mapping_file(name: str, **changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = yaml.safe_load((REPO / "deploy" / "mcp" / name).read_text())
    body.update(changes)
    return body


async def events(system: System, candidate_id: str) -> list[Any]:
    nc = await system.connect()
    try:
        history = await JetStreamEventStore(nc).load("tenant-a", candidate_id)
    finally:
        await nc.close()
    return [decode_event(e) for e in history.events]


def cli(system: System, *argv: str, json_: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lockgate.cli", *argv, "--url", system.url,
         "--var-dir", str(system.root), *(["--json"] if json_ else [])],
        capture_output=True, text=True, cwd=REPO, timeout=60, check=False)


async def test_new_tools_are_quarantined_and_offered_in_no_turn(system: System, gw: Gateway) -> None:
    async def listed() -> list[dict[str, Any]]:
        held = (await ask(system, "quarantine", {}))["quarantined"]
        return held if {(h["server"], h["tool"]) for h in held} >= {("p", "create_item"), ("q", "create_item")} else []

    held = await until(listed)
    assert {h["why"] for h in held} == {"new"}
    servers = {s["server"]: s for s in (await ask(system, "servers", {}))["servers"]}
    assert servers["q"]["identity"]["auth_handle"] == "q-token"
    assert servers["q"]["identity"]["server_name"] == "lockgate-fixture-publisher"
    assert servers["p"]["identity"]["env_names"] == ["LOCKGATE_FIXTURE"]
    assert servers["p"]["capabilities"] == {"board.draft_private": "unmapped"}
    run = await gw.open_run(tenant="tenant-a", actor="user-42", context=BOARD)
    assert not {"board.draft_private", "board.publish"} & await offered(run)


async def test_a_mapped_draft_is_offered_and_executes_through_the_pipeline(system: System, gw: Gateway) -> None:
    done = cli(system, "mcp", "map", "p", "create_item", "--file", str(REPO / "deploy" / "mcp" / "p-create_item.yaml"))
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert (answer["mapped"], answer["by"], answer["effect"], answer["idempotent"]) == (
        "board.draft_private", "ops", "write", True)
    run = await gw.open_run(tenant="tenant-a", actor="user-42", context=BOARD)

    async def is_offered() -> bool:
        return "board.draft_private" in await offered(run)

    await until(is_offered)
    turn = await run.open_turn()
    tool = next(t for t in turn.tools if t.name == "board.draft_private")
    assert "client_key" not in json.dumps(tool.parameters) and "Only you can see" in tool.description
    response = await turn.propose(tool="board.draft_private",
                                  arguments='{"title": "Q3 plan", "body": "Draft for review."}')
    done_response = await run.wait(response.candidate_id, timeout_s=30)
    assert (done_response.status, done_response.code) == ("executed", "operation.executed")
    drafts = items(system, "p")
    assert len(drafts) == 1
    assert (drafts[0]["visibility"], bool(drafts[0]["notify"]), drafts[0]["title"]) == (
        "private", False, "Q3 plan")
    recorded = await events(system, response.candidate_id)
    normalized = next(e for e in recorded if isinstance(e, CandidateNormalized))
    authorized = next(e for e in recorded if isinstance(e, ExecutionAuthorized))
    # The record shows which mapping and which snapshot the intent used.
    assert normalized.resource["mcp_mapping"] == answer["revision"]
    assert normalized.resource["mcp_tool_digest"].startswith("sha256:")
    assert drafts[0]["key"] == authorized.intent_key
    quarantine = {(h["server"], h["tool"]) for h in (await ask(system, "quarantine", {"server": "p"}))["quarantined"]}
    assert ("p", "create_item") not in quarantine and ("p", "get_item") not in quarantine
    assert ("p", "export_all") not in quarantine  # not listed unless a fault adds it


async def test_a_description_change_quarantines_and_the_gate_refuses_the_old_approval(
    system: System, gw: Gateway, reviewer: Gateway
) -> None:
    mapped = await ask(system, "map", {"server": "q", "tool": "create_item",
                                       "mapping": mapping_file("q-create_item.yaml")})
    assert (mapped["effect"], mapped["idempotent"], mapped["query_by_identity"]) == ("publish", False, True)
    run = await gw.open_run(tenant="tenant-a", actor="user-42", context=BOARD)

    async def is_offered() -> bool:
        return "board.publish" in await offered(run)

    await until(is_offered)
    turn = await run.open_turn()
    pending = await turn.propose(tool="board.publish", arguments='{"title": "Launch", "body": "We ship today."}')
    assert pending.status == "pending_approval"
    review = next(e for e in await events(system, pending.candidate_id)
                  if isinstance(e, ReviewRequested))

    # A rug pull: the same tool, a new description with instructions in it.
    arm(state(system, "q"), "change_description", tool="create_item")

    async def withdrawn() -> bool:
        return "board.publish" not in await offered(run)

    await until(withdrawn)
    held = (await ask(system, "quarantine", {"server": "q"}))["quarantined"]
    assert {"tool": "create_item", "why": "changed or disabled since its review"}.items() <= next(
        h for h in held if h["tool"] == "create_item").items()
    changes = (await ask(system, "diff", {"server": "q"}))["changes"]
    assert {"tool": "create_item", "change": "changed", "fields": ["description"]} in changes
    servers = {s["server"]: s for s in (await ask(system, "servers", {}))["servers"]}
    assert servers["q"]["capabilities"]["board.publish"] == "disabled"

    await reviewer.decide_review(tenant="tenant-a", candidate_id=pending.candidate_id,
                                 review_id=review.review_id, digest=review.digest, approve=True)
    await run.wait(pending.candidate_id, timeout_s=30)
    refused = [e for e in await events(system, pending.candidate_id) if isinstance(e, GateRefused)]
    assert [e.reason for e in refused] == ["gate.mapping-changed"]
    assert items(system, "q") == []


async def test_a_lost_response_is_unknown_then_reconciled_by_query_exactly_once(
    system: System, gw: Gateway, reviewer: Gateway
) -> None:
    # Reviewed again, under the description the server shows now.
    mapped = await ask(system, "map", {"server": "q", "tool": "create_item",
                                       "mapping": mapping_file("q-create_item.yaml", outcome_deadline_s=4)})
    assert mapped["serving"] is True, mapped
    arm(state(system, "q"), "drop_response")   # the next call commits, and is never answered
    run = await gw.open_run(tenant="tenant-a", actor="user-42", context=BOARD)

    async def is_offered() -> bool:
        return "board.publish" in await offered(run)

    await until(is_offered)
    turn = await run.open_turn()
    pending = await turn.propose(tool="board.publish", arguments='{"title": "Once", "body": "Exactly once."}')
    review = next(e for e in await events(system, pending.candidate_id)
                  if isinstance(e, ReviewRequested))
    await reviewer.decide_review(tenant="tenant-a", candidate_id=pending.candidate_id,
                                 review_id=review.review_id, digest=review.digest, approve=True)

    async def settled() -> list[Any]:
        recorded = await events(system, pending.candidate_id)
        return recorded if any(isinstance(e, Reconciled) for e in recorded) else []

    recorded = await until(settled, timeout_s=60)
    assert any(isinstance(e, OutcomeUnknown) for e in recorded)
    reconciled = next(e for e in recorded if isinstance(e, Reconciled))
    assert (str(reconciled.finding), str(reconciled.resolution)) == ("confirmed", "completed")
    authorized = [e for e in recorded if isinstance(e, ExecutionAuthorized)]
    published = items(system, "q")
    assert len(authorized) == 1 and len(published) == 1
    assert published[0]["key"] == authorized[0].intent_key
    assert (published[0]["visibility"], bool(published[0]["notify"])) == ("public", True)


async def test_a_lost_response_on_the_draft_server_still_makes_one_draft(system: System, gw: Gateway) -> None:
    """P committed and never answered: the same intent's key finds the draft again; one draft."""
    before = len(items(system, "p"))
    arm(state(system, "p"), "drop_response")
    run = await gw.open_run(tenant="tenant-a", actor="user-42", context=BOARD)
    turn = await run.open_turn()
    response = await turn.propose(tool="board.draft_private",
                                  arguments='{"title": "Lost once", "body": "Answered never."}', timeout_s=60)

    async def ended() -> list[Any]:
        recorded = await events(system, response.candidate_id)
        done = any(isinstance(e, (Reconciled, EffectCompleted)) for e in recorded)
        return recorded if done else []

    recorded = await until(ended, timeout_s=60)
    drafts = items(system, "p")[before:]
    authorized = [e for e in recorded if isinstance(e, ExecutionAuthorized)]
    assert len(drafts) == 1 and drafts[0]["title"] == "Lost once"
    assert {drafts[0]["key"]} == {e.intent_key for e in authorized}
    assert (await run.wait(response.candidate_id, past="outcome_unknown", timeout_s=30)).status == "executed"


async def test_the_token_is_never_on_the_record_nor_in_a_log(system: System) -> None:
    nc = await system.connect()
    try:
        js = nc.jetstream()
        stored = b""
        for stream in ("LG_MCP", "LG_EVENTS", "LG_REPORTS", "LG_RESPONSES"):
            info = await js.stream_info(stream)
            for seq in range(info.state.first_seq, info.state.last_seq + 1):
                try:
                    msg = await js.get_msg(stream, seq)
                except Exception:
                    continue
                stored += msg.data or b""
                stored += msgspec.json.encode(dict(msg.headers or {}))
    finally:
        await nc.close()
    assert b"q-token" in stored  # the handle is recorded (the identity) ...
    assert TOKEN.encode() not in stored  # ... the secret never
    for log in (system.root / "log").iterdir():
        assert TOKEN not in log.read_text(errors="replace"), log.name


async def test_the_operator_commands_answer_a_person_and_a_script(system: System) -> None:
    """Last: ``map --disable`` takes the tools out of service."""
    for argv, fields in ((["servers"], {"servers"}), (["quarantine"], {"quarantined"}),
                         (["snapshot", "p"], {"server"}), (["diff", "p"], {"server"}),
                         (["map", "p", "create_item", "--disable"], {"disabled", "by"})):
        script = cli(system, "mcp", *argv)
        assert script.returncode == 0, (argv, script.stderr)
        assert fields <= set(json.loads(script.stdout)), (argv, script.stdout)
        person = cli(system, "mcp", *argv, json_=False)
        assert person.returncode == 0, (argv, person.stderr)
        assert person.stdout.strip(), argv
        for line in person.stdout.splitlines():
            with pytest.raises(ValueError):
                json.loads(line)
        assert "\x1b" not in person.stdout
