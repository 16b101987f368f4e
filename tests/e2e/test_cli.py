"""The first ten minutes of a new user: the ``lockgate`` command as a process, from anywhere.

Each test runs the real command with the deployment's var directory in its environment
(as after ``lockgate run``) and a working directory that is not the checkout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lockgate.testing.system import System
from lockgate.worlds.items.world import World as ItemsWorld

LOCKGATE = [sys.executable, "-m", "lockgate.client.cli"]


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
    proc = run(system, "status", "--url", system.url, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert rows and all(row["ok"] for row in rows)


async def test_a_proposal_from_the_shell_as_agent_and_host(system: System, tmp_path: Path) -> None:
    proc = run(system, "--url", system.url, "propose", "--tenant", "tenant-a", "--actor", "user-42",
               "--context", "case_id=case-load-50", "--tool", "case.add_note",
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
               "--arguments", json.dumps({"note": note}), cwd=tmp_path)
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
               cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    received = lines[0]["event"]
    assert (received["follows"], received["follows_how"]) == (first.candidate_id, "automatic")
    assert received["raw_arguments"] == '{"note": "cli"}'
    chain = lines[-1]["lineage"]
    assert [(c["intent"], c["kind"], c["this"]) for c in chain] == [
        (first.candidate_id, None, False), (fixed.candidate_id, "repair", True)]
