"""Lockgate's MCP front door driven by MCP clients nobody here wrote, over streamable HTTP.

The MCP Inspector's CLI (scripted, its exit codes read) and the official TypeScript SDK's
client with its Tasks extension client (``tests/mcp-interop``, installed by ``make test``
from its lockfile), in both protocol eras: the handshake era (``initialize`` at 2025-11-25,
a session) and the stateless 2026-07-28 era (``server/discover``, no session). The front
door and the system are real processes; what is asserted is what those clients see, the
case-notes ledger and the intents' recorded events.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from lockgate.client.sdk import Gateway
from lockgate.eventstore.jetstream import JetStreamEventStore
from lockgate.intent.codec import decode_event
from lockgate.intent.events import ReviewDenied, Withdrawn
from lockgate.testing.frameworks import child_env, lockgate_command, review
from lockgate.testing.mcp_front import ACTOR, TENANT, Front, http_front
from lockgate.testing.system import REPO, System
from lockgate.worlds.casenotes.world import World

INTEROP = REPO / "tests" / "mcp-interop"
NODE_MODULES = INTEROP / "node_modules"
INSPECTOR = NODE_MODULES / ".bin" / "mcp-inspector"
SDK_CLIENT = INTEROP / "sdk-client.mjs"

HANDSHAKE = "2025-11-25"
STATELESS = "2026-07-28"
ERAS = (HANDSHAKE, STATELESS)
#: The Inspector's names for the eras (``--protocol-era``).
INSPECTOR_ERA = {HANDSHAKE: "legacy", STATELESS: "modern"}
#: The Inspector CLI's exit codes (its ``EXIT_CODES``): a result, a tool's ``isError``
#: result, and a server that refused the credentials.
EXIT_OK, EXIT_TOOL_ERROR, EXIT_AUTH_REQUIRED = 0, 5, 3

#: How long one client process may take for one step, a reviewer's decision included.
STEP_TIMEOUT_S = 120.0
CASE = "case-123"
SENSITIVE = "case-sensitive"  # notes on it wait for a reviewer (deploy/policies/case-notes)


@pytest.fixture(scope="module")
def node() -> str:
    """The interop clients are installed: ``make test`` runs ``npm ci`` in tests/mcp-interop."""
    missing = [str(p.relative_to(REPO)) for p in (INSPECTOR, NODE_MODULES / "@modelcontextprotocol" / "client",
                                                   NODE_MODULES / "@modelcontextprotocol" / "ext-tasks")
               if not p.exists()]
    executable = shutil.which("node")
    if missing or executable is None:
        pytest.fail(f"the MCP interop clients are not installed ({', '.join(missing) or 'no node'}): "
                    "make test installs them (cd tests/mcp-interop && npm ci)")
    return executable


@pytest.fixture(scope="module")
def front(system: System, node: str) -> Iterator[Front]:
    """A front door whose runs are about case-123, where a note is written unattended."""
    with http_front(system, CASE, "mcp-interop-front") as f:
        yield f


@pytest.fixture(scope="module")
def sensitive(system: System, node: str) -> Iterator[Front]:
    """A front door whose runs are about a sensitive case, where a note waits for a reviewer."""
    with http_front(system, SENSITIVE, "mcp-interop-sensitive") as f:
        yield f


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A home of its own for the Inspector (its catalogue, stored OAuth state)."""
    path = tmp_path / "home"
    path.mkdir()
    return path


def notes_on(world: World, case_id: str) -> list[dict[str, str]]:
    return [row for row in world.ledger() if row["case_id"] == case_id]


def unique_note(label: str) -> str:
    """A note no other test writes, so a review or a ledger row is found by it."""
    return f"{label} {os.urandom(4).hex()}"


async def recorded(system: System, candidate_id: str) -> list[object]:
    """The intent's events, as the event store holds them."""
    nc = await system.connect()
    try:
        history = await JetStreamEventStore(nc).load(TENANT, candidate_id)
    finally:
        await nc.close()
    return [decode_event(event) for event in history.events]


