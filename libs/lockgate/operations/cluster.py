"""A JetStream cluster on loopback: three ``nats-server`` processes from the same wheel.

``lockgate run --cluster 3`` (``make cluster``) and the cluster tests run it. Each node
is a :class:`~lockgate.operations.natsserver.NatsServer` with a server name, routes to the
other nodes and ``sync_interval: always``; its store is ``<root>/n<k>/``; all of them
include the one ``accounts.conf`` the deployment renders (``lockgate.operations.roles``),
so the cluster has exactly the single server's accounts and users.

What the nodes say about themselves (up or down, the JetStream meta leader, each stream's
leader and replicas) is read from their HTTP monitoring ports, on loopback, which need
no NATS user: :func:`cluster_report`.

Server facts this relies on (nats-server ``server/raft.go``): a follower waits 4 to 9 s
for a silent leader before it campaigns, heartbeats go every second, and a leader that
hears from no quorum for 10 s steps down. So a node frozen for longer than ~10 s has lost
every leadership it held, and the two others have elected new leaders meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from lockgate.eventstore.partitions import Partitions
from lockgate.operations.natsserver import ClusterPeer, NatsServer, NatsServerError, free_port
from lockgate.runtime.credentials import NodeAddress

#: The cluster's name (``cluster.name``); every node of one cluster shares it.
CLUSTER_NAME = "lockgate"
#: Nodes of the default local cluster.
DEFAULT_SIZE = 3
#: ``make cluster``'s ports: client 4222-4224, routes 6222-6224, monitoring 8222-8224
#: (as ``deploy/nats/cluster/n<k>.conf`` describe the same cluster).
DEFAULT_CLIENT_PORT, DEFAULT_ROUTE_PORT, DEFAULT_MONITOR_PORT = 4222, 6222, 8222
#: The longest a follower waits for a silent leader before it campaigns (raft.go's
#: ``maxElectionTimeoutDefault``); a leader without quorum steps down after 10 s.
ELECTION_TIMEOUT_MAX_S = 9.0
LOST_QUORUM_S = 10.0


@dataclass(frozen=True)
class NodePorts:
    """One node's loopback ports."""

    client: int
    route: int
    monitor: int


def node_ports(size: int, *, base: NodePorts | None = None) -> list[NodePorts]:
    """Ports for ``size`` nodes: consecutive from ``base``, or free ephemeral ones."""
    if base is None:
        return [NodePorts(free_port(), free_port(), free_port()) for _ in range(size)]
    return [NodePorts(base.client + i, base.route + i, base.monitor + i) for i in range(size)]


def ports_from(client: int, size: int) -> list[NodePorts]:
    """Ports for ``size`` nodes whose first client port is ``client``: routes and monitoring
    as far above it as ``make cluster``'s (6222 and 8222 to 4222), so two clusters given
    different client ports do not meet on the others."""
    return node_ports(size, base=NodePorts(
        client, client + DEFAULT_ROUTE_PORT - DEFAULT_CLIENT_PORT,
        client + DEFAULT_MONITOR_PORT - DEFAULT_CLIENT_PORT))


def node_name(index: int) -> str:
    """The server name of the node at ``index`` (0-based): ``n1``, ``n2``, ..."""
    return f"n{index + 1}"


def node_tag(name: str) -> str:
    """The server tag of node ``name`` (``LocalCluster.server_tags``)."""
    return f"node:{name}"


