"""``make run``: the embedded NATS server and every service as supervised child processes.

On the embedded default every process connects as its own NATS user: before the
broker starts, the supervisor makes the deployment's users and credentials under
``var/`` (``lockgate.runtime.deployment``), starts ``nats-server`` with their accounts,
creates the topology as ``admin`` and hands each child its own credentials file.

It keeps everything running: a child that exits is started again (with backoff); a
child that stops answering ``lg.status.<name>``, or answers that it is stuck, is killed
and started again; a broker that dies or hangs is started again on the same store. A
child that exits with ``CONFIG_ERROR_EXIT`` cannot run as configured, and starting it
again changes nothing: it is not restarted, and a run that is not ready yet stops.

Every child serves its metrics on a loopback port of its own and names it in its status
answer; the supervisor serves its own (restarts, who is well) and keeps
``var/prometheus/targets.json`` listing all of them, for Prometheus's file-based
discovery (``deploy/prometheus/prometheus.yml``), rewritten whenever a child comes back
on another port.

Adapters registered while it runs (``lockgate adapter serve``) are taken in on SIGUSR1:
their users are made, the broker reloads its accounts, and ``run.json`` lists them
(``_AdapterIntake``); a later start includes them from the outset.

Each child runs in a process group of its own, so the supervisor can stop it together
with anything it started (and a Ctrl-C on the terminal reaches the supervisor only,
which then stops the children in order instead of racing them).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import json
import os
import re
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO, Literal
from urllib.parse import urlsplit

from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.errors import ServiceUnavailableError

from lockgate.core.errors import LockgateError
from lockgate.core.ids import derived_id
from lockgate.eventstore.partitions import Partitions
from lockgate.runtime.cluster import (
    DEFAULT_CLIENT_PORT,
    HAND_BACK_EVERY_S,
    SETTLE_TIMEOUT_S,
    HandBack,
    LocalCluster,
    cluster_report,
    describe_moves,
    misplaced_leaders,
    node_ports,
    ports_from,
    wait_for_leaders,
    wait_until_settled,
)
from lockgate.runtime.deployment import (
    Credentials,
    Deployment,
    RunInfo,
    clear_run_info,
    credentials_dir,
    credentials_path,
    ensure_deployment,
    write_run_info,
)
from lockgate.runtime.entry import CONFIG_ERROR_EXIT
from lockgate.runtime.metrics import CHILD_RESTARTS, CHILD_UP, Endpoint, start_endpoint
from lockgate.runtime.natsserver import NatsServer, NatsServerError
from lockgate.runtime.postgres import PostgresServer, PostgresUnavailable
from lockgate.runtime.registered import TAKE_IN, merged
from lockgate.runtime.roles import CONSOLE
from lockgate.runtime.settings import Settings
from lockgate.runtime.specs import ADAPTERS as ADAPTER_SPECS
from lockgate.runtime.status import (
    CHILDREN,
    READ_SIDE,
    STALL_S,
    Status,
    answer_of,
    child_user,
    gather_status,
    problem,
)
from lockgate.runtime.topology import (
    CAPABILITIES_BUCKET,
    PartitionsMismatch,
    ensure_topology,
    hand_leadership,
    spread_leaders,
    topology_streams,
)

#: Where the embedded server listens unless told otherwise (the NATS default port), when
#: nothing else listens there; otherwise it takes a free port and says which.
DEFAULT_PORT = DEFAULT_CLIENT_PORT
#: First delay before restarting a child that exited; it doubles up to the maximum.
BACKOFF_MIN_S = 0.5
BACKOFF_MAX_S = 10.0
#: A child that ran this long before exiting starts again from the first delay.
STABLE_AFTER_S = 30.0
#: How long the supervisor waits for every child to answer before saying who did not.
READY_TIMEOUT_S = 60.0
#: How long children get between SIGTERM and SIGKILL.
STOP_TIMEOUT_S = 10.0
#: How long the first connection to the server may take.
CONNECT_TIMEOUT_S = 10.0
#: How often the supervisor asks every child (and the broker) whether it is well.
WATCH_EVERY_S = 2.0
#: A child that answered once and then stays silent this long (while the broker
#: answers the supervisor) is hung or stopped: it is killed and started again.
UNRESPONSIVE_S = 15.0
#: The broker not answering the supervisor for this long is hung: killed and restarted.
BROKER_UNRESPONSIVE_S = 20.0
#: Replicas of every service and adapter in the cluster profile.
CLUSTER_CHILD_REPLICAS = 2
#: How long the topology step asks again while the broker answers that JetStream is
#: temporarily unavailable, or does not answer (a stream still electing its leader).
TOPOLOGY_TIMEOUT_S = 60.0

READY_LINE = "Lockgate ready"
#: The setting that names the console's port (``lockgate.client.tokens.ConsoleSettings``).
CONSOLE_PORT_ENV = "LOCKGATE_CONSOLE_PORT"

PortState = Literal["free", "nats", "other"]


class SupervisorError(LockgateError):
    """The supervisor cannot start: no usable NATS server, or its topology failed."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="supervisor.start")


def _say(line: str, *, error: bool = False) -> None:
    print(line, file=sys.stderr if error else sys.stdout, flush=True)


