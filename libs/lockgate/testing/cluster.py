"""The whole system on a local JetStream cluster, for the fault tests at scale.

As ``lockgate run --cluster 3`` runs it: three nodes (``lockgate.operations.cluster``) on
ephemeral loopback ports with their stores under the test's directory, one accounts file
for all of them, the topology created once by ``admin`` at R3 (and the adapters'
execution durables with it), two replicas of every service and adapter, one of each
read-side process, the views on a throwaway PostgreSQL server (its binaries missing, the
start fails at once, saying so; ``use_postgres=False`` asks for SQLite instead). Every
process is handed every node's URL.

A replicated process is known by its label, ``intake-1`` and ``intake-2``; ``kill`` and
``restart`` take labels. Nodes are ``n1`` .. ``n3``: ``kill_node``, ``freeze_node``,
``thaw_node``, ``restart_node``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import signal
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import nats
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import Placement, StreamConfig
from nats.js.errors import BadRequestError

from lockgate.eventstore.jetstream import partition_stream_configs
from lockgate.eventstore.partitions import Partitions
from lockgate.operations import postgres
from lockgate.operations.cluster import (
    LocalCluster,
    StreamState,
    cluster_report,
    node_tag,
    wait_for_leaders,
)
from lockgate.operations.deployment import ensure_deployment
from lockgate.operations.postgres import PostgresServer, PostgresUnavailable
from lockgate.operations.roles import deployment_roles
from lockgate.operations.status import gather_status
from lockgate.operations.supervisor import replicas_of
from lockgate.runtime.credentials import NodeAddress
from lockgate.runtime.topology import ensure_topology, spread_leaders, topology_streams
from lockgate.testing.system import System

#: Replicas of every stream and bucket.
STREAM_REPLICAS = 3


async def place_on_nodes(js: JetStreamContext, configs: Sequence[StreamConfig], nodes: Sequence[str]) -> None:
    """Create each stream of ``configs`` on a node of its own, in turn (stream i on node
    i mod N), by the node's server tag; a stream that exists stays where it is.

    For R1 partitions: JetStream placed every R1 stream on one node, and an R1 stream's
    leadership cannot be handed over. The placement is asked once at creation; the
    topology's update (which names no placement) leaves the stream on its node.
    """
    for i, config in enumerate(configs):
        placed = dataclasses.replace(config, placement=Placement(tags=[node_tag(nodes[i % len(nodes)])]))
        with contextlib.suppress(BadRequestError):
            await js.add_stream(placed)


def label_of(name: str, replica: int, replicas: int) -> str:
    """A child's label: its status name, with the replica's number when there are several."""
    return name if replicas == 1 else f"{name}-{replica}"


@dataclass
class ClusterSystem(System):
    """Three nodes, the topology at R3 (``replicas``), two replicas of every service and adapter."""

    size: int = 3
    #: The views on PostgreSQL, as ``lockgate run --cluster`` keeps them; False: on SQLite.
    use_postgres: bool = True
    #: A partition per node, as ``lockgate run --cluster 3`` keeps them.
    partitions: Partitions = Partitions(3)
    #: Replicas of every stream and bucket, and whether the nodes fsync every write
    #: (the benchmark's R1 profile changes both).
    replicas: int = STREAM_REPLICAS
    sync_always: bool = True
    cluster: LocalCluster | None = None
    views: PostgresServer | None = None
    #: label → (status name, module)
    labels: dict[str, tuple[str, str]] = field(default_factory=dict)

    @property
    def url(self) -> str:
        """Every node's URL, comma-separated."""
        if self.cluster is None:
            raise RuntimeError("cluster not started")
        return self.cluster.url

    @property
    def nodes(self) -> list[NodeAddress]:
        """Where each node listens."""
        if self.cluster is None:
            raise RuntimeError("cluster not started")
        return self.cluster.addresses()

    async def start(self, timeout_s: float = 120.0) -> None:
        """Render the users, start the nodes and PostgreSQL, create the topology, start every child.

        Raises:
            PostgresUnavailable: the views are to be on PostgreSQL and its binaries are missing
                (before anything starts).
        """
        if self.use_postgres and not postgres.available():
            raise PostgresUnavailable(
                "the cluster's views need PostgreSQL's server binaries (initdb, pg_ctl), which are "
                "not installed: apt-get install postgresql (make test does, as root)")
        (self.root / "log").mkdir(parents=True, exist_ok=True)
        spread_r1 = self.replicas == 1 and len(self.partitions) > 1 and self.size > 1
        self.cluster = LocalCluster(self.root / "cluster", self.size, log_dir=self.root / "log",
                                    sync_always=self.sync_always, server_tags=spread_r1)
        self.deployment = ensure_deployment(self.root, deployment_roles(self.settings()),
                                            server_config=self.cluster.accounts_conf)
        await asyncio.to_thread(self.cluster.start)
        if self.use_postgres:
            self.views = PostgresServer()
            await asyncio.to_thread(self.views.start)
            self.extra_env.setdefault("LOCKGATE_VIEWS_URL", self.views.url)
        self.extra_env.setdefault("LOCKGATE_REPLICAS", str(self.replicas))
        nc = await self.connect()
        try:
            settings = self.settings()
            if spread_r1:  # R1 partitions cannot be spread by a leader stepdown
                await place_on_nodes(nc.jetstream(), partition_stream_configs(
                    self.partitions, replicas=1, duplicate_window_s=120.0),
                    [n.name for n in self.nodes])
            await ensure_topology(
                nc.jetstream(), replicas=self.replicas, ack_wait_s=settings.ack_wait_s,
                capabilities=[c for caps in settings.adapters.values() for c in caps],
                partitions=self.partitions)
            await wait_for_leaders(self.nodes, self.streams)
            await spread_leaders(nc, self.partitions, [n.name for n in self.nodes])
        finally:
            await nc.close()
        await wait_for_leaders(self.nodes, self.streams)
        for name, module in self.children:
            n = replicas_of(name)
            for k in range(1, n + 1):
                self.labels[label_of(name, k, n)] = (name, module)
        for label in self.labels:
            self.spawn_replica(label)
        await self.wait_ready(list(self.labels), timeout_s)

    def spawn_replica(self, label: str) -> None:
        """Start the child ``label`` (as its status name's user; its log is its label's)."""
        name, module = self.labels[label]
        self.spawn(name, module)
        # System.spawn keys by status name; a replica is known by its label.
        self.processes[label] = self.processes.pop(name) if label != name else self.processes[name]

    def log(self, name: str) -> Path:
        """A child's log (the replicas of one name share it: each line names its process)."""
        return self.root / "log" / f"{name}.log"

    async def connect(self, user: str = "admin", **options: object) -> Client:
        """A connection to the cluster (every node's URL) as ``user``."""
        creds = self.credentials(user)
        options.setdefault("max_reconnect_attempts", -1)
        options.setdefault("reconnect_time_wait", 0.5)
        return await nats.connect(
            servers=self.url.split(","), user=creds.user, password=creds.password,
            inbox_prefix=creds.inbox_prefix, **options,
        )

    async def wait_ready(self, names: Sequence[str], timeout_s: float = 90.0) -> None:
        """Poll until every child labelled in ``names`` answers that it is ready.

        Raises:
            TimeoutError: some did not, within ``timeout_s``.
            RuntimeError: one exited.
        """
        labels = [n for n in names if n in self.labels] or list(names)
        nc = await self.connect()
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                wanted = Counter(self.labels[label][0] for label in self.labels)
                answers = await gather_status(nc, wanted, timeout_s=0.5)
                missing = []
                for label in labels:
                    proc = self.processes.get(label)
                    if proc is not None and proc.poll() is not None:
                        raise RuntimeError(f"{label} exited with {proc.returncode}: see "
                                           f"{self.log(self.labels[label][0])}")
                    name = self.labels[label][0]
                    mine = [a for a in answers.get(name, [])
                            if proc is not None and a.get("pid") == proc.pid]
                    if not mine or mine[0].get("ready") is False:
                        missing.append(label)
                if not missing:
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError(f"not ready: {missing}")
                await asyncio.sleep(0.3)
        finally:
            await nc.close()

    async def restart(self, name: str) -> None:
        """Start a killed child again (by label) and wait until it answers."""
        self.spawn_replica(name)
        await self.wait_ready([name])

    # -- the nodes ----------------------------------------------------------------------

    def kill_node(self, name: str) -> None:
        """SIGKILL one node, as a crash would."""
        if self.cluster is None:
            raise RuntimeError("cluster not started")
        self.cluster.node(name).kill()

    def freeze_node(self, name: str) -> None:
        """SIGSTOP one node: alive, holding its sockets, answering nothing."""
        if self.cluster is None:
            raise RuntimeError("cluster not started")
        self.cluster.node(name).signal(signal.SIGSTOP)

    def thaw_node(self, name: str) -> None:
        """SIGCONT a frozen node."""
        if self.cluster is None:
            raise RuntimeError("cluster not started")
        self.cluster.node(name).signal(signal.SIGCONT)

    async def restart_node(self, name: str) -> None:
        """Start a stopped or killed node again on its store and ports; wait until healthy."""
        if self.cluster is None:
            raise RuntimeError("cluster not started")
        await asyncio.to_thread(self.cluster.restart, name)
        await asyncio.to_thread(self.cluster.wait_healthy, 60.0, [name])

    async def stream(self, name: str) -> StreamState | None:
        """The stream's leader and replicas, as its leader reports them."""
        report = await cluster_report(self.nodes)
        return next((s for s in report.streams if s.stream == name), None)

    async def leader_of(self, stream: str, timeout_s: float = 30.0) -> str:
        """The node leading ``stream`` (waiting for one while an election runs).

        Raises:
            TimeoutError: no leader within ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = await self.stream(stream)
            if found is not None and found.leader:
                return found.leader
            await asyncio.sleep(0.25)
        raise TimeoutError(f"{stream} has no leader")

    async def settled(self, timeout_s: float = 60.0) -> None:
        """Wait until every stream has a leader and every replica is current again."""
        await wait_for_leaders(self.nodes, self.streams, timeout_s)

    @property
    def streams(self) -> tuple[str, ...]:
        """Every stream and bucket of the topology."""
        return topology_streams(self.partitions)

    def violations(self, account: str = "LOCKGATE") -> list[str]:
        """The nodes' permission-violation lines for users of ``account``."""
        found: list[str] = []
        for path in sorted((self.root / "log").glob("nats-n*.log")):
            text = path.read_text(errors="replace")
            found += [line for line in text.splitlines()
                      if "Violation" in line and f'"{account}/user:' in line]
        return found

    def stop(self) -> None:
        """Stop every child, the nodes and PostgreSQL."""
        try:
            super().stop()
        finally:
            if self.cluster is not None:
                self.cluster.stop()
            if self.views is not None:
                self.views.stop()

