"""A service process that can no longer work ends itself, so that its supervisor restarts it."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import nats

from lockgate.operations.natsserver import NatsServer
from lockgate.operations.status import check_status
from lockgate.runtime.topology import ensure_topology
from lockgate.runtime.watchdog import EXIT_STUCK, Watchdog

HERE = Path(__file__).parent


async def test_a_service_whose_connection_the_server_closed_exits(fresh_server: NatsServer) -> None:
    nc = await nats.connect(fresh_server.url)
    try:
        await ensure_topology(nc.jetstream())
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKGATE_")}
        env.update(LOCKGATE_NATS_URL=fresh_server.url,
                   PYTHONPATH=os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")])))
        proc = subprocess.Popen([sys.executable, "-m", "fakes.closing"], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 30
            while not (await check_status(nc, ["closing"], timeout_s=0.5))["closing"]:
                assert proc.poll() is None and time.monotonic() < deadline, "the fake never answered"
            # The server closes the fake's connection for good, and nothing would ever pull
            # or answer again. The watchdog ends the process, so its supervisor restarts it.
            await nc.jetstream().publish("lg.propose.tenant-a.run-1", b"{}")
            while proc.poll() is None:
                assert time.monotonic() < deadline + 30, "the process neither exited nor recovered"
                await asyncio.sleep(0.1)
            assert proc.returncode == EXIT_STUCK, proc.stderr.read() if proc.stderr else ""
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    finally:
        await nc.close()


def test_the_watchdog_exits_when_the_connection_closes() -> None:
    exited = threading.Event()
    closed = threading.Event()
    codes: list[int] = []

    def exit_process(code: int) -> None:
        codes.append(code)
        exited.set()

    async def main() -> None:
        dog = Watchdog(closed.is_set, check_s=0.01, exit_process=exit_process)
        dog.start(asyncio.get_running_loop())
        await asyncio.sleep(0.05)
        assert not exited.is_set()
        closed.set()
        await asyncio.to_thread(exited.wait, 10)
        dog.stop()

    asyncio.run(main())
    assert codes == [EXIT_STUCK]


def test_the_watchdog_exits_when_the_loop_stalls_and_not_after_stop() -> None:
    exited = threading.Event()

    async def main() -> None:
        dog = Watchdog(lambda: False, stall_s=0.2, check_s=0.01, exit_process=lambda _c: exited.set())
        dog.start(asyncio.get_running_loop())
        await asyncio.sleep(0.1)
        assert not exited.is_set()  # the loop runs: its heartbeat is renewed
        exited.wait(10)  # blocks the loop, as a busy handler would
        assert exited.is_set()
        quiet = threading.Event()
        calm = Watchdog(lambda: True, check_s=0.01, exit_process=lambda _c: quiet.set())
        calm.stop()  # shutting down on purpose: a closing connection is expected
        calm.start(asyncio.get_running_loop())
        await asyncio.sleep(0.1)
        assert not quiet.is_set()

    asyncio.run(main())