@dataclass
class LocalCluster:
    """``size`` JetStream nodes on loopback, each with its own store under ``root``.

    ``accounts.conf`` under ``root`` is included by every node: render it first
    (``lockgate.operations.deployment.ensure_deployment(..., server_config=cluster.accounts_conf)``).
    """

    root: Path
    size: int = DEFAULT_SIZE
    ports: Sequence[NodePorts] = ()
    log_dir: Path | None = None
    #: ``sync_interval: always`` on every node (the profile's setting; the benchmark's R1
    #: profile turns it off to measure the cluster at the server's default).
    sync_always: bool = True
    #: Tag each node ``node:<name>`` (``server_tags``), so that a stream can be placed on
    #: one by ``placement.tags``: JetStream puts every R1 stream on the same node otherwise.
    server_tags: bool = False
    nodes: list[NatsServer] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError("a cluster has at least one node")
        ports = list(self.ports) or node_ports(self.size)
        if len(ports) != self.size:
            raise ValueError(f"{len(ports)} port sets for {self.size} nodes")
        for i, p in enumerate(ports):
            name = node_name(i)
            peer = ClusterPeer(
                server_name=name, cluster_name=CLUSTER_NAME, route_port=p.route,
                peer_route_ports=tuple(q.route for j, q in enumerate(ports) if j != i),
            )
            self.nodes.append(NatsServer(
                store_dir=self.root / name, port=p.client, monitor_port=p.monitor,
                # Relative to the node's own configuration file, in its store directory.
                config_text='include "../accounts.conf"' + (
                    f'\nserver_tags: ["{node_tag(name)}"]' if self.server_tags else ""),
                log_file=(self.log_dir / f"nats-{name}.log") if self.log_dir else None,
                cluster=peer if self.size > 1 else None, sync_always=self.sync_always,
            ))

    @property
    def accounts_conf(self) -> Path:
        """The accounts block every node includes."""
        return self.root / "accounts.conf"

    @property
    def urls(self) -> list[str]:
        """Every node's client URL."""
        return [n.url for n in self.nodes]

    @property
    def url(self) -> str:
        """Every node's client URL, comma-separated (what ``LOCKGATE_NATS_URL`` takes)."""
        return ",".join(self.urls)

    def addresses(self) -> list[NodeAddress]:
        """Where each node listens."""
        return [NodeAddress(name=n.cluster.server_name if n.cluster else node_name(i), url=n.url,
                            monitor=f"http://127.0.0.1:{n.monitor_port}")
                for i, n in enumerate(self.nodes)]

    def node(self, name: str) -> NatsServer:
        """The node called ``name``.

        Raises:
            KeyError: no such node.
        """
        for i, n in enumerate(self.nodes):
            if node_name(i) == name:
                return n
        raise KeyError(name)

    def start(self, timeout_s: float = 30.0) -> None:
        """Start every node and wait until the cluster has a JetStream meta leader.

        Raises:
            NatsServerError: a node did not start, or no leader within ``timeout_s``.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        if not self.accounts_conf.exists():
            raise NatsServerError(f"no {self.accounts_conf}: render the deployment first")
        try:
            for n in self.nodes:
                n.start(timeout_s)
            self.wait_healthy(timeout_s)
        except BaseException:
            self.stop()
            raise

    def wait_healthy(self, timeout_s: float = 30.0, names: Sequence[str] | None = None) -> None:
        """Wait until each running node (of ``names``) reports JetStream healthy.

        Raises:
            NatsServerError: not within ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        addresses = [a for a in self.addresses() if names is None or a.name in names]
        while True:
            # A node that exited (a port taken since it was chosen) will never be healthy.
            for a in addresses:
                process = self.node(a.name).process
                if process is not None and process.poll() is not None:
                    raise NatsServerError(f"cluster node {a.name} exited with {process.returncode}")
            unhealthy = [a.name for a in addresses if not healthy(a.monitor)]
            if not unhealthy:
                return
            if time.monotonic() > deadline:
                raise NatsServerError(f"cluster nodes not healthy after {timeout_s}s: {unhealthy}")
            time.sleep(0.2)

    def restart(self, name: str, timeout_s: float = 30.0) -> None:
        """Start a stopped or killed node again on its own store and ports."""
        node = self.node(name)
        node.kill()
        node.start(timeout_s)

    def stop(self) -> None:
        """Stop every node (a frozen one is thawed first, or SIGTERM would wait on it)."""
        import signal

        for n in self.nodes:
            n.signal(signal.SIGCONT)
        for n in self.nodes:
            n.stop()


def _get_json(url: str, timeout_s: float = 1.0) -> dict[str, object] | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as reply:  # noqa: S310 - loopback
            body = json.loads(reply.read())
    except (urllib.error.HTTPError, urllib.error.URLError, OSError, ValueError):
        return None
    return body if isinstance(body, dict) else None


def healthy(monitor: str, timeout_s: float = 1.0) -> bool:
    """Whether the node's ``/healthz`` says JetStream is up and current."""
    try:
        with urllib.request.urlopen(f"{monitor}/healthz", timeout=timeout_s) as reply:  # noqa: S310
            return bool(reply.status == 200)
    except (urllib.error.HTTPError, urllib.error.URLError, OSError):
        return False


class ReplicaState(msgspec.Struct, frozen=True, kw_only=True):
    """One follower of a stream, as its leader sees it."""

    name: str
    current: bool
    lag: int = 0
    active_s: float | None = None


class StreamState(msgspec.Struct, frozen=True, kw_only=True):
    """A stream's leader and replicas."""

    stream: str
    leader: str
    replicas: list[ReplicaState]
    messages: int = 0