async def server_name_at(host: str, port: int, timeout_s: float = 2.0) -> str | None:
    """The ``server_name`` of the NATS server answering on ``host:port`` (its greeting's
    ``INFO``), or ``None`` when none answers there."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
    except (TimeoutError, OSError):
        return None
    try:
        line = await asyncio.wait_for(reader.readline(), timeout_s)
    except (TimeoutError, OSError):
        return None
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    if not line.startswith(b"INFO "):
        return None
    try:
        info = json.loads(line[5:])
    except ValueError:
        return None
    name = info.get("server_name") if isinstance(info, dict) else None
    return name if isinstance(name, str) else None


async def probe_port(host: str, port: int, timeout_s: float = 1.0) -> PortState:
    """Tell whether ``host:port`` is free, served by a NATS server, or taken by something else.

    A NATS server greets every new connection with an ``INFO {...}`` line before the
    client says anything; nothing else on that port is expected to.

    Args:
        host: the address to probe.
        port: the TCP port.
        timeout_s: how long to wait for the connection and for the greeting.

    Returns:
        ``"free"`` when the connection is refused, ``"nats"`` when the greeting is
        NATS's, ``"other"`` otherwise.
    """
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
    except ConnectionRefusedError:
        return "free"
    except (TimeoutError, OSError):
        return "other"
    try:
        greeting = await asyncio.wait_for(reader.readexactly(5), timeout_s)
    except (TimeoutError, OSError, asyncio.IncompleteReadError):
        greeting = b""
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    return "nats" if greeting == b"INFO " else "other"


@dataclass
class _Child:
    name: str
    module: str
    #: Which replica of ``name`` this is (1-based) and how many run.
    replica: int = 1
    replicas: int = 1
    proc: asyncio.subprocess.Process | None = None
    restarts: int = 0
    #: Process groups that may still hold a process of this child's (leader pid = pgid).
    groups: set[int] = field(default_factory=set)
    #: Its own credentials file (None: it inherits the environment's connection settings).
    credentials: Path | None = None
    #: When the current process started, and when it last answered that it is well.
    started_at: float = 0.0
    well_at: float | None = None
    #: Why it was last found unwell (said once per episode).
    unwell: str | None = None
    #: The metrics port it is handed (0: one it chooses).
    metrics_port: int = 0
    #: Why it cannot run as configured (it exited with ``CONFIG_ERROR_EXIT``): it is not
    #: started again.
    failed: str | None = None
    #: Environment it keeps from one start to the next, learned from its answers: the port
    #: the console chose, so that a console started again serves where the run said it does.
    pinned: dict[str, str] = field(default_factory=dict)

    def pin(self, answer: Status | None) -> None:
        """Keep the port the console serves on (``url`` in its answer) for its next starts."""
        url = answer.get("url") if answer is not None else None
        if self.name != CONSOLE or not isinstance(url, str) or CONSOLE_PORT_ENV in self.pinned:
            return
        port = urlsplit(url).port
        if port:
            self.pinned[CONSOLE_PORT_ENV] = str(port)

    @property
    def label(self) -> str:
        """How logs, messages and the targets file name it: ``intake``, or ``intake-2`` of two."""
        return self.name if self.replicas == 1 else f"{self.name}-{self.replica}"

    def answer(self, answers: dict[str, list[Status]]) -> Status | None:
        """Its own status answer among every replica's (matched by process id)."""
        pid = self.proc.pid if self.proc is not None else None
        return answer_of(answers.get(self.name, []), pid, only=self.replicas == 1)


#: Where the supervisor lists every process's metrics endpoint, under ``var/``.
TARGETS_FILE = Path("prometheus") / "targets.json"


