"""The cluster profile (``lockgate run --cluster N``): a local cluster of ``nats-server``
nodes, replicas of every service and adapter, and the views on PostgreSQL.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

from nats.aio.client import Client

from lockgate.operations.cluster import (
    SETTLE_TIMEOUT_S,
    LocalCluster,
    node_ports,
    ports_from,
    wait_for_leaders,
)
from lockgate.operations.natsserver import NatsServerError
from lockgate.operations.postgres import PostgresServer, PostgresUnavailable
from lockgate.operations.status import READ_SIDE
from lockgate.operations.supervisor.broker import DEFAULT_PORT, probe_port
from lockgate.operations.supervisor.report import SupervisorError, _say
from lockgate.runtime.settings import Settings
from lockgate.runtime.topology import spread_leaders, topology_streams

#: Replicas of every service and adapter in the cluster profile.
CLUSTER_CHILD_REPLICAS = 2


def replicas_of(name: str) -> int:
    """How many replicas of the child ``name`` the cluster profile runs.

    Two of every service and adapter, on their shared durables; one of each read-side
    process: the projector keeps one ordered position in the views, the archiver purges
    what the views hold, the console serves a port.
    """
    return 1 if name in {n for n, _ in READ_SIDE} else CLUSTER_CHILD_REPLICAS


def cluster_dir(var_dir: Path) -> Path:
    """Where the local cluster keeps its nodes' stores and their accounts."""
    return var_dir / "cluster"


async def _local_cluster(var_dir: Path, size: int, port: int | None) -> LocalCluster:
    ports = node_ports(size) if port == 0 else ports_from(
        DEFAULT_PORT if port is None else port, size)
    if port != 0 and max(p.monitor for p in ports) > 65535:
        raise SupervisorError(f"--port {port} leaves no room for the nodes' routes and "
                              "monitoring (4000 above it); choose a lower one, or 0")
    taken = [t for p in (ports if port != 0 else []) for t in (p.client, p.route, p.monitor)
             if await probe_port("127.0.0.1", t) != "free"]
    if taken and port is None:
        _say(f"lockgate: port {taken[0]} on 127.0.0.1 is taken (another lockgate run?); the "
             "nodes take free ports")
        ports = node_ports(size)
    elif taken:
        raise SupervisorError(
            f"port {taken[0]} on 127.0.0.1 is taken (another lockgate run?); stop it or choose "
            "other ports (--port N: clients from N, or 0 for ephemeral ports)")
    nodes = LocalCluster(cluster_dir(var_dir), size, ports, log_dir=var_dir / "log")
    try:
        try:
            await asyncio.to_thread(nodes.start, SETTLE_TIMEOUT_S)
        except NatsServerError as exc:
            if port not in (None, 0):
                raise
            # A port found free can be taken before the node binds it (another run
            # starting, an outgoing connection given one from the ephemeral range): once
            # more, on free ones.
            _say(f"lockgate: the local cluster did not start ({exc}); again on other ports")
            nodes = LocalCluster(cluster_dir(var_dir), size, node_ports(size),
                                 log_dir=var_dir / "log")
            await asyncio.to_thread(nodes.start, SETTLE_TIMEOUT_S)
    except NatsServerError as exc:
        raise SupervisorError(
            f"the local cluster did not start: {exc} (see {var_dir / 'log'}/nats-n*.log)") from exc
    for a in nodes.addresses():
        _say(f"lockgate: cluster node {a.name} on {a.url} (monitoring {a.monitor}), "
             f"store {cluster_dir(var_dir) / a.name}")
    return nodes


async def _views_server(settings: Settings, var_dir: Path) -> tuple[PostgresServer | None, str]:
    """The PostgreSQL server of the views (started here unless ``views_url`` names one)."""
    if settings.views_url:
        return None, settings.views_url
    # Not under cluster/: that directory holds the accounts (mode 0700), and a server
    # started by root runs as the postgres user.
    server = PostgresServer(var_dir / "postgres")
    try:
        await asyncio.to_thread(server.start)
    except PostgresUnavailable as exc:
        raise SupervisorError(
            f"PostgreSQL for the views did not start: {exc} (install postgresql, or set "
            "LOCKGATE_VIEWS_URL)") from exc
    _say(f"lockgate: views on PostgreSQL at 127.0.0.1:{server.port}, data {server.data}")
    return server, server.url


async def _settle_leaders(
    nc: Client, nodes: LocalCluster, settings: Settings, stream_replicas: int,
) -> None:
    """Wait for every stream's leader, spread the events partitions' leaders over the nodes
    (``spread_leaders``), and say how many each node leads.

    Raises:
        SupervisorError: the streams did not settle.
    """
    try:
        streams = topology_streams(settings.partitions)
        await wait_for_leaders(nodes.addresses(), streams)
        await spread_leaders(nc, settings.partitions, [n.name for n in nodes.addresses()])
        report = await wait_for_leaders(nodes.addresses(), streams)
    except TimeoutError as exc:
        raise SupervisorError(f"the cluster's streams did not settle: {exc}") from exc
    leaders = Counter(s.leader for s in report.streams)
    _say(f"lockgate: topology created at R{stream_replicas}; stream leaders per node "
         f"{dict(sorted(leaders.items()))}")
