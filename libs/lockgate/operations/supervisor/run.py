"""``lockgate run`` step by step: the broker, the topology, the children, then a signal.

``run_supervisor`` reads as the run's steps; ``_Run`` holds what the run has started so far,
so that however it ends, stopping it stops exactly that.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nats.aio.client import Client
from nats.errors import Error as NatsError

from lockgate.operations.cluster import LocalCluster
from lockgate.operations.deployment import Deployment, clear_run_info, write_run_info
from lockgate.operations.natsserver import NatsServer
from lockgate.operations.postgres import PostgresServer
from lockgate.operations.registered import merged
from lockgate.operations.status import CHILDREN, child_user
from lockgate.operations.supervisor.broker import _embedded_server
from lockgate.operations.supervisor.children import _Child, _child_env, _keep_running
from lockgate.operations.supervisor.cluster_profile import (
    _local_cluster,
    _settle_leaders,
    _views_server,
    cluster_dir,
    replicas_of,
)
from lockgate.operations.supervisor.intake import _AdapterIntake
from lockgate.operations.supervisor.report import SupervisorError, _say
from lockgate.operations.supervisor.shutdown import STOP_TIMEOUT_S, _handle_signals, _stop_children
from lockgate.operations.supervisor.targets import Targets
from lockgate.operations.supervisor.topology import (
    _connect,
    _create_topology,
    _deployment,
    unserved_adapters,
)
from lockgate.operations.supervisor.watch import (
    READY_TIMEOUT_S,
    _announce_ready,
    _Health,
    _watch_broker,
    _watch_children,
    _watch_nodes,
)
from lockgate.runtime.credentials import Credentials, RunInfo, credentials_dir, credentials_path
from lockgate.runtime.metrics import Endpoint, start_endpoint
from lockgate.runtime.settings import Settings


async def run_supervisor(
    settings: Settings,
    *,
    embedded: bool = True,
    port: int | None = None,
    children: Sequence[tuple[str, str]] | None = None,
    ready_timeout_s: float = READY_TIMEOUT_S,
    stop_timeout_s: float = STOP_TIMEOUT_S,
    cluster: int = 0,
) -> int:
    """Run Lockgate on this machine until SIGINT, SIGTERM or SIGHUP (SIGUSR1: take in the
    adapters registered since, ``lockgate.operations.registered``).

    With ``cluster`` = N (> 1) it runs the scale-out profile on loopback instead of the
    embedded server: N ``nats-server`` nodes as one JetStream cluster
    (``lockgate.operations.cluster``, stores under ``<var_dir>/cluster/n<k>/``), the topology
    created once by ``admin`` with R3 streams and buckets (``min(N, 3)`` replicas), two
    replicas of every service and adapter on their shared durables, and the views on a
    PostgreSQL server whose data is under ``<var_dir>/postgres/`` (unless
    ``views_url`` names one). Every process is handed every node's URL.

    Starts (or reuses) the NATS server, creates the topology, starts every child as
    ``python -m <module>`` with ``LOCKGATE_NATS_URL`` and ``LOCKGATE_VAR_DIR`` set and
    output appended to ``<var_dir>/log/<name>.log``, restarts children that exit, and
    prints ``Lockgate ready`` once every child answers ``lg.status.<name>``.

    Args:
        settings: shared settings; ``var_dir`` holds the server's store and the logs.
        embedded: start a ``nats-server`` on ``127.0.0.1:port`` (or use the NATS server
            already listening there); when false, use ``settings.nats_url``.
        port: the embedded server's port (0: any free port; None: ``DEFAULT_PORT`` when
            nothing listens there, else a free one); with ``cluster``, the first node's
            (the others take the next ones; routes 2000 above and monitoring 4000
            above, as 6222 and 8222 are to 4222), 0: every port free and ephemeral.
        children: ``(status name, python module)`` pairs; default: every service and
            demo adapter (``status.CHILDREN``).
        ready_timeout_s: after this long without every answer, say who is missing
            (and keep waiting).
        stop_timeout_s: grace between SIGTERM and SIGKILL on shutdown.
        cluster: how many nodes of a local cluster to run (0 or 1: the single server).

    Returns:
        0 after a signal-driven shutdown, 2 when it could not start (a child that cannot
        run as configured before the run was ready included).
    """
    run = _Run.prepare(settings, embedded=embedded, cluster=cluster, children=children)
    try:
        await run.start_broker(port)
        nc = await run.create_topology()
        if run.stopping.is_set():
            return 0
        if run.nodes is not None:
            await _settle_leaders(nc, run.nodes, run.settings, run.stream_replicas)
        if run.stopping.is_set():
            return 0
        run.describe(run.settings.adapters)
        # Only now, with the system its own: another supervisor's list is not this one's.
        run.listing = True
        run.serve_metrics()
        run.start_children(nc, ready_timeout_s)
        await run.stopping.wait()
        return run.outcome()
    except SupervisorError as exc:
        _say(f"lockgate: {exc}", error=True)
        return 2
    finally:
        await run.stop(stop_timeout_s)


def _kids(children: Sequence[tuple[str, str]] | None, clustered: bool) -> list[_Child]:
    """One ``_Child`` per process to run: every replica of each ``(name, module)``."""
    return [
        _Child(name, module, replica=k, replicas=n)
        for name, module in (CHILDREN if children is None else children)
        for n in [replicas_of(name) if clustered else 1]
        for k in range(1, n + 1)
    ]


@dataclass
class _Run:
    """One run: its settings, its children, and what it has started for them so far."""

    settings: Settings
    embedded: bool
    #: How many nodes of a local cluster it runs (0 or 1: the single server).
    cluster: int
    var_dir: Path
    kids: list[_Child]
    loop: asyncio.AbstractEventLoop
    stopping: asyncio.Event
    #: The signals whose handlers it installed (removed when it stops).
    handled: list[int]
    #: The adapters the settings name, before the registered ones are merged in.
    configured: dict[str, tuple[str, ...]]
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    #: Children that exited with ``CONFIG_ERROR_EXIT`` before the run was ready.
    misconfigured: list[_Child] = field(default_factory=list)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    url: str = ""
    server: NatsServer | None = None
    nodes: LocalCluster | None = None
    postgres: PostgresServer | None = None
    #: Environment every child gets in the cluster profile (replicas, the views' server).
    extra_env: dict[str, str] = field(default_factory=dict)
    admin: Credentials | None = None
    nc: Client | None = None
    endpoint: Endpoint | None = None
    #: Whether the targets file is this supervisor's (its system started).
    listing: bool = False
    targets: Targets = field(init=False)

    def __post_init__(self) -> None:
        self.targets = Targets(self.var_dir)

    @classmethod
    def prepare(
        cls, settings: Settings, *, embedded: bool, cluster: int,
        children: Sequence[tuple[str, str]] | None,
    ) -> _Run:
        """Take the stop signals, make the log directory and list the children."""
        loop = asyncio.get_running_loop()
        stopping = asyncio.Event()
        handled = _handle_signals(loop, stopping.set)
        var_dir = settings.var_dir.resolve()
        (var_dir / "log").mkdir(parents=True, exist_ok=True)
        kids = _kids(children, cluster > 1)
        if settings.metrics_port:
            # A port was given: the supervisor takes it, each child the next one, in start order.
            for i, kid in enumerate(kids, start=1):
                kid.metrics_port = settings.metrics_port + i
        return cls(settings=settings, embedded=embedded, cluster=cluster, var_dir=var_dir,
                   kids=kids, loop=loop, stopping=stopping, handled=handled,
                   configured=dict(settings.adapters))

    @property
    def clustered(self) -> bool:
        """Whether it runs the cluster profile."""
        return self.cluster > 1

    @property
    def own_broker(self) -> bool:
        """Whether it starts the broker (and makes its users) rather than using one."""
        return self.embedded or self.clustered

    @property
    def log_dir(self) -> Path:
        """Where every process's log is."""
        return self.var_dir / "log"

    @property
    def stream_replicas(self) -> int:
        """Replicas of every stream and bucket."""
        return min(self.cluster, 3) if self.clustered else self.settings.replicas

    @property
    def server_config(self) -> Path | None:
        """The accounts file of the cluster's nodes (None: the embedded server's own)."""
        return cluster_dir(self.var_dir) / "accounts.conf" if self.clustered else None

    async def start_broker(self, port: int | None) -> None:
        """The deployment's users, then the embedded server or the local cluster (with the
        views' PostgreSQL); or, without a broker of its own, the one ``nats_url`` names."""
        if not self.own_broker:
            self.url = self.settings.nats_url
            _say(f"lockgate: using the NATS server at {self.url}")
            return
        # The adapters registered with this deployment (``lockgate adapter serve``) keep
        # their users from one run to the next.
        self.settings = self.settings.model_copy(
            update={"adapters": merged(self.configured, self.var_dir)})
        unserved = unserved_adapters([k.name for k in self.kids], self.settings.adapters)
        if unserved:
            raise SupervisorError(
                f"LOCKGATE_ADAPTERS leaves {'; '.join(unserved)} without its adapter user; "
                "list every adapter the run starts with its capabilities")
        deployment = _deployment(self.settings, self.var_dir, server_config=self.server_config)
        self.admin = deployment.of("admin")
        self._hand_credentials(deployment)
        if self.clustered:
            self.nodes = await _local_cluster(self.var_dir, self.cluster, port)
            self.url = self.nodes.url
            self.postgres, views_url = await _views_server(self.settings, self.var_dir)
            self.extra_env = {"LOCKGATE_REPLICAS": str(self.stream_replicas),
                              "LOCKGATE_VIEWS_URL": views_url}
        else:
            self.url, self.server = await _embedded_server(self.var_dir, port)

    def _hand_credentials(self, deployment: Deployment) -> None:
        """Give each child its own user's credentials file, when the role table has one."""
        for kid in self.kids:
            path = credentials_path(self.var_dir, child_user(kid.name))
            if child_user(kid.name) in deployment.credentials:
                kid.credentials = path
            else:
                _say(f"lockgate: {kid.name} has no user of its own in the role table; "
                     "it connects with whatever its environment says", error=True)

    async def create_topology(self) -> Client:
        """Connect as ``admin`` and create the topology; return the connection."""
        self.nc = nc = await _connect(self.settings, self.url, self.stopping, self.admin)
        await _create_topology(
            nc, self.url, self.settings, replicas=self.stream_replicas, nodes=self.nodes,
            stopping=self.stopping,
            capabilities=[c for caps in self.settings.adapters.values() for c in caps]
            if self.clustered else ())
        return nc

    def describe(self, adapters: Mapping[str, Sequence[str]]) -> None:
        """Write ``run.json``: where the run's broker is, its processes and its adapters."""
        write_run_info(self.var_dir, RunInfo(
            url=self.url, pid=os.getpid(), embedded=self.own_broker,
            credentials_dir=str(credentials_dir(self.var_dir)) if self.own_broker else "",
            nodes=self.nodes.addresses() if self.nodes is not None else [],
            replicas={kid.name: kid.replicas for kid in self.kids},
            event_partitions=self.settings.event_partitions,
            adapters={name: list(caps) for name, caps in adapters.items()}
            if self.own_broker else {},
        ))

    def serve_metrics(self) -> None:
        """Serve the supervisor's own metrics and list them first among the targets."""
        self.endpoint = start_endpoint(self.settings)
        if self.endpoint is not None:
            self.targets.learn({"supervisor": {"metrics": self.endpoint.url}})
            _say(f"lockgate: metrics on {self.endpoint.url}; every process's in "
                 f"{self.targets.path}")

    def start_children(self, nc: Client, ready_timeout_s: float) -> None:
        """Start every child's restart loop, the watchers and the adapters' intake."""
        env = {**_child_env(self.url, self.var_dir), **self.extra_env,
               "LOCKGATE_EVENT_PARTITIONS": str(self.settings.event_partitions)}
        _say(f"lockgate: starting {', '.join(k.label for k in self.kids)}; logs in {self.log_dir}")
        health = _Health(self.loop.time())
        self.tasks = [asyncio.create_task(_keep_running(kid, env, self.log_dir, self.cannot_run))
                      for kid in self.kids]
        self.tasks += [
            asyncio.create_task(_announce_ready(
                nc, self.kids, ready_timeout_s, self.log_dir, self.targets, self.ready)),
            asyncio.create_task(
                _watch_children(nc, self.kids, health, ready_timeout_s, self.targets)),
        ]
        if self.server is not None:
            self.tasks.append(asyncio.create_task(_watch_broker(self.server, nc, health)))
        if self.own_broker:
            brokers = ([self.server] if self.server is not None
                       else list(self.nodes.nodes) if self.nodes else [])
            intake = _AdapterIntake(
                settings=self.settings, configured=self.configured, var_dir=self.var_dir,
                url=self.url, brokers=brokers, describe=self.describe,
                server_config=self.server_config)
            self.tasks.append(asyncio.create_task(intake.run(self.loop)))
        if self.nodes is not None:
            self.tasks.append(asyncio.create_task(
                _watch_nodes(self.nodes, nc, health, self.settings.partitions)))

    def cannot_run(self, kid: _Child) -> None:
        """A child exited with ``CONFIG_ERROR_EXIT``: before the run is ready it stops the run,
        after it the others run on."""
        if self.ready.is_set():
            _say(f"lockgate: {kid.label} cannot run as configured: {kid.failed}; not starting it "
                 f"again (the others run on; see {self.log_dir / kid.label}.log)", error=True)
            return
        self.misconfigured.append(kid)
        self.stopping.set()

    def outcome(self) -> int:
        """The exit code once a signal (or a child that cannot run) stopped the run."""
        if self.misconfigured:
            kid = self.misconfigured[0]
            _say(f"lockgate: {kid.label} cannot run as configured: {kid.failed}; stopping, the "
                 f"run cannot become ready without it (see {self.log_dir / kid.label}.log)",
                 error=True)
            return 2
        _say("lockgate: stopping")
        return 0

    async def stop(self, stop_timeout_s: float) -> None:
        """Stop everything it started, children first, and take back what it published."""
        await _stop_children(self.kids, self.tasks, stop_timeout_s)
        if self.nc is not None:
            with contextlib.suppress(NatsError, OSError):
                await self.nc.close()
        if self.server is not None:
            await asyncio.to_thread(self.server.stop)
        if self.nodes is not None:
            await asyncio.to_thread(self.nodes.stop)
        if self.postgres is not None:
            await asyncio.to_thread(self.postgres.stop)
        clear_run_info(self.var_dir, os.getpid())
        if self.listing:
            self.targets.clear()
        if self.endpoint is not None:
            await asyncio.to_thread(self.endpoint.stop)
        for sig in self.handled:
            self.loop.remove_signal_handler(sig)