class Targets:
    """Every process's metrics endpoint, as Prometheus's file-based discovery reads them.

    One target group per process, labelled with its status name (as ``instance`` too,
    so a child that comes back on another port keeps its series). Written whole to a
    temporary file and renamed, so Prometheus never reads half a file.
    """

    def __init__(self, var_dir: Path) -> None:
        self.path = var_dir / TARGETS_FILE
        self._urls: dict[str, str] = {}

    def learn_each(self, kids: Sequence[_Child], answers: dict[str, list[Status]]) -> None:
        """:meth:`learn` for every child, each by its label."""
        self.learn({kid.label: kid.answer(answers) for kid in kids})

    def learn(self, answers: dict[str, Status | None]) -> None:
        """Take each answering process's metrics URL; rewrite the file if one changed."""
        changed = False
        for name, answer in answers.items():
            url = answer.get("metrics") if answer is not None else None
            if isinstance(url, str) and url and self._urls.get(name) != url:
                self._urls[name] = url
                changed = True
        if changed:
            self._write(self._urls)

    def clear(self) -> None:
        """Nothing runs any more: no targets."""
        self._urls = {}
        self._write({})

    def _write(self, urls: dict[str, str]) -> None:
        groups = []
        for name, url in sorted(urls.items()):
            parts = urlsplit(url)
            labels = {"instance": name, "process": name}
            if parts.path and parts.path != "/metrics":
                labels["__metrics_path__"] = parts.path
            groups.append({"targets": [parts.netloc], "labels": labels})
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            temporary = self.path.with_suffix(".tmp")
            temporary.write_text(json.dumps(groups, indent=1) + "\n")
            os.replace(temporary, self.path)
        except OSError as exc:
            _say(f"lockgate: could not write {self.path}: {exc}", error=True)


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
    adapters registered since, ``lockgate.runtime.registered``).

    With ``cluster`` = N (> 1) it runs the scale-out profile on loopback instead of the
    embedded server: N ``nats-server`` nodes as one JetStream cluster
    (``lockgate.runtime.cluster``, stores under ``<var_dir>/cluster/n<k>/``), the topology
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
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    ready = asyncio.Event()
    misconfigured: list[_Child] = []
    handled = _handle_signals(loop, stopping.set)
    var_dir = settings.var_dir.resolve()
    log_dir = var_dir / "log"
    log_dir.mkdir(parents=True, exist_ok=True)
    clustered = cluster > 1
    kids = [
        _Child(name, module, replica=k, replicas=n)
        for name, module in (CHILDREN if children is None else children)
        for n in [replicas_of(name) if clustered else 1]
        for k in range(1, n + 1)
    ]
    tasks: list[asyncio.Task[None]] = []
    server: NatsServer | None = None
    nodes: LocalCluster | None = None
    postgres: PostgresServer | None = None
    extra_env: dict[str, str] = {}
    stream_replicas = min(cluster, 3) if clustered else settings.replicas
    nc: Client | None = None
    admin: Credentials | None = None
    targets = Targets(var_dir)
    endpoint: Endpoint | None = None
    listing = False  # the targets file is this supervisor's (its system started)
    if settings.metrics_port:
        # A port was given: the supervisor takes it, each child the next one, in start order.
        for i, kid in enumerate(kids, start=1):
            kid.metrics_port = settings.metrics_port + i
    def cannot_run(kid: _Child) -> None:
        if ready.is_set():
            _say(f"lockgate: {kid.label} cannot run as configured: {kid.failed}; not starting it "
                 f"again (the others run on; see {log_dir / kid.label}.log)", error=True)
            return
        misconfigured.append(kid)
        stopping.set()

    configured = dict(settings.adapters)
    try:
        if embedded or clustered:
            # The adapters registered with this deployment (``lockgate adapter serve``) keep
            # their users from one run to the next.
            settings = settings.model_copy(update={"adapters": merged(configured, var_dir)})
            unserved = unserved_adapters([k.name for k in kids], settings.adapters)
            if unserved:
                raise SupervisorError(
                    f"LOCKGATE_ADAPTERS leaves {'; '.join(unserved)} without its adapter user; "
                    "list every adapter the run starts with its capabilities")
            deployment = _deployment(
                settings, var_dir,
                server_config=cluster_dir(var_dir) / "accounts.conf" if clustered else None)
            admin = deployment.of("admin")
            for kid in kids:
                path = credentials_path(var_dir, child_user(kid.name))
                if child_user(kid.name) in deployment.credentials:
                    kid.credentials = path
                else:
                    _say(f"lockgate: {kid.name} has no user of its own in the role table; "
                         "it connects with whatever its environment says", error=True)
            if clustered:
                nodes = await _local_cluster(var_dir, cluster, port)
                url = nodes.url
                postgres, views_url = await _views_server(settings, var_dir)
                extra_env = {"LOCKGATE_REPLICAS": str(stream_replicas),
                             "LOCKGATE_VIEWS_URL": views_url}
            else:
                url, server = await _embedded_server(var_dir, port)
        else:
            url = settings.nats_url
            _say(f"lockgate: using the NATS server at {url}")
        nc = await _connect(settings, url, stopping, admin)
        await _create_topology(
            nc, url, settings, replicas=stream_replicas, nodes=nodes, stopping=stopping,
            capabilities=[c for caps in settings.adapters.values() for c in caps]
            if clustered else ())
        if stopping.is_set():
            return 0
        if nodes is not None:
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
        if stopping.is_set():
            return 0
        def describe(adapters: Mapping[str, Sequence[str]]) -> None:
            write_run_info(var_dir, RunInfo(
                url=url, pid=os.getpid(), embedded=embedded or clustered,
                credentials_dir=str(credentials_dir(var_dir)) if embedded or clustered else "",
                nodes=nodes.addresses() if nodes is not None else [],
                replicas={kid.name: kid.replicas for kid in kids},
                event_partitions=settings.event_partitions,
                adapters={name: list(caps) for name, caps in adapters.items()}
                if embedded or clustered else {},
            ))

        describe(settings.adapters)
        # Only now, with the system its own: another supervisor's list is not this one's.
        listing = True
        endpoint = start_endpoint(settings)
        if endpoint is not None:
            targets.learn({"supervisor": {"metrics": endpoint.url}})
            _say(f"lockgate: metrics on {endpoint.url}; every process's in {targets.path}")
        env = {**_child_env(url, var_dir), **extra_env,
               "LOCKGATE_EVENT_PARTITIONS": str(settings.event_partitions)}
        _say(f"lockgate: starting {', '.join(k.label for k in kids)}; logs in {log_dir}")
        health = _Health(loop.time())
        tasks = [asyncio.create_task(_keep_running(kid, env, log_dir, cannot_run)) for kid in kids]
        tasks += [
            asyncio.create_task(
                _announce_ready(nc, kids, ready_timeout_s, log_dir, targets, ready)),
            asyncio.create_task(_watch_children(nc, kids, health, ready_timeout_s, targets)),
        ]
        if server is not None:
            tasks.append(asyncio.create_task(_watch_broker(server, nc, health)))
        if embedded or clustered:
            brokers = [server] if server is not None else list(nodes.nodes) if nodes else []
            intake = _AdapterIntake(
                settings=settings, configured=configured, var_dir=var_dir, url=url,
                brokers=brokers, describe=describe,
                server_config=cluster_dir(var_dir) / "accounts.conf" if clustered else None)
            tasks.append(asyncio.create_task(intake.run(loop)))
        if nodes is not None:
            tasks.append(asyncio.create_task(_watch_nodes(nodes, nc, health, settings.partitions)))
        await stopping.wait()
        if misconfigured:
            kid = misconfigured[0]
            _say(f"lockgate: {kid.label} cannot run as configured: {kid.failed}; stopping, the "
                 f"run cannot become ready without it (see {log_dir / kid.label}.log)", error=True)
            return 2
        _say("lockgate: stopping")
        return 0
    except SupervisorError as exc:
        _say(f"lockgate: {exc}", error=True)
        return 2
    finally:
        await _stop_children(kids, tasks, stop_timeout_s)
        if nc is not None:
            with contextlib.suppress(NatsError, OSError):
                await nc.close()
        if server is not None:
            await asyncio.to_thread(server.stop)
        if nodes is not None:
            await asyncio.to_thread(nodes.stop)
        if postgres is not None:
            await asyncio.to_thread(postgres.stop)
        clear_run_info(var_dir, os.getpid())
        if listing:
            targets.clear()
        if endpoint is not None:
            await asyncio.to_thread(endpoint.stop)
        for sig in handled:
            loop.remove_signal_handler(sig)


