"""``make run``'s supervisor as a real process over fake children and an embedded server."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from lockgate.cli.status import cmd_status
from lockgate.client.output import Output
from lockgate.operations.natsserver import NatsServer, free_port
from lockgate.operations.status import check_status, status_names
from lockgate.operations.supervisor import READY_LINE
from lockgate.runtime.credentials import RunInfo, credentials_path, load_credentials, read_run_info
from lockgate.testing.processes import Printing

HERE = Path(__file__).parent
RESTART_LINE = "lockgate: flaky exited with 3, restarting (restart #1)"


class Supervisor(Printing):
    """The supervisor process and every line it printed so far."""

    var_dir: Path
    port: int

    async def wait_for_line(self, wanted: Callable[[str], bool], timeout_s: float = 15.0, *,
                            alive: bool = False) -> str:
        return await super().wait_for_line(wanted, timeout_s, alive=alive)


async def start_supervisor(
    var_dir: Path, port: int, *children: str, env: dict[str, str] | None = None,
) -> Supervisor:
    extra = env or {}
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKGATE_")}
    env.update(extra)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    sup = await Supervisor.start(sys.executable, "-m", "fakes.supervise", str(var_dir), str(port),
                                 *children, env=env)
    sup.var_dir, sup.port = var_dir, port
    return sup


async def stop(sup: Supervisor) -> None:
    """SIGTERM (so the supervisor stops what it started), SIGKILL only if it hangs."""
    if sup.proc.returncode is None:
        sup.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(sup.proc.wait(), 20)
        except TimeoutError:
            sup.proc.kill()
            await sup.proc.wait()


@pytest.fixture
async def supervisor(tmp_path: Path) -> AsyncIterator[Supervisor]:
    """The supervisor over ``steady`` (with a grandchild) and ``flaky`` (exits once)."""
    sup = await start_supervisor(tmp_path / "var", free_port(), "steady", "flaky")
    try:
        yield sup
    finally:
        await stop(sup)
        if sup.reader is not None:
            await sup.reader


def pids_in(path: Path) -> list[int]:
    """The pids a fake child recorded, in start order."""
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def live_processes() -> dict[int, str]:
    """pid -> command line of every process that is not a zombie, as ``ps`` lists them."""
    out = subprocess.run(
        ["ps", "-ww", "-eo", "pid=,stat=,args="], check=True, capture_output=True, text=True
    ).stdout
    live = {}
    for row in out.splitlines():
        pid, stat, *args = row.split(None, 2)
        # Orphaned zombies linger here: this container's init does not reap them.
        if not stat.startswith("Z"):
            live[int(pid)] = args[0] if args else ""
    return live


async def admin_connection(sup: Supervisor) -> Client:
    """Connect to the supervisor's broker as the admin its deployment made."""
    creds = load_credentials(credentials_path(sup.var_dir, "admin"))
    return await nats.connect(f"nats://127.0.0.1:{sup.port}", user=creds.user,
                              password=creds.password, max_reconnect_attempts=-1,
                              reconnect_time_wait=0.2)


