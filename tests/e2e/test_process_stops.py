"""Every Lockgate process stops on a signal whatever its state, and says in one line what it lacks.

Each kind of process ``lockgate run`` supervises (every service, the read side, every demo
adapter, the MCP adapter), each a real process: in front of a broker that never answers,
one that hangs up at once, one that refuses its user, without its credentials file, with a
malformed setting (the MCP front door too, for that one). A signal stops it within
``STOPS_WITHIN_S`` (a liveness bound: the supervisor's SIGKILL comes ten seconds after its
SIGTERM); a configuration it cannot run with is one line on stderr and ``CONFIG_ERROR_EXIT``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from lockgate.operations.natsserver import NatsServer
from lockgate.operations.status import CHILDREN
from lockgate.runtime.entry import CONFIG_ERROR_EXIT
from lockgate.testing.system import REPO

#: Seconds a process may take to exit after a signal or after a fatal configuration.
STOPS_WITHIN_S = 10.0
#: Seconds a process may take to get as far as the state a test puts it in (start-up on
#: two shared cores, imports included).
REACHES_WITHIN_S = 60.0

FRONT = ("mcp-front", "lockgate.client.mcp --http --port 0")
#: Every kind (status name, module and arguments) that connects to the broker as it starts.
CONNECTING = CHILDREN
#: One of each way a process starts: a service host, the read side, a demo
#: adapter, the MCP adapter, the front door.
ENTRIES = (("intake", "lockgate.intake"), ("projector", "lockgate.projector"),
           ("adapter.casenotes", "lockgate.worlds.casenotes"), ("adapter.mcp", "lockgate.mcp"), FRONT)


def env_for(root: Path, url: str, **extra: str) -> dict[str, str]:
    """A child's environment: only this test's settings, its state under ``root``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKGATE_")}
    env.update(
        LOCKGATE_NATS_URL=url, LOCKGATE_VAR_DIR=str(root / "var"),
        LOCKGATE_CASE_WORLD_DIR=str(root / "case"), LOCKGATE_ITEMS_WORLD_DIR=str(root / "items"),
        LOCKGATE_REPO_WORLD_DIR=str(root / "repo"), LOCKGATE_CONSOLE_PORT="0",
        LOCKGATE_FRONT_NATS_URL=url, LOCKGATE_FRONT_VAR_DIR=str(root / "var"),
        LOCKGATE_FRONT_TENANT="tenant-a", LOCKGATE_FRONT_ACTOR="user-42",
        LOCKGATE_FRONT_PORT_FILE=str(root / "front.port"),
    )
    env.update(extra)
    return env


