"""``make cluster`` as a newcomer runs it: ``lockgate run --cluster 3``, then ``lockgate
status`` and ``lockgate demo`` against it, then Ctrl-C.

The real supervisor starts three nodes, PostgreSQL, the topology with its three events
partitions (each led by a node of its own) and two replicas of every process; ``status``
must see every node healthy, every stream led with current replicas and every replica
answering; the demo table must play as on one server; a node killed comes back and gets
its partition's leadership back; SIGTERM must stop everything.

``make test-cluster`` runs it (``LOCKGATE_CLUSTER=1``).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from lockgate.operations.supervisor import READY_LINE
from lockgate.testing.processes import Printing, pids_naming

pytestmark = pytest.mark.skipif(
    os.environ.get("LOCKGATE_CLUSTER") != "1" and os.environ.get("LOCKGATE_CLUSTER_LONG") != "1",
    reason="make test-cluster runs the cluster profile (LOCKGATE_CLUSTER=1)")


def environment(var_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKGATE_")}
    env.update(LOCKGATE_VAR_DIR=str(var_dir), LOCKGATE_CONSOLE_PORT="0")
    return env


async def lockgate(var_dir: Path, *args: str, timeout_s: float = 120.0) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "lockgate.cli", *args, env=environment(var_dir),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
    return proc.returncode or 0, out.decode()


@pytest.fixture
async def cluster() -> AsyncIterator[tuple[Path, list[str]]]:
    # PostgreSQL runs as its own user when started by root, and must reach var/postgres:
    # pytest's own temporary directories are closed to others.
    var_dir = Path(tempfile.mkdtemp(prefix="lockgate-cluster-"))
    var_dir.chmod(0o755)
    run = await Printing.start(sys.executable, "-m", "lockgate.cli", "run", "--cluster", "3",
                               "--port", "0", env=environment(var_dir))
    try:
        await run.wait_for_line(lambda line: READY_LINE in line, 240)
        yield var_dir, run.lines
    finally:
        code = await run.stop(signal.SIGTERM, 60)
    shutil.rmtree(var_dir, ignore_errors=True)
    assert code == 0, run.lines[-20:]


async def test_make_cluster_status_and_demo(cluster: tuple[Path, list[str]]) -> None:
    var_dir, lines = cluster
    code, out = await lockgate(var_dir, "status", "--json")
    assert code == 0, out
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    nodes = {r["node"] for r in rows if "node" in r}
    assert nodes == {"n1", "n2", "n3"}, out
    streams = {r["stream"]: r for r in rows if "stream" in r}
    partitions = [streams[f"LG_EVENTS_{k}"] for k in range(3)]
    assert sorted(p["leader"] for p in partitions) == ["n1", "n2", "n3"], partitions
    assert all(len(p["replicas"]) == 2 and all(r["current"] for r in p["replicas"]) for p in partitions)
    assert "LG_EVENTS" not in streams
    replicas = [r for r in rows if "service" in r]
    assert replicas and all(r["ok"] for r in replicas), [r for r in replicas if not r["ok"]]
    assert sum(1 for r in replicas if r["service"] == "policy") == 2
    code, out = await lockgate(var_dir, "demo")
    assert code == 0, out
    assert any("stream leaders per node" in line for line in lines), lines

    # The node leading partition 0 dies. The supervisor starts it again on its store; the
    # partition's leadership went to another node meanwhile, and once the node is back and
    # current (for HAND_BACK_AFTER_S) it is handed back, so no node leads two partitions.
    # (Raft may also elect the returning node again by itself, as it did in one run here:
    # whole either way; the hand-back itself is held to its decision in the unit tests and
    # to a moved partition in the compose keeper's integration test.)
    killed = streams["LG_EVENTS_0"]["leader"]
    os.kill(node_pid(var_dir, killed), signal.SIGKILL)
    deadline = time.monotonic() + 180
    while True:
        await asyncio.sleep(2)
        code, out = await lockgate(var_dir, "status", "--json")
        rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        led = {r["stream"]: r for r in rows if "stream" in r}
        spread = [led.get(f"LG_EVENTS_{k}", {}).get("leader") for k in range(3)]
        handed_back = any("leaders handed back" in line for line in lines)
        restarted = any(f"cluster node {killed} exited" in line for line in lines)
        if code == 0 and spread == ["n1", "n2", "n3"] and restarted:
            break
        assert time.monotonic() < deadline, (
            f"not whole within 180 s of {killed}'s SIGKILL: status exit {code}, partition "
            f"leaders {spread}, handed back: {handed_back}\n{out}\n" + "\n".join(lines[-30:]))
    if handed_back:
        assert any(f"LG_EVENTS_0 on {killed}" in line for line in lines if "handed back" in line)
    code, out = await lockgate(var_dir, "demo")
    assert code == 0, out


def node_pid(var_dir: Path, name: str) -> int:
    """The pid of the cluster node ``name`` (its configuration is under its own store)."""
    conf = var_dir / "cluster" / name / "nats-server.conf"
    pids = pids_naming(conf)
    assert len(pids) == 1, f"node {name} ({conf}): processes {pids}"
    return pids[0]