async def wait_until(condition: Callable[[], object], timeout_s: float = 15.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not met within {timeout_s}s")
        await asyncio.sleep(0.05)


async def test_ready_restart_status_and_clean_shutdown(supervisor: Supervisor) -> None:
    await supervisor.wait_for_line(lambda line: line == READY_LINE)
    await supervisor.wait_for_line(lambda line: line == RESTART_LINE)

    var_dir = supervisor.var_dir
    await wait_until(lambda: len(pids_in(var_dir / "flaky.pids")) == 2)
    info = read_run_info(var_dir)  # how every command finds the running system
    assert info is not None and info.url == f"nats://127.0.0.1:{supervisor.port}"
    assert info.pid == supervisor.proc.pid
    nc = await admin_connection(supervisor)
    try:
        answers: dict[str, dict[str, object] | None] = {}

        async def both_answer_from_current_pids() -> bool:
            answers.update(await check_status(nc, ["steady", "flaky"], timeout_s=0.5))
            flaky = answers["flaky"]
            restarted = pids_in(var_dir / "flaky.pids")[-1]
            return answers["steady"] is not None and flaky is not None and flaky["pid"] == restarted

        deadline = asyncio.get_running_loop().time() + 10
        while not await both_answer_from_current_pids():
            assert asyncio.get_running_loop().time() < deadline, answers
            await asyncio.sleep(0.1)
    finally:
        await nc.close()
    steady, flaky = answers["steady"], answers["flaky"]
    assert steady is not None and flaky is not None
    assert steady["service"] == "steady" and steady["pid"] in pids_in(var_dir / "steady.pids")
    assert flaky["service"] == "flaky" and flaky["pid"] in pids_in(var_dir / "flaky.pids")
    assert (var_dir / "log" / "steady.log").exists()
    assert (var_dir / "log" / "nats-server.log").exists()

    grandchild = int((var_dir / "steady.grandchild.pid").read_text())
    ours = {
        pid: args
        for pid, args in live_processes().items()
        if str(var_dir) in args  # nats-server's config path, the grandchild's argument
    }
    assert grandchild in ours, ours
    assert any("nats-server" in args for args in ours.values()), ours
    watched = (
        set(ours)
        | set(pids_in(var_dir / "steady.pids"))
        | set(pids_in(var_dir / "flaky.pids"))
        | {supervisor.proc.pid}
    )

    supervisor.proc.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(supervisor.proc.wait(), 15) == 0

    survivors = {pid: args for pid, args in live_processes().items() if pid in watched}
    assert survivors == {}
    assert [args for args in live_processes().values() if str(var_dir) in args] == []
    assert supervisor.lines.count(READY_LINE) == 1
    assert read_run_info(var_dir) is None  # gone with the system


def targets(sup: Supervisor) -> dict[str, str]:
    """Process name → metrics URL, as the supervisor lists them for Prometheus."""
    path = sup.var_dir / "prometheus" / "targets.json"
    try:
        groups = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {g["labels"]["process"]: f"http://{g['targets'][0]}/metrics" for g in groups}


def free_ports(count: int) -> int:
    """The first of ``count`` consecutive loopback ports nobody listens on right now."""
    for _ in range(100):
        base = free_port()
        if base + count > 65535:
            continue
        with contextlib.ExitStack() as held:
            try:
                for port in range(base, base + count):
                    held.enter_context(socket.create_server(("127.0.0.1", port)))
            except OSError:
                continue
        return base
    raise AssertionError(f"no {count} consecutive free ports")


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as reply:
        return str(reply.read().decode())


async def test_every_process_is_listed_for_prometheus_and_the_list_follows_restarts(
    supervisor: Supervisor,
) -> None:
    await supervisor.wait_for_line(lambda line: line == READY_LINE)
    await supervisor.wait_for_line(lambda line: line == RESTART_LINE)
    nc = await admin_connection(supervisor)
    try:
        answers: dict[str, dict[str, object] | None] = {}

        async def listed_as_they_answer() -> bool:
            answers.update(await check_status(nc, ["steady", "flaky"], timeout_s=0.5))
            flaky = answers["flaky"]
            if flaky is None or flaky["pid"] != pids_in(supervisor.var_dir / "flaky.pids")[-1]:
                return False  # not the restarted one yet
            listed = targets(supervisor)
            return all(a is not None and listed.get(n) == a["metrics"] for n, a in answers.items())

        deadline = asyncio.get_running_loop().time() + 15
        while not await listed_as_they_answer():
            assert asyncio.get_running_loop().time() < deadline, (answers, targets(supervisor))
            await asyncio.sleep(0.1)
    finally:
        await nc.close()
    listed = targets(supervisor)
    assert set(listed) == {"supervisor", "steady", "flaky"}
    assert all(url.startswith("http://127.0.0.1:") for url in listed.values())
    assert len(set(listed.values())) == 3
    own = await asyncio.to_thread(scrape, listed["supervisor"])
    assert 'lockgate_child_restarts_total{child="flaky"} 1.0' in own
    assert "lockgate_child_up" in own
    assert "# TYPE lockgate_handler_seconds histogram" in await asyncio.to_thread(scrape, listed["steady"])

    supervisor.proc.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(supervisor.proc.wait(), 15) == 0
    assert targets(supervisor) == {}  # stopped: nothing to scrape


async def test_a_port_given_to_the_supervisor_is_its_own_and_its_children_take_the_next(
    tmp_path: Path,
) -> None:
    base = free_ports(3)
    sup = await start_supervisor(tmp_path / "var", free_port(), "steady", "flaky",
                                 env={"LOCKGATE_METRICS_PORT": str(base)})
    try:
        await sup.wait_for_line(lambda line: line == READY_LINE)
        await wait_until(lambda: len(targets(sup)) == 3)
        assert targets(sup) == {
            "supervisor": f"http://127.0.0.1:{base}/metrics",
            "steady": f"http://127.0.0.1:{base + 1}/metrics",
            "flaky": f"http://127.0.0.1:{base + 2}/metrics",
        }
    finally:
        await stop(sup)
        if sup.reader is not None:
            await sup.reader


async def test_the_embedded_broker_refuses_anyone_without_credentials(supervisor: Supervisor) -> None:
    await supervisor.wait_for_line(lambda line: line == READY_LINE)
    errors: list[Exception] = []

    async def on_error(exc: Exception) -> None:
        errors.append(exc)

    with pytest.raises(Exception):  # noqa: B017 - nats-py raises several types for "refused"
        await nats.connect(f"nats://127.0.0.1:{supervisor.port}", max_reconnect_attempts=0,
                           allow_reconnect=False, error_cb=on_error, connect_timeout=2)
    assert any("authorization violation" in str(e).lower() for e in errors), errors
    credentials = supervisor.var_dir / "credentials"
    assert oct(credentials.stat().st_mode & 0o777) == "0o700"
    files = sorted(credentials.glob("*.json"))
    assert {f.stem for f in files} >= {"admin", "intake", "executor", "host", "agent-tenant-a",
                                       "reviewer-alice", "operator-ops", "adapter-casenotes"}
    assert all(oct(f.stat().st_mode & 0o777) == "0o600" for f in files)
    conf = supervisor.var_dir / "nats" / "accounts.conf"
    assert oct(conf.stat().st_mode & 0o777) == "0o600"
    # No password reached a line the supervisor printed or a log it wrote.
    passwords = [load_credentials(f).password for f in files]
    logs = "\n".join(supervisor.lines) + "".join(
        p.read_text(errors="replace") for p in (supervisor.var_dir / "log").glob("*.log"))
    assert not [pw for pw in passwords if pw in logs]


async def test_a_dead_broker_is_started_again_and_children_carry_on(supervisor: Supervisor) -> None:
    await supervisor.wait_for_line(lambda line: line == READY_LINE)
    pid = server_pid(supervisor)
    os.kill(pid, signal.SIGKILL)
    await supervisor.wait_for_line(lambda line: "nats-server exited" in line)
    await wait_until(lambda: server_pid(supervisor) not in (None, pid), timeout_s=20)
    nc = await admin_connection(supervisor)
    try:
        async def steady_answers() -> bool:
            return (await check_status(nc, ["steady"], timeout_s=0.5))["steady"] is not None

        deadline = asyncio.get_running_loop().time() + 20
        while not await steady_answers():  # the child reconnected by itself
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.2)
    finally:
        await nc.close()