async def waiting_candidate(system: System, note: str, within_s: float = 30.0) -> str:
    """The candidate whose review shows ``note``, once the reviewers' queue lists it."""
    command = [*lockgate_command(), "review", "list", "--tenant", TENANT, "--as", "alice", "--json"]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while True:
        proc = await asyncio.to_thread(subprocess.run, command, env=child_env(system),
                                       capture_output=True, text=True, timeout=60)
        for line in proc.stdout.splitlines():
            row = json.loads(line)
            if row.get("shown", {}).get("note") == note:
                return str(row["intent_id"])
        if loop.time() > deadline:
            raise AssertionError(f"no review shows the note {note!r}: {proc.stderr}")
        await asyncio.sleep(0.2)


# --- the MCP Inspector's CLI ---------------------------------------------------------


def inspector_command(front: Front, era: str, *args: str, token: str | None = None) -> list[str]:
    """``mcp-inspector --cli`` against the front door: streamable HTTP, the bearer token, one era, JSON out.

    ``--stored-auth-only``: a refused token is an error at once, never an interactive login.
    """
    return [str(INSPECTOR), "--cli", front.url, "--transport", "http",
            "--header", f"Authorization: Bearer {token or front.token}",
            "--protocol-era", INSPECTOR_ERA[era], "--format", "json", "--stored-auth-only", *args]


async def inspect(front: Front, era: str, home: Path, *args: str,
                  token: str | None = None) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run, inspector_command(front, era, *args, token=token), cwd=INTEROP,
        env={**os.environ, "HOME": str(home)}, capture_output=True, text=True, timeout=STEP_TIMEOUT_S)


def call_args(tool: str, arguments: dict[str, Any]) -> tuple[str, ...]:
    return ("--method", "tools/call", "--tool-name", tool, "--tool-args-json", json.dumps(arguments))


