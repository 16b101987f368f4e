"""Adapters registered with a deployment: taken in by a running supervisor (SIGUSR1) and at
every start, each with a broker user that reaches exactly its own capabilities."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import nats
import pytest

from lockgate.operations.natsserver import free_port
from lockgate.operations.registered import Registration, register
from lockgate.operations.supervisor import READY_LINE
from lockgate.runtime.credentials import credentials_path, load_credentials, read_run_info
from lockgate.runtime.topology import EXEC, exec_consumer_config
from lockgate.testing.processes import Printing

HERE = Path(__file__).parent


async def supervise(var_dir: Path) -> Printing:
    """The real supervisor over one fake child (``fakes.steady``), its broker on a free port."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKGATE_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    sup = await Printing.start(sys.executable, "-m", "fakes.supervise", str(var_dir),
                               str(free_port()), "steady", env=env)
    await sup.wait_for_line(lambda line: line == READY_LINE, 60)
    return sup


@pytest.fixture
def var_dir(tmp_path: Path) -> Path:
    return tmp_path / "var"


async def reaches(var_dir: Path, name: str, capability: str) -> bool:
    """Whether ``adapter-<name>`` may create its durable on ``capability``'s orders."""
    info = read_run_info(var_dir)
    assert info is not None
    creds = load_credentials(credentials_path(var_dir, f"adapter-{name}"))
    nc = await nats.connect(info.url, user=creds.user, password=creds.password,
                            inbox_prefix=creds.inbox_prefix, allow_reconnect=False)
    try:
        js = nc.jetstream(prefix=creds.js_prefix, timeout=2)
        await js.stream_info("KV_LG_CAPABILITIES")
        consumer = "adapter-" + capability.replace(".", "_")
        try:
            await js.add_consumer(EXEC, exec_consumer_config(capability, 5.0))
        except (nats.errors.Error, TimeoutError):
            return False
        return (await js.consumer_info(EXEC, consumer)).name == consumer
    finally:
        await nc.close()


async def test_a_running_supervisor_takes_in_a_registered_adapter(var_dir: Path) -> None:
    sup = await supervise(var_dir)
    try:
        info = read_run_info(var_dir)
        assert info is not None and "tickets" not in info.adapters
        assert "casenotes" in info.adapters  # the configured ones are listed too
        register(var_dir, Registration(name="tickets", capabilities=("ticket.comment",)))
        os.kill(info.pid, signal.SIGUSR1)
        await sup.wait_for_line(lambda line: line.startswith("lockgate: adapter tickets taken in"), 30)
        now = read_run_info(var_dir)
        assert now is not None and now.adapters["tickets"] == ["ticket.comment"]
        assert await reaches(var_dir, "tickets", "ticket.comment")
        # Its grants are its capabilities': another adapter's orders are not its to consume.
        assert not await reaches(var_dir, "tickets", "case.add_note")
    finally:
        assert await sup.stop(signal.SIGTERM) == 0, sup.lines[-20:]


async def test_a_registered_adapter_keeps_its_user_on_the_next_start(var_dir: Path) -> None:
    register(var_dir, Registration(name="tickets", capabilities=("ticket.comment",)))
    sup = await supervise(var_dir)
    try:
        info = read_run_info(var_dir)
        assert info is not None and info.adapters["tickets"] == ["ticket.comment"]
        password = load_credentials(credentials_path(var_dir, "adapter-tickets")).password
        assert await reaches(var_dir, "tickets", "ticket.comment")
    finally:
        assert await sup.stop(signal.SIGTERM) == 0, sup.lines[-20:]
    sup = await supervise(var_dir)
    try:
        assert load_credentials(credentials_path(var_dir, "adapter-tickets")).password == password
        assert await reaches(var_dir, "tickets", "ticket.comment")
    finally:
        assert await sup.stop(signal.SIGTERM) == 0, sup.lines[-20:]