async def test_a_stopped_child_is_killed_and_started_again(supervisor: Supervisor) -> None:
    await supervisor.wait_for_line(lambda line: line == READY_LINE)
    (stopped,) = pids_in(supervisor.var_dir / "steady.pids")
    os.kill(stopped, signal.SIGSTOP)  # alive, holding its connection, answering nothing
    try:
        await supervisor.wait_for_line(
            lambda line: line.startswith("lockgate: steady is not well (no answer)"), timeout_s=40)
        await wait_until(lambda: len(pids_in(supervisor.var_dir / "steady.pids")) == 2, 20)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(stopped, signal.SIGCONT)
    await wait_until(lambda: stopped not in live_processes(), 10)


async def test_a_stuck_child_is_reported_and_started_again(tmp_path: Path) -> None:
    sup = await start_supervisor(tmp_path / "var", free_port(), "stuck")
    try:
        await sup.wait_for_line(lambda line: line == READY_LINE)
        line = await sup.wait_for_line(lambda line: line.startswith("lockgate: stuck is not well"),
                                       timeout_s=40)
        assert "work: a handler has run for 999s" in line
        await wait_until(lambda: len(pids_in(sup.var_dir / "stuck.pids")) == 2, 20)
    finally:
        await stop(sup)
        if sup.reader is not None:
            await sup.reader