def inspected(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The result the Inspector printed (``{"result": ...}`` on stdout)."""
    assert proc.stdout.strip(), f"exit {proc.returncode}: {proc.stderr}"
    answer = json.loads(proc.stdout)
    assert "result" in answer, answer
    return dict(answer["result"])


def failure(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The error envelope the Inspector printed on stderr."""
    envelope = json.loads(proc.stderr.strip().splitlines()[-1])
    return dict(envelope["error"])


@pytest.mark.parametrize("era", ERAS)
async def test_inspector_lists_the_turns_catalogue_and_the_status_tool(
    front: Front, gw: Gateway, home: Path, era: str,
) -> None:
    proc = await inspect(front, era, home, "--method", "tools/list")
    assert proc.returncode == EXIT_OK, proc.stderr
    offered = {tool["name"]: tool for tool in inspected(proc)["tools"]}
    run = await gw.open_run(tenant=TENANT, actor=ACTOR, context={"case_id": CASE})
    turn = await run.open_turn()
    assert "case.add_note" in offered
    assert "lockgate_status" in offered
    assert set(offered) - {"lockgate_status"} == {tool.name for tool in turn.tools}
    for tool in turn.tools:
        assert offered[tool.name]["inputSchema"] == tool.parameters


@pytest.mark.parametrize("era", ERAS)
async def test_inspector_call_writes_one_note(front: Front, world: World, home: Path, era: str) -> None:
    note = unique_note("Inspector call")
    before = len(notes_on(world, CASE))
    proc = await inspect(front, era, home, *call_args("case.add_note", {"note": note}))
    assert proc.returncode == EXIT_OK, proc.stderr
    result = inspected(proc)
    assert result.get("isError") is not True, result
    answer = result["structuredContent"]
    assert (answer["status"], answer["result_label"]) == ("executed", "untrusted-data")
    written = notes_on(world, CASE)[before:]
    assert len(written) == 1
    assert written[0]["note_id"] == answer["result"]["untrusted_data"]["note_id"]
    assert [row["intent_id"] for row in world.ledger()].count(written[0]["intent_id"]) == 1


@pytest.mark.parametrize("era", ERAS)
async def test_inspector_refused_call_is_an_error_result_and_exit_code(
    front: Front, world: World, home: Path, era: str,
) -> None:
    """A refusal is a tool result with ``isError``, which the Inspector exits 5 on (not a protocol error)."""
    before = len(world.ledger())
    proc = await inspect(front, era, home, *call_args("case.add_note", {"note": ""}))
    assert proc.returncode == EXIT_TOOL_ERROR, proc.stderr
    result = inspected(proc)
    assert result["isError"] is True
    assert (result["structuredContent"]["status"], result["structuredContent"]["code"]) == (
        "rejected", "argument.note.empty")
    assert failure(proc)["code"] == "tool_is_error"
    assert len(world.ledger()) == before


@pytest.mark.parametrize("era", ERAS)
async def test_inspector_with_a_wrong_token_is_refused_and_writes_nothing(
    front: Front, world: World, home: Path, era: str,
) -> None:
    before = len(world.ledger())
    proc = await inspect(front, era, home, *call_args("case.add_note", {"note": "Not with that token."}),
                         token="x" * 43)
    assert proc.returncode == EXIT_AUTH_REQUIRED, proc.stderr
    assert failure(proc)["code"] == "auth_required"
    assert proc.stdout == ""
    assert len(world.ledger()) == before


async def test_inspector_handshake_call_waiting_for_a_reviewer_is_the_waiting_note(
    sensitive: Front, system: System, world: World, home: Path,
) -> None:
    """The handshake era has no task for it: a non-error result naming the status tool and the candidate."""
    note = unique_note("Inspector waits")
    before = len(notes_on(world, SENSITIVE))
    proc = await inspect(sensitive, HANDSHAKE, home, *call_args("case.add_note", {"note": note}))
    assert proc.returncode == EXIT_OK, proc.stderr
    result = inspected(proc)
    assert result.get("isError") is not True
    answer = result["structuredContent"]
    assert (answer["status"], answer["code"]) == ("pending_approval", "approval.pending")
    assert "lockgate_status" in result["content"][0]["text"]
    assert answer["candidate_id"] == await waiting_candidate(system, note)
    assert len(notes_on(world, SENSITIVE)) == before


async def test_inspector_stateless_call_waiting_for_a_reviewer_is_a_task_it_follows_to_the_end(
    sensitive: Front, system: System, world: World, home: Path,
) -> None:
    """The Inspector declares the Tasks extension in the stateless era: it gets a task and polls it.

    It is still waiting when the reviewer approves; it then exits 0 with the executed projection.
    """
    note = unique_note("Inspector task")
    before = len(notes_on(world, SENSITIVE))
    proc = await asyncio.create_subprocess_exec(
        *inspector_command(sensitive, STATELESS, *call_args("case.add_note", {"note": note})),
        cwd=INTEROP, env={**os.environ, "HOME": str(home)},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        candidate_id = await waiting_candidate(system, note)
        assert proc.returncode is None, "the Inspector ended before the reviewer decided"
        await review(system, "approve", candidate_id)
        out, err = await asyncio.wait_for(proc.communicate(), STEP_TIMEOUT_S)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    done = subprocess.CompletedProcess(["mcp-inspector"], proc.returncode, out.decode(), err.decode())
    assert done.returncode == EXIT_OK, done.stderr
    result = inspected(done)
    assert result.get("isError") is not True, result
    assert result["structuredContent"]["status"] == "executed"
    written = notes_on(world, SENSITIVE)[before:]
    assert [row["intent_id"] for row in written] == [candidate_id]


# --- the TypeScript SDK's client ------------------------------------------------------


class SdkClient:
    """``sdk-client.mjs``: the SDK's client in one era, asked one command at a time."""

    def __init__(self, proc: asyncio.subprocess.Process, connected: dict[str, Any]) -> None:
        self.proc = proc
        self.connected = connected

    async def ask(self, op: str, **fields: Any) -> dict[str, Any]:
        """Send one command; its answer (a protocol error fails the test, with what the client said)."""
        answer = await self.answer(op, **fields)
        assert "error" not in answer, f"{op}: {answer['error']}"
        return answer

    async def answer(self, op: str, **fields: Any) -> dict[str, Any]:
        """Send one command; its answer as printed, an error included."""
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps({"op": op, **fields}) + "\n").encode())
        await self.proc.stdin.drain()
        return await _line(self.proc)

    async def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """``tools/call``: the CallToolResult."""
        return dict((await self.ask("call", name=name, arguments=arguments))["result"])