@dataclass
class Child:
    """One process of a kind, and what it wrote to stderr."""

    proc: asyncio.subprocess.Process
    err: bytearray = field(default_factory=bytearray)
    reader: asyncio.Task[None] | None = None

    async def read(self) -> None:
        assert self.proc.stderr is not None
        while chunk := await self.proc.stderr.read(65536):
            self.err.extend(chunk)

    async def exits_within(self, timeout_s: float) -> int | None:
        """Its exit status, or None when it is still running after ``timeout_s``."""
        try:
            return await asyncio.wait_for(self.proc.wait(), timeout_s)
        except TimeoutError:
            return None

    async def end(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()
        if self.reader is not None:
            await self.reader

    def lines(self) -> list[str]:
        return [line for line in self.err.decode(errors="replace").splitlines() if line.strip()]


async def run_to_exit(module: str, env: dict[str, str]) -> tuple[int | None, Child]:
    """Start ``module`` and wait for it to exit by itself (``None``: it did not, and was ended)."""
    child = await start(module, env)
    try:
        return await child.exits_within(REACHES_WITHIN_S), child
    finally:
        await child.end()


async def start(module: str, env: dict[str, str]) -> Child:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", *module.split(), env=env, cwd=REPO,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE)
    child = Child(proc)
    child.reader = asyncio.create_task(child.read())
    return child


class Listener:
    """A TCP port where a broker should be: silent once a client connects, or hanging up at once."""

    def __init__(self, *, hang_up: bool) -> None:
        self.hang_up = hang_up
        self.accepted = 0
        self.held: list[asyncio.StreamWriter] = []
        self.server: asyncio.Server | None = None

    async def on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self.hang_up:
            writer.close()
        else:
            self.held.append(writer)  # no INFO, ever: the client waits in its handshake

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"nats://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def wait_for(self, count: int, child: Child) -> None:
        deadline = asyncio.get_running_loop().time() + REACHES_WITHIN_S
        while self.accepted < count:
            assert child.proc.returncode is None, child.lines()[-10:]
            assert asyncio.get_running_loop().time() < deadline, "it never tried the broker"
            await asyncio.sleep(0.05)


@pytest.fixture
async def listener(request: pytest.FixtureRequest) -> AsyncIterator[Listener]:
    lst = Listener(hang_up=bool(request.param))
    lst.server = await asyncio.start_server(lst.on_client, "127.0.0.1", 0)
    try:
        yield lst
    finally:
        for writer in lst.held:
            writer.close()
        lst.server.close()


def names(kinds: Sequence[tuple[str, str]]) -> list[str]:
    return [name for name, _ in kinds]


@pytest.mark.parametrize(("listener", "sig"), [(False, signal.SIGTERM), (True, signal.SIGINT)],
                         ids=["broker-silent-SIGTERM", "broker-hangs-up-SIGINT"], indirect=["listener"])
@pytest.mark.parametrize(("name", "module"), CONNECTING, ids=names(CONNECTING))
async def test_a_signal_stops_a_process_still_waiting_for_its_broker(
    tmp_path: Path, listener: Listener, sig: signal.Signals, name: str, module: str
) -> None:
    child = await start(module, env_for(tmp_path, listener.url))
    try:
        # In its handshake with a broker that says nothing, or retrying one that hung up.
        await listener.wait_for(1 if not listener.hang_up else 2, child)
        child.proc.send_signal(sig)
        code = await child.exits_within(STOPS_WITHIN_S)
    finally:
        await child.end()
    assert code is not None, f"{name} still running {STOPS_WITHIN_S:g}s after {sig.name}"
    assert b"Traceback" not in child.err, child.lines()[-20:]


@pytest.mark.parametrize(("name", "module"), CONNECTING, ids=names(CONNECTING))
async def test_a_process_without_its_credentials_file_says_so_in_one_line(
    tmp_path: Path, name: str, module: str
) -> None:
    missing = tmp_path / "credentials" / f"{name}.json"
    code, child = await run_to_exit(module, env_for(tmp_path, "nats://127.0.0.1:1",
                                                    LOCKGATE_CREDENTIALS_FILE=str(missing)))
    assert code == CONFIG_ERROR_EXIT, child.lines()[-20:]
    (line,) = child.lines()
    assert str(missing) in line and "LOCKGATE_CREDENTIALS_FILE" in line


@pytest.mark.parametrize(("name", "module"), ENTRIES, ids=names(ENTRIES))
async def test_a_malformed_setting_is_one_line_and_no_restart(tmp_path: Path, name: str, module: str) -> None:
    env = env_for(tmp_path, "nats://127.0.0.1:1", LOCKGATE_REPLICAS="three")
    del env["LOCKGATE_FRONT_TENANT"]  # the front door's run has no tenant
    code, child = await run_to_exit(module, env)
    assert code == CONFIG_ERROR_EXIT, child.lines()[-20:]
    (line,) = child.lines()
    assert ("replicas" if name != "mcp-front" else "tenant") in line


@pytest.fixture(scope="module")
def guarded_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """A broker that lets in only a user none of these processes is given."""
    server = NatsServer(store_dir=tmp_path_factory.mktemp("nats"),
                        config_text="authorization { user: somebody, password: else }")
    with server:
        yield server


@pytest.mark.parametrize(("name", "module"), CONNECTING, ids=names(CONNECTING))
async def test_a_broker_refusing_the_process_is_one_line_not_a_retry_loop(
    tmp_path: Path, guarded_broker: NatsServer, name: str, module: str
) -> None:
    code, child = await run_to_exit(module, env_for(tmp_path, guarded_broker.url))
    assert code == CONFIG_ERROR_EXIT, child.lines()[-20:]
    (line,) = child.lines()
    assert "refused" in line and "LOCKGATE_CREDENTIALS_FILE" in line