def server_pid(sup: Supervisor) -> int | None:
    """The pid of the nats-server whose store is under the supervisor's var dir."""
    for pid, args in live_processes().items():
        if "nats-server" in args and str(sup.var_dir) in args:
            return pid
    return None


async def test_refuses_a_port_taken_by_something_else(tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        sup = await start_supervisor(tmp_path / "var", port, "steady")
        assert await asyncio.wait_for(sup.proc.wait(), 15) == 2
        assert sup.reader is not None
        await sup.reader
    assert any("not a NATS server" in line for line in sup.lines), sup.lines
    assert not (tmp_path / "var" / "steady.pids").exists()


async def test_never_puts_its_streams_on_a_server_it_did_not_start(tmp_path: Path) -> None:
    with NatsServer(store_dir=tmp_path / "nats") as server:
        sup = await start_supervisor(tmp_path / "var", server.port, "steady")
        assert await asyncio.wait_for(sup.proc.wait(), 15) == 2
        assert sup.reader is not None
        await sup.reader
        assert any("already listens" in line and "LOCKGATE_NATS_URL" in line for line in sup.lines)
        assert server.process is not None and server.process.poll() is None  # left alone
        nc = await nats.connect(server.url)
        try:
            assert await nc.jetstream().streams_info() == []  # nothing was created on it
        finally:
            await nc.close()
    assert not (tmp_path / "var" / "steady.pids").exists()


async def test_a_child_that_cannot_run_as_configured_stops_a_run_not_yet_ready(
    tmp_path: Path,
) -> None:
    # Restarting it changes nothing: one start, one line naming it and its reason, exit 2.
    sup = await start_supervisor(tmp_path / "var", free_port(), "steady", "misconfigured")
    try:
        assert await asyncio.wait_for(sup.proc.wait(), 30) == 2, sup.lines
    finally:
        await stop(sup)
        if sup.reader is not None:
            await sup.reader
    assert len(pids_in(tmp_path / "var" / "misconfigured.pids")) == 1, sup.lines
    said = [line for line in sup.lines if "misconfigured cannot run as configured" in line]
    assert len(said) == 1, sup.lines
    assert "misconfigured: LOCKGATE_WIDGETS is not a number" in said[0]
    assert not any("restarting" in line for line in sup.lines), sup.lines
    assert READY_LINE not in sup.lines


async def test_a_child_whose_configuration_fails_after_ready_is_not_restarted(
    tmp_path: Path,
) -> None:
    sup = await start_supervisor(tmp_path / "var", free_port(), "steady", "reconfigured")
    try:
        await sup.wait_for_line(lambda line: line == READY_LINE)
        (tmp_path / "var" / "reconfigured.go").touch()
        line = await sup.wait_for_line(lambda line: "reconfigured cannot run as configured" in line)
        assert "its configuration is no longer valid" in line and "not starting it again" in line
        # A restart would come within the first backoff (0.5 s); give it several times that.
        await asyncio.sleep(3)
        assert len(pids_in(tmp_path / "var" / "reconfigured.pids")) == 1, sup.lines
        assert sup.proc.returncode is None  # the rest runs on
        nc = await admin_connection(sup)
        try:
            answers = await check_status(nc, ["steady", "reconfigured"], timeout_s=1.0)
        finally:
            await nc.close()
        assert answers["steady"] is not None and answers["reconfigured"] is None
    finally:
        await stop(sup)
        if sup.reader is not None:
            await sup.reader
    assert sup.proc.returncode == 0, sup.lines


async def answer_status(nc: Client, names: list[str]) -> None:
    """Answer ``lg.status.<name>`` for each of ``names`` on ``nc``."""
    for name in names:

        async def reply(msg: Msg, name: str = name) -> None:
            await msg.respond(json.dumps({"service": name, "pid": 4242, "instance": "t"}).encode())

        await nc.subscribe(f"lg.status.{name}", cb=reply)
    await nc.flush()


async def test_check_status_reports_none_for_silent_names(nc: Client) -> None:
    await answer_status(nc, ["check.alive"])
    answers = await check_status(nc, ["check.alive", "check.silent"], timeout_s=0.5)
    assert answers == {
        "check.alive": {"service": "check.alive", "pid": 4242, "instance": "t"},
        "check.silent": None,
    }


async def test_cmd_status_prints_a_line_per_service_and_fails_when_one_is_missing(
    nc: Client, nats_server: NatsServer, capsys: pytest.CaptureFixture[str]
) -> None:
    names = list(status_names())
    await answer_status(nc, names[:-1])

    assert await cmd_status(nats_server.url, output=Output(json=True)) == 1
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["service"] for line in lines] == names
    assert [line["ok"] for line in lines] == [True] * (len(names) - 1) + [False]
    assert lines[0]["pid"] == 4242 and lines[-1]["pid"] is None

    await answer_status(nc, names[-1:])
    assert await cmd_status(nats_server.url, output=Output(json=True)) == 0
    capsys.readouterr()

    # An adapter the run took in (lockgate adapter serve) is asked too: not answering, it fails.
    info = RunInfo(url=nats_server.url, pid=os.getpid(),
                   adapters={"casenotes": ["case.add_note"], "tickets": ["ticket.comment"]})
    assert await cmd_status(nats_server.url, info=info, output=Output(json=True)) == 1
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["service"] for line in lines] == [*names, "adapter.tickets"]
    assert lines[-1]["ok"] is False
    await answer_status(nc, ["adapter.tickets"])
    assert await cmd_status(nats_server.url, info=info, output=Output(json=True)) == 0


async def test_a_run_whose_broker_lost_the_default_port_to_another_takes_a_free_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two runs start together and both find the default port free: the one whose server
    loses the bind must not take the other's server (its users are not this run's) for its own."""
    from lockgate.operations.supervisor import broker as supervisor

    other = NatsServer(store_dir=tmp_path / "other", port=free_port(), config_text="server_name: other-run")
    other.start()
    try:
        async def free(host: str, port: int, timeout_s: float = 1.0) -> str:
            return "free"  # what both runs saw a moment before

        monkeypatch.setattr(supervisor, "DEFAULT_PORT", other.port)
        monkeypatch.setattr(supervisor, "probe_port", free)
        (tmp_path / "var" / "nats").mkdir(parents=True)
        (tmp_path / "var" / "log").mkdir()
        (tmp_path / "var" / "nats" / "accounts.conf").write_text("")
        url, own = await supervisor._embedded_server(tmp_path / "var", None)
        try:
            assert url != other.url and own.port != other.port
            assert await supervisor.server_name_at("127.0.0.1", own.port) != "other-run"
        finally:
            own.stop()
    finally:
        other.stop()