async def _line(proc: asyncio.subprocess.Process) -> dict[str, Any]:
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), STEP_TIMEOUT_S)
    if not line:
        await proc.wait()
        raise AssertionError(f"the SDK client exited with {proc.returncode} without answering")
    return dict(json.loads(line))


@contextlib.asynccontextmanager
async def sdk_client(node: str, front: Front, era: str, log: Path, *, tasks: bool = False,
                     token: str | None = None) -> AsyncIterator[SdkClient]:
    """The SDK's client connected to the front door in ``era`` (``tasks``: with the Tasks extension)."""
    args = [node, str(SDK_CLIENT), "--url", front.url, "--era", era, *(["--tasks"] if tasks else [])]
    with log.open("ab") as err:
        proc = await asyncio.create_subprocess_exec(
            *args, cwd=INTEROP, env={**os.environ, "MCP_BEARER_TOKEN": token or front.token},
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=err)
    try:
        connected = await _line(proc)
        assert "error" not in connected, f"connecting in {era}: {connected['error']}"
        yield SdkClient(proc, dict(connected["connected"]))
    finally:
        if proc.returncode is None:
            assert proc.stdin is not None
            proc.stdin.close()
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                proc.kill()
                await proc.wait()


def structured(result: dict[str, Any]) -> dict[str, Any]:
    assert result.get("structuredContent") is not None, result
    return dict(result["structuredContent"])


@pytest.mark.parametrize("era", ERAS)
async def test_sdk_client_connects_in_the_era_it_pinned(front: Front, node: str, tmp_path: Path, era: str) -> None:
    async with sdk_client(node, front, era, tmp_path / "client.log") as client:
        listed = await client.ask("list")
    assert client.connected["protocolVersion"] == era
    assert client.connected["era"] == ("legacy" if era == HANDSHAKE else "modern")
    assert {"case.add_note", "lockgate_status"} <= {tool["name"] for tool in listed["tools"]}


@pytest.mark.parametrize("era", ERAS)
async def test_sdk_client_call_executes_and_its_request_sent_again_is_the_same_intent(
    front: Front, world: World, node: str, tmp_path: Path, era: str,
) -> None:
    note = unique_note("SDK retried")
    before = len(notes_on(world, CASE))
    async with sdk_client(node, front, era, tmp_path / "client.log") as client:
        await client.ask("list")
        first = await client.call("case.add_note", {"note": note})
        again = (await client.ask("resend"))["result"]
    assert first.get("isError") is not True, first
    assert structured(first)["status"] == "executed"
    assert structured(again) == structured(first)
    written = notes_on(world, CASE)[before:]
    assert len(written) == 1
    assert written[0]["note_id"] == structured(first)["result"]["untrusted_data"]["note_id"]


@pytest.mark.parametrize("era", ERAS)
async def test_sdk_clients_whose_request_ids_coincide_make_two_calls(
    front: Front, world: World, node: str, tmp_path: Path, era: str,
) -> None:
    """Two client processes number their requests alike: each one's note is its own call."""
    notes = [unique_note("SDK first"), unique_note("SDK second")]
    before = len(notes_on(world, CASE))
    answers = []
    for n, note in enumerate(notes):
        async with sdk_client(node, front, era, tmp_path / f"client-{n}.log") as client:
            await client.ask("list")
            answers.append(structured(await client.call("case.add_note", {"note": note})))
    assert [a["status"] for a in answers] == ["executed", "executed"]
    written = notes_on(world, CASE)[before:]
    assert len({row["intent_id"] for row in written}) == len(written) == 2
    assert [row["note_id"] for row in written] == [a["result"]["untrusted_data"]["note_id"] for a in answers]


@pytest.mark.parametrize("era", ERAS)
async def test_sdk_client_with_a_wrong_token_is_refused(front: Front, node: str, tmp_path: Path, era: str) -> None:
    args = [node, str(SDK_CLIENT), "--url", front.url, "--era", era]
    proc = await asyncio.to_thread(subprocess.run, args, cwd=INTEROP, input="",
                                   env={**os.environ, "MCP_BEARER_TOKEN": "x" * 43},
                                   capture_output=True, text=True, timeout=STEP_TIMEOUT_S)
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["error"]["data"]["status"] == 401