async def _create_topology(
    nc: Client, url: str, settings: Settings, *, replicas: int, nodes: LocalCluster | None,
    stopping: asyncio.Event, capabilities: Sequence[str],
) -> None:
    """The administrator's step: every stream, bucket and durable, once (services and
    adapters only bind to them; their users may not create them).

    A cluster started again on its stores elects its meta leader, then each stream's: the
    step waits for both, then asks again while JetStream answers "temporarily unavailable"
    or nothing, up to ``TOPOLOGY_TIMEOUT_S``.

    Raises:
        SupervisorError: the cluster did not settle, or the topology could not be created.
    """
    waited = ""
    if nodes is not None:
        settled = asyncio.create_task(wait_until_settled(nodes.addresses()))
        stopped = asyncio.create_task(stopping.wait())
        try:
            # Ctrl-C while the cluster elects its leaders stops the run, not the wait only.
            await asyncio.wait({settled, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
            if not settled.done():
                settled.cancel()
        if stopping.is_set():
            return
        try:
            settled.result()
        except TimeoutError as exc:
            raise SupervisorError(f"the cluster did not settle on {url}: {exc}") from exc
        waited = " after the meta leader and every stream's leader were elected"
    loop = asyncio.get_running_loop()
    deadline = loop.time() + TOPOLOGY_TIMEOUT_S
    while True:
        try:
            await ensure_topology(
                nc.jetstream(), replicas=replicas, ack_wait_s=settings.ack_wait_s,
                capabilities=capabilities, partitions=settings.partitions)
            return
        except (NatsTimeoutError, ServiceUnavailableError) as exc:
            if loop.time() >= deadline or stopping.is_set():
                raise SupervisorError(
                    f"could not create streams on {url} within {TOPOLOGY_TIMEOUT_S:g}s{waited}: "
                    f"JetStream kept answering {exc!r}") from exc
            await asyncio.sleep(1.0)
        except NatsError as exc:
            raise SupervisorError(
                f"could not create streams on {url} (is JetStream enabled?): {exc!r}") from exc
        except PartitionsMismatch as exc:
            raise SupervisorError(str(exc)) from exc


#: How often the supervisor has the broker reload before it gives an adapter up, and how
#: long it waits after each reload for the adapter's user to reach its imports.
RELOAD_TRIES = 5
RELOAD_SETTLE_S = 0.5


@dataclass
class _AdapterIntake:
    """Takes in the adapters registered while the run runs (``lockgate.runtime.registered``).

    On ``TAKE_IN`` (SIGUSR1) it makes the users of every adapter registered since, renders
    the accounts again and has the broker reload them. nats-server reloads accounts,
    users, permissions, imports and exports in place, keeping every connection; but an
    account added by a reload may not yet see the export another account gained in the
    same reload (measured on 2.15: a JetStream API import of the new account had no
    responders until a second reload, while the services reached the new account's
    requests after the first). So it checks the new users the way their adapter will use
    them (connect, then ask JetStream through the account's import) and reloads again until
    they can, then lists them in ``run.json``, which is what ``lockgate adapter
    serve`` waits for. No service keeps a list of adapters: they find capabilities in the
    capabilities bucket, and reach adapters through imports the reload made.
    """

    settings: Settings
    configured: dict[str, tuple[str, ...]]
    var_dir: Path
    url: str
    brokers: list[NatsServer]
    describe: Callable[[Mapping[str, Sequence[str]]], None]
    server_config: Path | None = None

    async def run(self, loop: asyncio.AbstractEventLoop) -> None:
        wake = asyncio.Event()
        try:
            loop.add_signal_handler(TAKE_IN, wake.set)
        except (ValueError, RuntimeError, NotImplementedError):
            return  # not the main thread: nothing can ask
        current = dict(self.settings.adapters)
        try:
            while True:
                await wake.wait()
                wake.clear()
                current = await self.take_in(current)
        finally:
            loop.remove_signal_handler(TAKE_IN)

    async def take_in(self, current: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        """Make users for what was registered since ``current``; return what is served now."""
        wanted = merged(self.configured, self.var_dir)
        new = {name: caps for name, caps in wanted.items() if current.get(name) != caps}
        if not new:
            self.describe(current)
            return current
        settings = self.settings.model_copy(update={"adapters": wanted})
        try:
            deployment = ensure_deployment(self.var_dir, settings.roles(),
                                           server_config=self.server_config)
        except (OSError, ValueError) as exc:
            _say(f"lockgate: could not make the users of {', '.join(new)}: {exc}", error=True)
            return current
        for _ in range(RELOAD_TRIES):
            for broker in self.brokers:
                broker.reload()
            await asyncio.sleep(RELOAD_SETTLE_S)
            reached = [await _reaches(self.url, deployment.of(f"adapter-{name}")) for name in new]
            if all(reached):
                break
        else:
            _say(f"lockgate: the broker did not take in the users of {', '.join(new)} after "
                 f"{RELOAD_TRIES} reloads; they are not served (see the broker's log)", error=True)
            return current
        for name, caps in new.items():
            _say(f"lockgate: adapter {name} taken in ({', '.join(caps)}); its user adapter-{name}")
        self.describe(wanted)
        return wanted


async def _reaches(url: str, creds: Credentials) -> bool:
    """Whether ``creds`` connect and reach JetStream through their account's import."""
    nc = Client()
    try:
        await nc.connect(servers=[u for u in url.split(",") if u], user=creds.user,
                         password=creds.password, inbox_prefix=creds.inbox_prefix,
                         allow_reconnect=False, connect_timeout=2)
        await nc.jetstream(prefix=creds.js_prefix, timeout=2).stream_info(
            f"KV_{CAPABILITIES_BUCKET}")
        return True
    except (NatsError, OSError, TimeoutError):
        return False
    finally:
        with contextlib.suppress(Exception):
            await nc.close()


def unserved_adapters(children: Sequence[str], adapters: Mapping[str, Sequence[str]]) -> list[str]:
    """The demo adapters among ``children`` whose capabilities ``adapters`` (the adapter
    set the deployment makes users for) leaves without that adapter's user.

    Such a child would connect as nobody, or as a user whose account lacks its
    capabilities' subjects, and never answer: the run would never become ready.

    Returns:
        One phrase per adapter, e.g. ``"repo (repo.read_file, ...)"``; empty when all are served.
    """
    unserved: list[str] = []
    for spec in ADAPTER_SPECS:
        if spec.status_name not in children:
            continue
        missing = [c for c in spec.capabilities if c not in adapters.get(spec.name, ())]
        if missing:
            unserved.append(f"{spec.name} ({', '.join(missing)})")
    return unserved


def replicas_of(name: str) -> int:
    """How many replicas of the child ``name`` the cluster profile runs.

    Two of every service and adapter, on their shared durables; one of each read-side
    process: the projector keeps one ordered position in the views, the archiver purges
    what the views hold, the console serves a port.
    """
    return 1 if name in {n for n, _ in READ_SIDE} else CLUSTER_CHILD_REPLICAS


#: Every stream and bucket the topology creates with one events stream (a partitioned
#: deployment's: ``topology_streams``).
TOPOLOGY_STREAMS: tuple[str, ...] = topology_streams()


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


def _deployment(
    settings: Settings, var_dir: Path, *, server_config: Path | None = None
) -> Deployment:
    """Every role's user and credentials under ``var_dir`` (made on the first start)."""
    try:
        deployment = ensure_deployment(var_dir, settings.roles(), server_config=server_config)
    except (OSError, ValueError) as exc:
        raise SupervisorError(f"could not make the deployment's users: {exc}") from exc
    _say(f"lockgate: {len(deployment.credentials)} NATS users, one per process and person; "
         f"credentials in {credentials_dir(var_dir)} (mode 0600)")
    return deployment


def _handle_signals(loop: asyncio.AbstractEventLoop, stop: Callable[[], None]) -> list[int]:
    handled: list[int] = []
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        try:
            loop.add_signal_handler(sig, stop)
        except (ValueError, RuntimeError, NotImplementedError):
            # Not the main thread (or no Unix signals): the caller owns shutdown.
            continue
        handled.append(sig)
    return handled


async def _embedded_server(var_dir: Path, chosen: int | None) -> tuple[str, NatsServer]:
    host = "127.0.0.1"
    port = DEFAULT_PORT if chosen is None else chosen
    state: PortState = "free" if port == 0 else await probe_port(host, port)
    if state != "free" and chosen is None:
        # Only the default was asked for: another run (or anything) may have it.
        _say(f"lockgate: port {port} on {host} is taken (another lockgate run?); the broker "
             "takes a free port")
        port, state = 0, "free"
    if state == "other":
        raise SupervisorError(
            f"port {port} on {host} is taken by something that is not a NATS server; "
            "stop it, choose another port (--port N), or set LOCKGATE_NATS_URL to a running NATS server"
        )
    if state == "nats":
        # Never put the streams on a server this did not start (and whose users it
        # does not know): that takes an explicit LOCKGATE_NATS_URL.
        raise SupervisorError(
            f"a NATS server already listens on {host}:{port} (another lockgate run?); stop it, "
            f"choose another port (--port N), or set LOCKGATE_NATS_URL=nats://{host}:{port} "
            "to use that server"
        )
    # A name of its own, stable for this store: the server that answers on the port must
    # be this one (two runs starting together both find the default port free; the one
    # whose server loses the bind must not take the other's for its own).
    name = "lockgate-" + derived_id("embedded", str(var_dir.resolve()))[:16]
    server = NatsServer(
        store_dir=var_dir / "nats", port=port, log_file=var_dir / "log" / "nats-server.log",
        # The accounts block holds passwords: it stays in its own 0600 file.
        config_text=f"server_name: {name}\ninclude ./accounts.conf",
    )
    try:
        try:
            await asyncio.to_thread(server.start)
            if await server_name_at(host, server.port) != name:
                server.stop()
                raise NatsServerError(f"another server answers on {server.port}")
        except NatsServerError:
            if chosen is not None or port == 0:
                raise
            # The default port was free when probed, and taken since (another run starting).
            server.port = 0
            await asyncio.to_thread(server.start)
    except NatsServerError as exc:
        raise SupervisorError(
            f"the embedded nats-server did not start: {exc} (see {server.log_file})"
        ) from exc
    _say(f"lockgate: embedded nats-server on {server.url}, store {server.store_dir}")
    return server.url, server


async def _connect(
    settings: Settings, url: str, stopping: asyncio.Event, admin: Credentials | None
) -> Client:
    async def on_error(exc: Exception) -> None:
        # nats-py logs a traceback per failed reconnect attempt by default.
        return None

    connected = False

    async def on_disconnected() -> None:
        # Also called for each failed first attempt, before there was anything to lose.
        if connected and not stopping.is_set():
            _say("lockgate: lost the NATS connection; reconnecting")

    async def on_reconnected() -> None:
        _say("lockgate: reconnected to NATS")

    options = settings.connect_options()
    if admin is not None:
        options.update(user=admin.user, password=admin.password)
    options.update(
        servers=[u for u in url.split(",") if u],
        name="lockgate-supervisor",
        error_cb=on_error,
        disconnected_cb=on_disconnected,
        reconnected_cb=on_reconnected,
    )
    nc = Client()
    try:
        # With unlimited reconnects nats-py retries a first connection forever.
        await asyncio.wait_for(nc.connect(**options), CONNECT_TIMEOUT_S)  # type: ignore[arg-type]
    except (TimeoutError, OSError, NatsError) as exc:
        reason = nc.last_error or exc
        with contextlib.suppress(Exception):
            await nc.close()
        raise SupervisorError(f"cannot connect to NATS at {url}: {reason!r}") from exc
    connected = True
    return nc


def _child_env(url: str, var_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["LOCKGATE_NATS_URL"] = url
    env["LOCKGATE_VAR_DIR"] = str(var_dir)
    # Logs are files: without this a crash loses the last lines still in the buffer.
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


@functools.cache
def parent_death_signal() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the kernel SIGTERM the child if the supervisor dies.

    Covers the case no signal handler can: the supervisor itself being SIGKILLed.
    Linux only; resolved before fork so the child only makes one system call.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1
    sigterm = int(signal.SIGTERM)

    def preexec() -> None:
        prctl(pr_set_pdeathsig, sigterm)

    return preexec


def _open_log(path: Path, module: str) -> BinaryIO:
    log = open(path, "ab")  # noqa: SIM115 - closed by the caller once the child holds it
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    log.write(f"--- {stamp} lockgate: starting python -m {module}\n".encode())
    log.flush()
    return log


async def _spawn(kid: _Child, env: dict[str, str], log_dir: Path) -> asyncio.subprocess.Process:
    # Its own port (or 0: its own choice), whatever the supervisor's environment says.
    env = {**env, **kid.pinned, "LOCKGATE_METRICS_PORT": str(kid.metrics_port)}
    if kid.credentials is not None:
        env = {**env, "LOCKGATE_CREDENTIALS_FILE": str(kid.credentials)}
    log = await asyncio.to_thread(_open_log, log_dir / f"{kid.label}.log", kid.module)
    with log:
        return await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            kid.module,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=env,
            process_group=0,
            preexec_fn=parent_death_signal(),
        )


async def _keep_running(
    kid: _Child, env: dict[str, str], log_dir: Path, cannot_run: Callable[[_Child], None],
) -> None:
    """Start ``kid`` and start it again whenever it exits; ends by cancellation, or when it
    exits with ``CONFIG_ERROR_EXIT`` (``cannot_run`` is told, once)."""
    loop = asyncio.get_running_loop()
    delay_s = BACKOFF_MIN_S
    while True:
        started = loop.time()
        try:
            proc = await _spawn(kid, env, log_dir)
        except OSError as exc:
            outcome = f"could not start ({exc})"
        else:
            kid.proc = proc
            kid.started_at, kid.well_at, kid.unwell = loop.time(), None, None
            kid.groups.add(proc.pid)
            code = await proc.wait()
            # Whatever the dead child started would otherwise outlive it, orphaned.
            _signal_group(proc.pid, signal.SIGKILL)
            kid.groups.discard(proc.pid)
            if code == CONFIG_ERROR_EXIT:
                kid.failed = await asyncio.to_thread(last_line, log_dir / f"{kid.label}.log")
                CHILD_UP.labels(kid.label).set(0)
                cannot_run(kid)
                return
            outcome = f"exited with {code}"
        if loop.time() - started >= STABLE_AFTER_S:
            delay_s = BACKOFF_MIN_S
        kid.restarts += 1
        CHILD_RESTARTS.labels(kid.label).inc()
        CHILD_UP.labels(kid.label).set(0)
        _say(f"lockgate: {kid.label} {outcome}, restarting (restart #{kid.restarts})")
        await asyncio.sleep(delay_s)
        delay_s = min(delay_s * 2, BACKOFF_MAX_S)


def last_line(log: Path, tail_bytes: int = 4096) -> str:
    """The last line a child wrote to its log (its one-line reason, when it gave one)."""
    try:
        with open(log, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - tail_bytes))
            tail = f.read().decode(errors="replace")
    except OSError:
        return "it gave no reason"
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    said = [line for line in lines if not line.startswith("--- ")]
    # The reason, without the logging prefix (time, process, level, logger) before it.
    return _LOG_PREFIX.sub("", said[-1])[:400] if said else "it gave no reason"


_LOG_PREFIX = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ \S+ [A-Z]+ \S+: ")


async def _announce_ready(
    nc: Client, kids: Sequence[_Child], timeout_s: float, log_dir: Path, targets: Targets,
    ready: asyncio.Event,
) -> None:
    """Print the ready line once every child answers (and set ``ready``); say who is missing
    after ``timeout_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    warned = False
    expected = Counter(k.name for k in kids)
    while True:
        answers = await gather_status(nc, expected, timeout_s=1.0)
        targets.learn_each(kids, answers)
        for kid in kids:
            kid.pin(kid.answer(answers))
        missing = [kid.label for kid in kids if kid.answer(answers) is None]
        if not missing:
            now = loop.time()
            for kid in kids:  # each answered: from here, silence counts against it
                kid.well_at = kid.well_at or now
            ready.set()
            _say(READY_LINE)
            for kid in kids:  # a child that serves people says where (the console)
                answer = kid.answer(answers) or {}
                if isinstance(answer.get("url"), str):
                    _say(f"lockgate: {kid.label} at {answer['url']}")
            return
        if not warned and loop.time() >= deadline:
            _say(
                f"lockgate: not ready after {timeout_s:g}s; no answer from "
                f"{', '.join(missing)} (logs in {log_dir}); still waiting"
            )
            warned = True
        await asyncio.sleep(2.0 if warned else 0.2)


@dataclass
class _Health:
    """When the broker last answered the supervisor (children are judged only while it does)."""

    broker_ok_at: float

    def broker_ok(self, now: float) -> bool:
        return now - self.broker_ok_at < 2 * WATCH_EVERY_S + 1.0


async def _watch_children(
    nc: Client, kids: Sequence[_Child], health: _Health, ready_timeout_s: float,
    targets: Targets,
) -> None:
    """Kill (so the restart loop starts again) any child that is hung, stopped or stuck.

    A child is unwell when it does not answer its status, or answers that it is not
    connected or that a durable is stuck (``status.problem``). While the broker itself
    does not answer, nobody is judged: every child would look silent. Each answer also
    says where the child serves its metrics (``targets``).
    """
    loop = asyncio.get_running_loop()
    unwell_since: dict[str, float] = {}
    while True:
        await asyncio.sleep(WATCH_EVERY_S)
        live = [(k, k.proc) for k in kids if k.proc is not None and k.proc.returncode is None]
        try:
            answers = await gather_status(nc, Counter(k.name for k, _ in live), timeout_s=1.0)
        except NatsError:
            continue
        targets.learn_each([k for k, _ in live], answers)
        for kid, _ in live:
            kid.pin(kid.answer(answers))
        now = loop.time()
        for kid, proc in live:
            why = problem(kid.answer(answers), STALL_S)
            CHILD_UP.labels(kid.label).set(1 if why is None else 0)
            if why is None:
                kid.well_at, kid.unwell = now, None
                unwell_since.pop(kid.label, None)
                continue
            if not health.broker_ok(now):
                unwell_since.pop(kid.label, None)
                continue
            since = unwell_since.setdefault(kid.label, now)
            # Never yet answered since it started: it gets the ready timeout to come up.
            grace = ready_timeout_s if kid.well_at is None else UNRESPONSIVE_S
            if now - max(since, kid.started_at) < grace:
                continue
            _say(f"lockgate: {kid.label} is not well ({why}) for {now - since:.0f}s; "
                 "killing it, it will be started again")
            _signal_group(proc.pid, signal.SIGKILL)
            unwell_since.pop(kid.label, None)


async def _watch_broker(server: NatsServer, nc: Client, health: _Health) -> None:
    """Start the embedded server again when it died, or kill and start it when it hangs."""
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(WATCH_EVERY_S)
        now = loop.time()
        process = server.process
        dead = process is None or process.poll() is not None
        if not dead:
            try:
                await nc.flush(timeout=int(WATCH_EVERY_S))
            except (NatsError, TimeoutError):
                if now - health.broker_ok_at < BROKER_UNRESPONSIVE_S:
                    continue
                _say(f"lockgate: nats-server has not answered for {now - health.broker_ok_at:.0f}s "
                     "(hung or stopped); killing it and starting it again")
                await asyncio.to_thread(server.kill)
            else:
                health.broker_ok_at = loop.time()
                continue
        else:
            code = process.returncode if process is not None else None
            _say(f"lockgate: nats-server exited with {code}; starting it again on the same store")
        try:
            await asyncio.to_thread(server.start)
        except NatsServerError as exc:
            _say(f"lockgate: nats-server did not start again: {exc} (see {server.log_file}); "
                 "trying again", error=True)


async def _watch_nodes(
    nodes: LocalCluster, nc: Client, health: _Health, partitions: Partitions,
) -> None:
    """Start a cluster node again, on its own store, when its process died; put the events
    partitions' leaders back on their nodes once the cluster is whole again.

    A node that is alive but silent is left alone: the others hold quorum and lead
    meanwhile, and a node stopped on purpose (SIGSTOP) rejoins when it is continued.
    The supervisor's connection fails over to another node by itself; while it answers
    through any of them, the broker counts as up.

    A node that lost its leaderships (killed, frozen, restarted) does not get them back
    by itself, so one node would go on leading two partitions' appends. Once every node
    is healthy and the partition's replica on its own node is current, and has been for
    ``HAND_BACK_AFTER_S`` (``HandBack``: a node that comes and goes is not chased), the leadership is
    handed back (``hand_leadership``, as ``spread_leaders`` places it).
    """
    loop = asyncio.get_running_loop()
    names = [a.name for a in nodes.addresses()]
    hand_back = HandBack()
    checked_at = loop.time()
    while True:
        await asyncio.sleep(WATCH_EVERY_S)
        with contextlib.suppress(NatsError, TimeoutError):
            await nc.flush(timeout=int(WATCH_EVERY_S))
            health.broker_ok_at = loop.time()
        down = False
        for address, node in zip(nodes.addresses(), nodes.nodes, strict=True):
            if node.running:
                continue
            down = True
            code = node.process.returncode if node.process is not None else None
            _say(f"lockgate: cluster node {address.name} exited with {code}; starting it again "
                 "on its store")
            try:
                await asyncio.to_thread(node.start)
            except NatsServerError as exc:
                _say(f"lockgate: node {address.name} did not start again: {exc}; trying again",
                     error=True)
        if down:
            hand_back.reset()
            continue
        if loop.time() - checked_at < HAND_BACK_EVERY_S:
            continue
        checked_at = loop.time()
        moves = hand_back.due(misplaced_leaders(
            await cluster_report(nodes.addresses()), partitions, names), loop.time())
        if moves:
            _say(f"lockgate: every node is back; leaders handed back: {describe_moves(moves)}")
            for stream, name in sorted(moves.items()):
                await hand_leadership(nc, stream, name)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _live_groups(pgids: set[int]) -> set[int]:
    """The groups among ``pgids`` with a member that is not a zombie.

    ``killpg(g, 0)`` succeeds on zombies too, and orphaned zombies stay until init
    reaps them (which some container inits never do), so Linux reads ``/proc``.
    """
    alive = set()
    for pgid in pgids:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            continue
        except PermissionError:
            pass
        alive.add(pgid)
    proc = Path("/proc")
    if not alive or not proc.is_dir():
        return alive
    running: set[int] = set()
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: fields follow the last ')'.
        fields = stat[stat.rindex(")") + 2 :].split()
        state, pgrp = fields[0], int(fields[2])
        if pgrp in alive and state not in ("Z", "X"):
            running.add(pgrp)
    return running


async def _stop_children(
    kids: Sequence[_Child], tasks: Sequence[asyncio.Task[None]], timeout_s: float
) -> None:
    """Cancel the restart loops, SIGTERM every group, SIGKILL what is left after ``timeout_s``."""
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    groups = {pgid: kid for kid in kids for pgid in kid.groups}
    for pgid in groups:
        _signal_group(pgid, signal.SIGTERM)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while _live_groups(set(groups)) and loop.time() < deadline:
        await asyncio.sleep(0.05)
    for pgid in _live_groups(set(groups)):
        _say(f"lockgate: {groups[pgid].name} did not stop within {timeout_s:g}s; killing it")
        _signal_group(pgid, signal.SIGKILL)
    for kid in kids:
        if kid.proc is not None:
            await kid.proc.wait()
