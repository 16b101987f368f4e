"""``make cluster`` started again on the store it left: Ctrl-C, start, ready, four times over.

A cluster started on its stores elects its JetStream meta leader first and each stream's
leader after it; a topology step that asked before then was told nothing for five seconds
and stopped the run ("could not create streams ... TimeoutError()", 3 starts in 4). The
real ``lockgate run --cluster 3`` on fixed ports (as ``make cluster`` uses), stopped by
SIGINT as Ctrl-C would, must become ready on every start.

``make test-cluster`` runs it (``LOCKGATE_CLUSTER=1``): each start is a whole cluster profile.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import sys
import tempfile
from pathlib import Path

import pytest

from lockgate.operations.cluster import DEFAULT_SIZE
from lockgate.operations.supervisor import READY_LINE
from lockgate.testing.processes import Printing

pytestmark = pytest.mark.skipif(
    os.environ.get("LOCKGATE_CLUSTER") != "1" and os.environ.get("LOCKGATE_CLUSTER_LONG") != "1",
    reason="make test-cluster runs the cluster profile (LOCKGATE_CLUSTER=1)")

#: Starts after the first, each on the stores the one before left.
RESTARTS = 4


def environment(var_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKGATE_")}
    env.update(LOCKGATE_VAR_DIR=str(var_dir), LOCKGATE_CONSOLE_PORT="0")
    return env


def fixed_ports() -> int:
    """A first client port whose nodes' client, route (2000 above) and monitoring (4000
    above) ports are all free, below the kernel's usual ephemeral range (32768 up), so no
    outgoing connection takes one meanwhile."""
    for base in range(21000, 28000, 7):
        with contextlib.ExitStack() as held:
            try:
                for port in (base + offset + i for offset in (0, 2000, 4000)
                             for i in range(DEFAULT_SIZE)):
                    held.enter_context(socket.create_server(("127.0.0.1", port)))
            except OSError:
                continue
        return base
    raise AssertionError("no free ports for a cluster")


async def start_and_stop(var_dir: Path, port: int) -> list[str]:
    """One ``lockgate run --cluster 3``: until ready (or it exits), then SIGINT; every line."""
    run = await Printing.start(sys.executable, "-m", "lockgate.cli", "run", "--cluster", "3",
                               "--port", str(port), env=environment(var_dir))
    try:
        with contextlib.suppress(AssertionError):
            await run.wait_for_line(lambda line: line == READY_LINE, 300)
    finally:
        code = await run.stop(signal.SIGINT, 90)
    return [*run.lines, f"(exit {code})"]


async def test_make_cluster_started_again_on_its_stores_becomes_ready_every_time() -> None:
    # PostgreSQL runs as its own user when started by root, and must reach var/postgres.
    var_dir = Path(tempfile.mkdtemp(prefix="lockgate-cluster-restart-"))
    var_dir.chmod(0o755)
    port = fixed_ports()
    outcomes: list[tuple[bool, str]] = []
    try:
        for _ in range(1 + RESTARTS):
            lines = await start_and_stop(var_dir, port)
            outcomes.append((READY_LINE in lines and lines[-1] == "(exit 0)",
                             "\n".join(lines[-8:])))
    finally:
        shutil.rmtree(var_dir, ignore_errors=True)
    failed = [tail for ready, tail in outcomes if not ready]
    assert not failed, f"{len(failed)} of {len(outcomes)} starts not ready:\n" + "\n--\n".join(failed)