@pytest.mark.parametrize("era", ERAS)
async def test_sdk_client_without_tasks_gets_the_waiting_note(
    sensitive: Front, system: System, world: World, node: str, tmp_path: Path, era: str,
) -> None:
    note = unique_note("SDK waits")
    before = len(notes_on(world, SENSITIVE))
    async with sdk_client(node, sensitive, era, tmp_path / "client.log") as client:
        await client.ask("list")
        pending = await client.call("case.add_note", {"note": note})
        assert pending.get("isError") is not True, pending
        answer = structured(pending)
        assert (answer["status"], answer["code"]) == ("pending_approval", "approval.pending")
        assert "lockgate_status" in pending["content"][0]["text"]
        assert answer["candidate_id"] == await waiting_candidate(system, note)

        await review(system, "approve", answer["candidate_id"])
        done = await client.call("lockgate_status", {"candidate_id": answer["candidate_id"]})
    assert structured(done)["status"] == "executed"
    assert [row["intent_id"] for row in notes_on(world, SENSITIVE)[before:]] == [answer["candidate_id"]]


async def task_until(client: SdkClient, task_id: str, within_s: float = 60.0) -> dict[str, Any]:
    """``tasks/get`` until the task is no longer working (each poll waits briefly server-side)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while True:
        task = dict((await client.ask("task-get", taskId=task_id))["task"])
        if task["status"] != "working":
            return task
        if loop.time() > deadline:
            raise AssertionError(f"the task is still working after {within_s} s")


@contextlib.asynccontextmanager
async def waiting_task(node: str, front: Front, system: System, era: str, label: str,
                       log: Path) -> AsyncIterator[tuple[SdkClient, str, str]]:
    """A tasks client whose call of a note waits for a reviewer, as a task: the client, the task, the candidate.

    The handshake era's client asks for the task (2025-11-25 tasks, ``params.task``); the
    stateless era's declares the Tasks extension and the server makes the task.
    """
    note = unique_note(label)
    async with sdk_client(node, front, era, log, tasks=True) as client:
        assert client.connected["tasks"]["execution"] is True, client.connected
        await client.ask("list")
        created = await client.ask("task-call", name="case.add_note", arguments={"note": note})
        assert created["kind"] == "task", created
        assert created["task"]["status"] == "working"
        candidate_id = await waiting_candidate(system, note)
        task = dict((await client.ask("task-get", taskId=created["task"]["taskId"]))["task"])
        assert task["status"] == "working"
        yield client, created["task"]["taskId"], candidate_id


@pytest.mark.parametrize("era", ERAS)
async def test_sdk_task_completes_with_the_executed_projection_once_a_reviewer_approves(
    sensitive: Front, system: System, world: World, node: str, tmp_path: Path, era: str,
) -> None:
    before = len(notes_on(world, SENSITIVE))
    async with waiting_task(node, sensitive, system, era, "SDK task approved", tmp_path / "client.log") as (
            client, task_id, candidate_id):
        assert len(notes_on(world, SENSITIVE)) == before
        await review(system, "approve", candidate_id)
        task = await task_until(client, task_id)
        outcome = (await client.ask("task-result", taskId=task_id))["outcome"]
    assert task["status"] == outcome["status"] == "completed"
    result = outcome["result"]
    assert result.get("isError") is not True, result
    assert structured(result)["status"] == "executed"
    assert "candidate_id" not in structured(result)  # the projection only
    assert [row["intent_id"] for row in notes_on(world, SENSITIVE)[before:]] == [candidate_id]


async def test_sdk_task_denied_in_the_handshake_era_fails_with_the_denial(
    sensitive: Front, system: System, world: World, node: str, tmp_path: Path,
) -> None:
    """2025-11-25 tasks: a tool call whose result is ``isError`` is a ``failed`` task.

    ``tasks/result`` still answers what the call would have: the denial a client without
    tasks reads from ``lockgate_status``.
    """
    before = len(notes_on(world, SENSITIVE))
    async with waiting_task(node, sensitive, system, HANDSHAKE, "SDK task denied", tmp_path / "client.log") as (
            client, task_id, candidate_id):
        await review(system, "deny", candidate_id)
        task = await task_until(client, task_id)
        payload = (await client.ask("raw", method="tasks/result", params={"taskId": task_id}))["result"]
        status = await client.call("lockgate_status", {"candidate_id": candidate_id})
    assert task["status"] == "failed"
    assert payload["isError"] is True
    assert structured(payload) == structured(status)
    assert structured(status)["status"] not in ("executed", "pending_approval")
    assert any(isinstance(e, ReviewDenied) for e in await recorded(system, candidate_id))
    assert len(notes_on(world, SENSITIVE)) == before


async def test_sdk_task_denied_in_the_stateless_era_completes_with_the_denial(
    sensitive: Front, system: System, world: World, node: str, tmp_path: Path,
) -> None:
    """The Tasks extension (SEP-2663) keeps ``failed`` for a protocol error: a denial completes the task.

    Its result is the denial a client without tasks reads from ``lockgate_status``.
    """
    before = len(notes_on(world, SENSITIVE))
    async with waiting_task(node, sensitive, system, STATELESS, "SDK task denied", tmp_path / "client.log") as (
            client, task_id, candidate_id):
        await review(system, "deny", candidate_id)
        task = await task_until(client, task_id)
        outcome = (await client.ask("task-result", taskId=task_id))["outcome"]
        status = await client.call("lockgate_status", {"candidate_id": candidate_id})
    assert task["status"] == outcome["status"] == "completed"
    assert outcome["result"]["isError"] is True
    assert structured(outcome["result"]) == structured(status)
    assert structured(status)["status"] not in ("executed", "pending_approval")
    assert any(isinstance(e, ReviewDenied) for e in await recorded(system, candidate_id))
    assert len(notes_on(world, SENSITIVE)) == before


@pytest.mark.parametrize("era", ERAS)
async def test_sdk_task_cancelled_withdraws_the_candidate_and_writes_nothing(
    sensitive: Front, system: System, world: World, node: str, tmp_path: Path, era: str,
) -> None:
    before = len(notes_on(world, SENSITIVE))
    async with waiting_task(node, sensitive, system, era, "SDK task cancelled", tmp_path / "client.log") as (
            client, task_id, candidate_id):
        assert (await client.ask("task-cancel", taskId=task_id))["cancelled"] is True
        task = await task_until(client, task_id)
        outcome = (await client.ask("task-result", taskId=task_id))["outcome"]
    assert task["status"] == outcome["status"] == "cancelled"
    assert any(isinstance(e, Withdrawn) for e in await recorded(system, candidate_id))
    assert len(notes_on(world, SENSITIVE)) == before


@pytest.mark.parametrize("era", ERAS)
async def test_sdk_task_id_altered_is_an_unknown_task(
    sensitive: Front, system: System, node: str, tmp_path: Path, era: str,
) -> None:
    """A task id is the front door's to mint: one changed by a hair names no task (a protocol error)."""
    async with waiting_task(node, sensitive, system, era, "SDK task forged", tmp_path / "client.log") as (
            client, task_id, candidate_id):
        forged = task_id[:-1] + ("0" if task_id[-1] != "0" else "1")
        answer = await client.answer("task-get", taskId=forged)
        assert "error" in answer, answer
        await review(system, "deny", candidate_id)


def test_inspector_and_sdk_versions_are_the_pinned_ones(node: str) -> None:
    """What the lockfile pins is what is installed (npm ci), and the SDK is the Inspector's own."""
    lock = json.loads((INTEROP / "package-lock.json").read_text())["packages"]
    manifest = json.loads((INTEROP / "package.json").read_text())["dependencies"]
    for name, version in manifest.items():
        assert lock[f"node_modules/{name}"]["version"] == version
        installed = NODE_MODULES / name / "package.json"
        assert json.loads(installed.read_text())["version"] == version, f"{name}: run npm ci"
    inspector = json.loads((NODE_MODULES / "@modelcontextprotocol/inspector/package.json").read_text())
    assert inspector["dependencies"]["@modelcontextprotocol/client"] == manifest["@modelcontextprotocol/client"]
