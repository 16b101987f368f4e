"""``lockgate run`` at its edges, as real processes: two runs side by side on one machine,
an adapter set that would leave a demo adapter without its user, a port that is taken.

Two runs, each with its own var directory and neither given a port, both become ready:
every port either follows the run's settings or is a free one it prints, each console
answers for its own system only, and an MCP front door given nothing but a var directory
reaches that run's broker. One of the two runs with the documentation's ``LOCKGATE_ADAPTERS``
example, taken from docs/capabilities.md itself so that the two cannot drift apart.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx2
import pytest
import pytest_asyncio
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters

from lockgate.client.tokens import issue, read_console_info
from lockgate.operations.supervisor import READY_LINE
from lockgate.runtime.credentials import credentials_path, load_credentials, read_run_info
from lockgate.runtime.entry import CONFIG_ERROR_EXIT
from lockgate.runtime.settings import Settings
from lockgate.runtime.specs import ADAPTERS
from lockgate.testing.processes import Printing
from lockgate.testing.system import REPO
from lockgate.worlds.casenotes.world import World

LOCKGATE = [sys.executable, "-m", "lockgate.cli"]
#: A whole system starting beside another on two shared cores.
READY_WITHIN_S = 240.0


def readme_adapters() -> dict[str, list[str]]:
    """The ``LOCKGATE_ADAPTERS`` example of the documentation's "Writing a capability" page."""
    text = (REPO / "docs" / "capabilities.md").read_text()
    found = re.search(r"`LOCKGATE_ADAPTERS` \(JSON, e\.g\.\s*`(\{[^`]+\})`", text)
    assert found is not None, "docs/capabilities.md lost its LOCKGATE_ADAPTERS example"
    adapters = json.loads(found.group(1))
    assert isinstance(adapters, dict)
    return adapters