class NodeState(msgspec.Struct, frozen=True, kw_only=True):
    """One node: whether it answers, and who it thinks leads the JetStream meta group."""

    name: str
    url: str
    up: bool
    healthy: bool = False
    meta_leader: str = ""


class ClusterReport(msgspec.Struct, frozen=True, kw_only=True):
    """What ``lockgate status`` says about the broker of a cluster."""

    nodes: list[NodeState]
    streams: list[StreamState]


def _node_state(address: NodeAddress) -> tuple[NodeState, dict[str, object] | None]:
    jsz = _get_json(f"{address.monitor}/jsz?accounts=true&streams=true")
    if jsz is None:
        return NodeState(name=address.name, url=address.url, up=False), None
    meta = jsz.get("meta_cluster")
    leader = str(meta.get("leader", "")) if isinstance(meta, dict) else ""
    return NodeState(name=address.name, url=address.url, up=True,
                     healthy=healthy(address.monitor), meta_leader=leader), jsz


def _streams(jsz: dict[str, object], server_name: str) -> dict[str, StreamState]:
    """The streams ``server_name`` leads, from its ``/jsz?accounts=true&streams=true``."""
    found: dict[str, StreamState] = {}
    accounts = jsz.get("account_details")
    for account in accounts if isinstance(accounts, list) else []:
        streams = account.get("stream_detail") if isinstance(account, dict) else None
        for s in streams if isinstance(streams, list) else []:
            if not isinstance(s, dict):
                continue
            cluster = s.get("cluster")
            if not isinstance(cluster, dict) or cluster.get("leader") != server_name:
                continue
            state = s.get("state")
            replicas = [
                ReplicaState(name=str(r.get("name", "")), current=bool(r.get("current")),
                             lag=int(r.get("lag", 0) or 0),
                             active_s=(int(r["active"]) / 1e9) if isinstance(r.get("active"), int) else None)
                for r in cluster.get("replicas", []) or [] if isinstance(r, dict)
            ]
            found[str(s.get("name"))] = StreamState(
                stream=str(s.get("name")), leader=server_name, replicas=replicas,
                messages=int(state.get("messages", 0)) if isinstance(state, dict) else 0)
    return found


def read_cluster(addresses: Sequence[NodeAddress]) -> ClusterReport:
    """Ask every node how it is, and each stream's leader how its replicas are (blocking)."""
    nodes: list[NodeState] = []
    streams: dict[str, StreamState] = {}
    for address in addresses:
        state, jsz = _node_state(address)
        nodes.append(state)
        if jsz is not None:
            # Each leader knows its followers' lag; a follower's view of them is stale.
            for name, stream in _streams(jsz, address.name).items():
                streams.setdefault(name, stream)
    return ClusterReport(nodes=nodes, streams=[streams[k] for k in sorted(streams)])


#: How often the events partitions' leaders are looked at (by ``lockgate run --cluster``'s
#: supervisor, and by ``python -m lockgate.operations.admin --keep-leaders``), and how long
#: a partition may be led off its node, its own node's replica current, before the
#: leadership is handed back (a node that comes and goes is not chased).
HAND_BACK_EVERY_S = 10.0
HAND_BACK_AFTER_S = 30.0


def misplaced_leaders(
    report: ClusterReport, partitions: Partitions, nodes: Sequence[str]
) -> dict[str, str]:
    """The events partitions led elsewhere than their node (partition k on node k mod N, as
    ``lockgate.runtime.topology.spread_leaders`` places them), by stream, with that node.

    Only while it is safe to move them: every node up and healthy, and the partition's
    replica on its node current (a node that just came back catches up first). A report
    that says otherwise gives none.
    """
    if len(partitions) < 2 or len(nodes) < 2:
        return {}
    if not report.nodes or not all(n.up and n.healthy for n in report.nodes):
        return {}
    led = {s.stream: s for s in report.streams}
    moves: dict[str, str] = {}
    for p in partitions:
        preferred = nodes[p.index % len(nodes)]
        stream = led.get(p.stream)
        if stream is None or stream.leader == preferred:
            continue
        replica = next((r for r in stream.replicas if r.name == preferred), None)
        if replica is not None and replica.current:
            moves[p.stream] = preferred
    return moves


