"""The first ten minutes of a new user: the ``lockgate`` command as a process, from anywhere.

Each test runs the real command with the deployment's var directory in its environment
(as after ``lockgate run``) and a working directory that is not the checkout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from lockgate.cli.app import parser
from lockgate.testing.system import System
from lockgate.worlds.items.world import World as ItemsWorld
from tests.unit.cli_commands import commands

LOCKGATE = [sys.executable, "-m", "lockgate.cli"]


def run(system: System, *args: str, cwd: Path, shell_tail: str = "",
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("LOCKGATE_")}
    environment["LOCKGATE_VAR_DIR"] = str(system.root)
    environment.update(env or {})
    if shell_tail:
        command = " ".join(map(_quote, [*LOCKGATE, *args])) + " " + shell_tail
        return subprocess.run(command, shell=True, cwd=cwd, env=environment, capture_output=True,
                              text=True, timeout=60)
    return subprocess.run([*LOCKGATE, *args], cwd=cwd, env=environment, capture_output=True,
                          text=True, timeout=60)


def _quote(part: str) -> str:
    return "'" + part.replace("'", "'\\''") + "'"


def one_clean_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The command failed with exactly one line on stderr and no traceback."""
    assert proc.returncode != 0, proc
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


async def test_global_options_after_the_command(system: System, tmp_path: Path) -> None:
    proc = run(system, "status", "--url", system.url, "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert rows and all(row["ok"] for row in rows)


async def test_a_proposal_from_the_shell_as_agent_and_host(system: System, tmp_path: Path) -> None:
    proc = run(system, "--url", system.url, "--json", "propose", "--tenant", "tenant-a",
               "--actor", "user-42", "--context", "case_id=case-load-50", "--tool", "case.add_note",
               "--arguments", '{"note": "from the shell"}', cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["status"] == "executed"


async def test_a_closed_pipe_ends_quietly(system: System, tmp_path: Path) -> None:
    for n in range(3):
        run(system, "--url", system.url, "propose", "--tenant", "tenant-a", "--actor", "user-42",
            "--context", f"case_id=case-load-5{n}", "--tool", "case.add_note",
            "--arguments", '{"note": "one of many"}', cwd=tmp_path)
    proc = run(system, "intents", "--url", system.url, cwd=tmp_path, shell_tail="| head -1")
    assert proc.returncode == 0
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
    assert len(proc.stdout.splitlines()) == 1


async def test_unknown_intent_says_so(system: System, tmp_path: Path) -> None:
    line = one_clean_line(run(system, "events", "0" * 32, "--tenant", "tenant-a", "--url", system.url,
                              cwd=tmp_path))
    assert "no events for intent" in line
    line = one_clean_line(run(system, "events", "not an id!", "--tenant", "tenant-a",
                              "--url", system.url, cwd=tmp_path))
    assert "is not an id" in line


async def test_no_broker_is_one_line(system: System, tmp_path: Path) -> None:
    line = one_clean_line(run(system, "propose", "--tenant", "tenant-a", "--actor", "user-42",
                              "--tool", "case.add_note", "--arguments", "{}",
                              "--url", "nats://127.0.0.1:9", cwd=tmp_path))
    assert "cannot reach Lockgate at nats://127.0.0.1:9" in line


async def test_worlds_are_read_from_the_deployment_wherever_the_command_runs(
    system: System, tmp_path: Path
) -> None:
    proc = run(system, "world", "ledger", "case", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    line = one_clean_line(run(system, "world", "ledger", "case", cwd=tmp_path,
                              env={"LOCKGATE_VAR_DIR": str(tmp_path / "nothing-here")}))
    assert "no case world in" in line and "lockgate run" in line


async def test_a_fault_armed_from_the_cli_reaches_the_world(system: System, tmp_path: Path) -> None:
    proc = run(system, "world", "fault", "items", "query_unavailable", "--server", "Q",
               "--times", "2", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    world = ItemsWorld(system.items_dir)
    assert {"server": "Q", "fault": "query_unavailable", "remaining": 2} in world.faults()
    assert world.take_fault("Q", "query_unavailable") and world.take_fault("Q", "query_unavailable")
    line = one_clean_line(run(system, "world", "fault", "items", "no_such_fault", "--server", "Q",
                              cwd=tmp_path))
    assert "unknown fault" in line


@pytest.mark.parametrize("command", [["review", "show", "0" * 32, "--tenant", "tenant-a"],
                                     ["reconcile", "0" * 32, "--tenant", "tenant-a", "--absent",
                                      "--why", "checked"]])
async def test_refusals_are_one_line(system: System, tmp_path: Path, command: list[str]) -> None:
    line = one_clean_line(run(system, *command, "--url", system.url, cwd=tmp_path))
    assert line.startswith("lockgate: ") and ("review.unknown" in line or "reconcile." in line)


async def test_a_reviewer_reads_the_consequence_first_and_approves_from_the_shell(
    system: System, tmp_path: Path,
) -> None:
    from lockgate.worlds.casenotes.world import World as CaseWorld

    world = CaseWorld(system.world_dir)
    before = len(world.ledger())
    note = "Escalated to legal.\x1b[2J\x1b[31m\u202e)detpecca(\u202c"  # escape codes, a bidi override
    proc = run(system, "--url", system.url, "propose", "--tenant", "tenant-a", "--actor", "user-42",
               "--context", "case_id=case-sensitive", "--tool", "case.add_note",
               "--arguments", json.dumps({"note": note}), "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    pending = json.loads(proc.stdout)
    assert pending["status"] == "pending_approval"
    candidate = pending["candidate_id"]

    listed = run(system, "review", "list", "--as", "alice", "--url", system.url, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    header, rule, *rows = listed.stdout.splitlines()
    assert header.split()[:3] == ["CANDIDATE", "TENANT", "TOOL"]
    (mine,) = [r for r in rows if r.startswith(candidate)]
    assert "Add a note to case case-sensitive" in mine

    page = run(system, "review", "show", candidate, "--tenant", "tenant-a", "--as", "alice",
               "--url", system.url, cwd=tmp_path)
    assert page.returncode == 0, page.stderr
    first = page.stdout.splitlines()[0]
    assert first.startswith("What will happen") and "case case-sensitive" in first
    assert "everyone with access to case case-sensitive" in page.stdout
    assert "untrusted text" in page.stdout and "Escalated to legal." in page.stdout
    assert "\x1b" not in page.stdout and "\u202e" not in page.stdout  # printed as data only
    digest = json.loads(run(system, "review", "show", candidate, "--tenant", "tenant-a", "--as",
                            "alice", "--json", "--url", system.url, cwd=tmp_path).stdout)["digest"]
    assert f"digest     {digest}" in page.stdout

    approved = run(system, "review", "approve", candidate, "--tenant", "tenant-a", "--as", "alice",
                   "--digest", digest, "--url", system.url, cwd=tmp_path)
    assert approved.returncode == 0, approved.stderr
    assert approved.stdout.startswith("approved by alice: Add a note to case case-sensitive")
    import asyncio

    for _ in range(200):
        if len(world.ledger()) > before:
            break
        await asyncio.sleep(0.05)
    assert len(world.ledger()) == before + 1
    after = run(system, "review", "list", "--as", "alice", "--json", "--url", system.url, cwd=tmp_path)
    assert candidate not in after.stdout


async def test_events_show_the_raw_text_and_end_with_the_lineage(system: System, tmp_path: Path) -> None:
    gw = await system.gateway("tenant-a")
    try:
        run_ = await gw.open_run(tenant="tenant-a", actor="user-42", context={"case_id": "case-123"})
        turn = await run_.open_turn()
        first = await turn.propose(tool="case.add_note", arguments='{"note": "cli",}')
        fixed = await turn.propose(tool="case.add_note", arguments='{"note": "cli"}')
    finally:
        await gw.close()
    assert (first.status, fixed.status) == ("rejected", "executed")
    proc = run(system, "events", fixed.candidate_id, "--tenant", "tenant-a", "--url", system.url,
               "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    received = lines[0]["event"]
    assert (received["follows"], received["follows_how"]) == (first.candidate_id, "automatic")
    assert received["raw_arguments"] == '{"note": "cli"}'
    chain = lines[-1]["lineage"]
    assert [(c["intent"], c["kind"], c["this"]) for c in chain] == [
        (first.candidate_id, None, False), (fixed.candidate_id, "repair", True)]


# -- every command: a person's answer by default, machine output with --json ------------------

#: Commands checked in both forms elsewhere: they need what this module's system has not
#: (MCP servers, an MCP adapter), or none at all (files only), or they serve until stopped.
ELSEWHERE = {
    "mcp servers": "tests/e2e/test_mcp_capabilities.py::test_the_operator_commands_answer_a_person_and_a_script",
    "mcp snapshot": "tests/e2e/test_mcp_capabilities.py::test_the_operator_commands_answer_a_person_and_a_script",
    "mcp diff": "tests/e2e/test_mcp_capabilities.py::test_the_operator_commands_answer_a_person_and_a_script",
    "mcp quarantine": "tests/e2e/test_mcp_capabilities.py::test_the_operator_commands_answer_a_person_and_a_script",
    "mcp map": "tests/e2e/test_mcp_capabilities.py::test_the_operator_commands_answer_a_person_and_a_script",
    "mcp conformance": "tests/integration/test_mcp_conformance.py::test_lockgate_mcp_conformance_answers_a_person_and_a_script",
    "policy": "tests/unit/test_cli_output.py::test_policy_validate_and_test",
    "adapter scaffold": "tests/unit/test_cli_output.py::test_adapter_scaffold",
    "reconcile": "tests/unit/test_cli_output.py::test_reconcile",
    # They serve until stopped: `adapter serve` says once what it serves (a record with
    # --json); `run` answers nothing, and with --json its log goes to stderr.
    "adapter serve": "tests/unit/test_cli_output.py::test_every_command_takes_json_before_and_after_its_name",
    "run": "tests/unit/test_cli_output.py::test_every_command_takes_json_before_and_after_its_name",
}


@dataclass(frozen=True)
class Case:
    """One command as a test types it, and what each form of its answer holds."""

    argv: list[str]
    person: str  # a line (or the start of one) a person reads
    fields: frozenset[str]  # what every JSON line (or the one document) carries
    document: bool = False  # one JSON document, not JSON Lines
    code: int = 0


def _fields(*names: str) -> frozenset[str]:
    return frozenset(names)


async def _proposed(system: System, tmp_path: Path, case_id: str, note: str = "a note") -> dict[str, Any]:
    proc = run(system, "--json", "--url", system.url, "propose", "--tenant", "tenant-a", "--actor", "user-42", "--context",
               f"case_id={case_id}", "--tool", "case.add_note", "--arguments",
               json.dumps({"note": note}), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    answer: dict[str, Any] = json.loads(proc.stdout)
    return answer


async def _pending(system: System, tmp_path: Path) -> str:
    candidate: str = (await _proposed(system, tmp_path, "case-sensitive"))["candidate_id"]
    return candidate


async def _case(name: str, system: System, tmp_path: Path, form: str) -> Case:
    review = ("--tenant", "tenant-a", "--as", "alice")
    if name == "status":
        return Case(["status"], "every service and adapter answers", _fields("service", "ok", "pid"))
    if name == "propose":
        return Case(["propose", "--tenant", "tenant-a", "--actor", "user-42", "--context",
                     f"case_id=case-load-7{int(form == 'json')}", "--tool", "case.add_note",
                     "--arguments", '{"note": "both forms"}'], "status  ",
                    _fields("candidate_id", "call_id", "status", "code"), document=True)
    if name == "demo":
        return Case(["demo"], "SCENARIO", _fields("scenario", "status", "code", "as_expected"))
    if name == "world ledger":
        await _proposed(system, tmp_path, "case-load-80")
        return Case(["world", "ledger", "case"], "AT", _fields("case_id", "note_id", "intent_id", "at"))
    if name == "world fault":
        return Case(["world", "fault", "items", "fail_before_send", "--server", "P", "--times", "1"],
                    "armed fail_before_send on server P", _fields("armed", "server", "times", "faults"),
                    document=True)
    if name == "intents":
        return Case(["intents", "--tenant", "tenant-a", "--limit", "5"], "INTENT",
                    _fields("intent", "tenant", "run", "tool", "state", "reason", "position"))
    if name == "events":
        executed = (await _proposed(system, tmp_path, "case-load-81"))["candidate_id"]
        return Case(["events", executed, "--tenant", "tenant-a"], "VERSION",
                    _fields("version", "type", "sequence", "event"))
    if name == "withdraw":
        executed = (await _proposed(system, tmp_path, "case-load-82"))["candidate_id"]
        return Case(["withdraw", executed, "--tenant", "tenant-a", "--why", "both forms"], "status",
                    _fields("candidate_id", "status", "code"), document=True)
    if name == "review list":
        await _pending(system, tmp_path)
        return Case(["review", "list", "--as", "alice"], "CANDIDATE",
                    _fields("intent_id", "tenant", "tool", "summary"))
    if name == "review show":
        return Case(["review", "show", await _pending(system, tmp_path), *review], "What will happen",
                    _fields("candidate_id", "digest", "tool"), document=True)
    if name in ("review approve", "review deny"):
        verb = name.split()[1]
        return Case(["review", verb, await _pending(system, tmp_path), *review],
                    f"{'approved' if verb == 'approve' else 'denied'} by alice",
                    _fields("recorded", "reviewer", "review"), document=True)
    if name == "review edit":
        return Case(["review", "edit", await _pending(system, tmp_path), *review, "--arguments",
                     '{"note": "narrower"}'], "edited by alice",
                    _fields("edited_into", "call_id", "reviewer", "review"), document=True)
    if name == "token":
        return Case(["token", "--as", "alice"], "lgc1.",
                    _fields("token", "person", "role", "expires_at"), document=True)
    if name == "eval":
        answer = await _proposed(system, tmp_path, "case-load-83")
        listed = run(system, "intents", "--tenant", "tenant-a", "--json", "--url", system.url,
                     cwd=tmp_path)
        (the_run,) = [json.loads(line)["run"] for line in listed.stdout.splitlines()
                      if json.loads(line)["intent"] == answer["candidate_id"]]
        return Case(["eval", the_run], "Containment", _fields("suite", "report"), document=True)
    if name == "replay":
        executed = (await _proposed(system, tmp_path, "case-load-84"))["candidate_id"]
        return Case(["replay", "--intent", executed], executed[:12], _fields("replay"), document=True)
    raise AssertionError(f"`lockgate {name}` has no case here: add one (both forms), or name in "
                         "ELSEWHERE the test that checks both")


PERSON_FORM = [name for name in commands(parser()) if name not in ELSEWHERE]


def test_every_command_is_checked_in_both_forms_somewhere() -> None:
    repo = Path(__file__).resolve().parents[2]
    for name, where in ELSEWHERE.items():
        path, _, test = where.partition("::")
        assert f"def {test}(" in (repo / path).read_text(), f"{name}: {where} does not exist"


@pytest.mark.parametrize("name", PERSON_FORM)
async def test_every_command_answers_a_person_and_a_script(
    system: System, tmp_path: Path, name: str,
) -> None:
    try:
        for form in ("person", "json"):
            case = await _case(name, system, tmp_path, form)
            extra = ["--json"] if form == "json" else []
            # --json after the command for some, before it for the others: both are the same.
            argv = [*case.argv, *extra] if len(name) % 2 else [*extra, *case.argv]
            proc = run(system, *argv, "--url", system.url, cwd=tmp_path)
            assert proc.returncode == case.code, (argv, proc.stderr)
            if form == "person":
                assert case.person in proc.stdout, (argv, proc.stdout)
                for line in proc.stdout.splitlines():
                    with pytest.raises(ValueError):
                        json.loads(line)
                continue
            if case.document:
                documents = [json.loads(proc.stdout)]
            else:
                documents = [json.loads(line) for line in proc.stdout.splitlines()]
                assert documents, argv
            assert all(isinstance(d, dict) for d in documents), proc.stdout
            assert case.fields <= set(documents[0]), (case.fields, documents[0])
    finally:
        ItemsWorld(system.items_dir).clear_faults()