def environment(var_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKGATE_")}
    env.update(LOCKGATE_VAR_DIR=str(var_dir), **extra)
    return env


class Run(Printing):
    """A ``lockgate run`` process and every line it printed so far."""

    var_dir: Path


async def start_run(var_dir: Path, *args: str, env: dict[str, str]) -> Run:
    run = await Run.start(*LOCKGATE, "run", *args, env=env, cwd=var_dir.parent)
    run.var_dir = var_dir
    return run


async def lockgate(var_dir: Path, *args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *LOCKGATE, *args, env=environment(var_dir), stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode()


def starts_in(log: Path) -> int:
    """How many times the supervisor started the process whose log this is."""
    return log.read_text().count("lockgate: starting python -m") if log.exists() else 0


# -- refusals: each stops before it would start anything, or at its first start -----------


async def test_an_adapter_set_that_leaves_out_a_demo_adapter_is_refused_at_once(
    tmp_path: Path,
) -> None:
    adapters = {k: v for k, v in readme_adapters().items() if k != "repo"}
    var_dir = tmp_path / "var"
    run = await start_run(var_dir, "--port", "0",
                          env=environment(var_dir, LOCKGATE_ADAPTERS=json.dumps(adapters)))
    try:
        code = await asyncio.wait_for(run.proc.wait(), 60)
    finally:
        await run.stop()
    assert code == 2, run.lines
    said = [line for line in run.lines if "LOCKGATE_ADAPTERS" in line]
    assert len(said) == 1, run.lines
    assert "repo (repo.read_file, review.prepare_summary" in said[0]
    assert READY_LINE not in run.lines
    assert not list((var_dir / "log").glob("*.log"))  # nothing was started


async def test_a_console_port_taken_stops_the_run_with_one_line_not_a_restart_loop(
    tmp_path: Path,
) -> None:
    var_dir = tmp_path / "var"
    with socket.create_server(("127.0.0.1", 0)) as squatter:
        port = squatter.getsockname()[1]
        run = await start_run(var_dir, "--port", "0",
                              env=environment(var_dir, LOCKGATE_CONSOLE_PORT=str(port)))
        try:
            code = await asyncio.wait_for(run.proc.wait(), READY_WITHIN_S)
        finally:
            await run.stop()
    assert code == 2, run.lines
    said = [line for line in run.lines if "console cannot run as configured" in line]
    assert len(said) == 1, run.lines
    assert f"cannot listen on 127.0.0.1:{port}" in said[0], said
    assert starts_in(var_dir / "log" / "console.log") == 1
    assert not any("console exited" in line for line in run.lines), run.lines
    assert READY_LINE not in run.lines


async def test_a_front_door_port_taken_is_a_configuration_error(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as squatter:
        port = squatter.getsockname()[1]
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "lockgate.client.mcp", "--http", "--port", str(port),
            env=environment(tmp_path / "var", LOCKGATE_FRONT_VAR_DIR=str(tmp_path / "var"),
                            LOCKGATE_FRONT_TENANT="tenant-a", LOCKGATE_FRONT_ACTOR="user-42"),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == CONFIG_ERROR_EXIT, (out, err)
    said = err.decode().strip().splitlines()
    assert len(said) == 1 and f"cannot listen on 127.0.0.1:{port}" in said[0], said


# -- two runs side by side ---------------------------------------------------------------------


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def runs(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[Run, Run]]:
    """Two runs, neither given a port, started together; the second with the documentation's adapters."""
    first, second = (tmp_path_factory.mktemp(name) / "var" for name in ("first", "second"))
    pair = (
        await start_run(first, env=environment(first)),
        await start_run(second, env=environment(
            second, LOCKGATE_ADAPTERS=json.dumps(readme_adapters()))),
    )
    try:
        await asyncio.gather(*(r.wait_for_line(lambda line: line == READY_LINE, READY_WITHIN_S)
                               for r in pair))
        yield pair
    finally:
        codes = [await r.stop() for r in pair]
    assert codes == [0, 0], [r.lines[-20:] for r in pair]


@pytest.mark.asyncio(loop_scope="module")
async def test_both_runs_are_ready_each_on_a_broker_of_its_own(runs: tuple[Run, Run]) -> None:
    urls = []
    for run in runs:
        info = read_run_info(run.var_dir)
        assert info is not None
        urls.append(info.url)
        # The port it chose is printed, and every process of the run answers on that broker.
        assert any(f"embedded nats-server on {info.url}" in line for line in run.lines), run.lines
        code, out = await lockgate(run.var_dir, "--json", "status")
        answers = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        assert {a["service"] for a in answers} >= {"intake", "executor", "adapter.casenotes"}, out
        # The second run's documented adapter (tickets) is configured but nobody started it:
        # status says so, and only that.
        missing = {a["service"] for a in answers if not a["ok"]}
        assert missing == (set() if run is runs[0] else {"adapter.tickets"}), out
        assert code == (1 if missing else 0), out
    assert urls[0] != urls[1]


@pytest.mark.asyncio(loop_scope="module")
async def test_each_console_answers_for_its_own_system_only(runs: tuple[Run, Run]) -> None:
    consoles = []
    for run in runs:
        line = await run.wait_for_line(lambda line: line.startswith("lockgate: console at "), 30)
        consoles.append(line.removeprefix("lockgate: console at ").strip())
    assert consoles[0] != consoles[1]
    tokens = [issue(load_credentials(credentials_path(r.var_dir, "reviewer-alice")), ttl_s=600,
                    settings=Settings(var_dir=r.var_dir))[0] for r in runs]
    async with httpx2.AsyncClient(timeout=10) as http:
        for i, url in enumerate(consoles):
            own = await http.get(f"{url}api/me", headers={"Authorization": f"Bearer {tokens[i]}"})
            assert own.status_code == 200 and own.json()["user"] == "reviewer-alice", own.text
            other = await http.get(f"{url}api/me",
                                   headers={"Authorization": f"Bearer {tokens[1 - i]}"})
            assert other.status_code == 401, other.text


@pytest.mark.asyncio(loop_scope="module")
async def test_a_front_door_given_only_the_var_directory_reaches_its_own_run(
    runs: tuple[Run, Run],
) -> None:
    cases = ["case-123", "case-load-50"]  # one per run, to tell their writes apart
    for run, case_id in zip(runs, cases, strict=True):
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "lockgate.client.mcp", "--stdio"], cwd=str(REPO),
            env=environment(run.var_dir, LOCKGATE_FRONT_VAR_DIR=str(run.var_dir),
                            LOCKGATE_FRONT_TENANT="tenant-a", LOCKGATE_FRONT_ACTOR="user-42",
                            LOCKGATE_FRONT_CONTEXT=json.dumps({"case_id": case_id})))
        async with Client(params, read_timeout_seconds=60) as client:
            result = await client.call_tool("case.add_note", {"note": "through the front door"})
        assert result.structured_content is not None, result
        assert result.structured_content["status"] == "executed", result.structured_content
    for run, case_id in zip(runs, cases, strict=True):
        written = [row["case_id"] for row in World(run.var_dir / "worlds" / "case").ledger()]
        assert written == [case_id], (run.var_dir, written)


@pytest.mark.asyncio(loop_scope="module")
async def test_the_readme_adapter_set_names_every_adapter_the_demo_runs(
    runs: tuple[Run, Run],
) -> None:
    second = runs[1]
    # Ready means every demo adapter answered; each connected as its own user.
    assert {a.name for a in ADAPTERS} <= set(readme_adapters())
    for name in [*(a.name for a in ADAPTERS), "tickets"]:
        assert credentials_path(second.var_dir, f"adapter-{name}").exists(), name
    assert not any("has no user of its own" in line for line in second.lines), second.lines


@pytest.mark.asyncio(loop_scope="module")
async def test_a_console_started_again_serves_where_the_run_said(runs: tuple[Run, Run]) -> None:
    # The run whose console did not get 8421 chose a free port: a console that crashes must
    # come back on that one, not on another free one the printed URL no longer names.
    printed = {}
    for run in runs:
        line = await run.wait_for_line(lambda line: line.startswith("lockgate: console at "), 30)
        printed[line.removeprefix("lockgate: console at ").strip()] = run
    url, run = next(((u, r) for u, r in printed.items() if ":8421/" not in u),
                    next(iter(printed.items())))
    before = read_console_info(run.var_dir)
    assert before is not None and before.url == url
    os.kill(before.pid, signal.SIGKILL)
    deadline = asyncio.get_running_loop().time() + 60
    while (after := read_console_info(run.var_dir)) is None or after.pid == before.pid:
        assert asyncio.get_running_loop().time() < deadline, run.lines[-20:]
        await asyncio.sleep(0.2)
    assert after.url == url, (after, run.lines[-20:])