class HandBack:
    """When misplaced leaderships are to be handed back: once the same report of them has
    stood for ``after_s`` (a node that comes and goes is not chased)."""

    def __init__(self, after_s: float = HAND_BACK_AFTER_S) -> None:
        self._after_s = after_s
        self._since: float | None = None

    def due(self, moves: dict[str, str], now: float) -> dict[str, str]:
        """The moves to make now (``misplaced_leaders``' answer at monotonic ``now``), or none."""
        if not moves:
            self._since = None
        elif self._since is None:
            self._since = now
        elif now - self._since >= self._after_s:
            self._since = None
            return moves
        return {}

    def reset(self) -> None:
        """Start waiting again (a node is down: what was seen before does not count)."""
        self._since = None


def describe_moves(moves: dict[str, str]) -> str:
    """``LG_EVENTS_0 on n1, ...``: the moves, for a log line."""
    return ", ".join(f"{stream} on {node}" for stream, node in sorted(moves.items()))


async def cluster_report(addresses: Sequence[NodeAddress]) -> ClusterReport:
    """:func:`read_cluster` off the event loop."""
    return await asyncio.to_thread(read_cluster, addresses)


#: How long a cluster started on its stores may take to elect its JetStream meta leader
#: and every stream's leader before the topology is created (a follower waits up to
#: ``ELECTION_TIMEOUT_MAX_S`` before it campaigns, and a stream recovers after the meta group).
SETTLE_TIMEOUT_S = 90.0


def unsettled(addresses: Sequence[NodeAddress]) -> list[str]:
    """What the cluster still lacks before its JetStream API can answer for every stream.

    Read from each node's ``/jsz`` (``meta_cluster.leader``, and each stream it holds with
    its ``cluster.leader``): every node answering, all naming the same meta leader, and a
    leader for every stream any node holds. Until then the JetStream API answers "JetStream
    system temporarily unavailable" (10008) or nothing at all for a stream still electing
    (nats-io/nats.go#839): a cluster started again on its stores elects the meta group
    first and each stream after it.

    Returns:
        One phrase per thing still missing; empty when settled (a fresh cluster, holding no
        streams yet, is settled once it has its meta leader).
    """
    missing: list[str] = []
    leaders: set[str] = set()
    held: set[str] = set()
    led: set[str] = set()
    for address in addresses:
        jsz = _get_json(f"{address.monitor}/jsz?accounts=true&streams=true")
        if jsz is None:
            missing.append(f"{address.name} to answer")
            continue
        meta = jsz.get("meta_cluster")
        leader = str(meta.get("leader", "") or "") if isinstance(meta, dict) else ""
        if leader:
            leaders.add(leader)
        else:
            missing.append(f"{address.name} to know the meta leader")
        for name, stream_leader in _held_streams(jsz):
            held.add(name)
            if stream_leader:
                led.add(name)
    if len(leaders) > 1:
        missing.append(f"the nodes to agree on one meta leader (they name {sorted(leaders)})")
    if held - led:
        missing.append(f"a leader for {', '.join(sorted(held - led))}")
    return missing


def _held_streams(jsz: dict[str, object]) -> list[tuple[str, str]]:
    """Every stream a node's ``/jsz?accounts=true&streams=true`` lists, with the leader it names."""
    found: list[tuple[str, str]] = []
    accounts = jsz.get("account_details")
    for account in accounts if isinstance(accounts, list) else []:
        streams = account.get("stream_detail") if isinstance(account, dict) else None
        for s in streams if isinstance(streams, list) else []:
            if isinstance(s, dict) and s.get("name"):
                cluster = s.get("cluster")
                leader = str(cluster.get("leader", "") or "") if isinstance(cluster, dict) else ""
                found.append((str(s["name"]), leader))
    return found


async def wait_until_settled(
    addresses: Sequence[NodeAddress], timeout_s: float = SETTLE_TIMEOUT_S
) -> None:
    """Wait until :func:`unsettled` finds nothing missing.

    Raises:
        TimeoutError: not within ``timeout_s``; the message says what was still missing.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        missing = await asyncio.to_thread(unsettled, addresses)
        if not missing:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout_s:g}s for {'; '.join(missing)}")
        await asyncio.sleep(0.25)


async def wait_for_leaders(
    addresses: Sequence[NodeAddress], streams: Sequence[str], timeout_s: float = 30.0
) -> ClusterReport:
    """Wait until every stream in ``streams`` has a leader and every replica is current.

    Raises:
        TimeoutError: not within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        report = await cluster_report(addresses)
        led = {s.stream: s for s in report.streams}
        missing = [s for s in streams if s not in led
                   or not all(r.current for r in led[s].replicas)]
        if not missing:
            return report
        if time.monotonic() > deadline:
            raise TimeoutError(f"streams without a leader or with lagging replicas: {missing}")
        with contextlib.suppress(Exception):
            await asyncio.sleep(0.25)
