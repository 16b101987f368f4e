"""The whole system as real processes on a private broker, for end-to-end tests and benchmarks.

It runs as ``make run`` does: every process connects as its own NATS user, in the
accounts ``lockgate.operations.roles`` renders, with credentials made under the system's
root; tests connect as whichever role they play (``connect(user)``, ``gateway()``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import nats
from nats.aio.client import Client

from lockgate.client.sdk import Gateway
from lockgate.client.sdk import connect as connect_gateway
from lockgate.eventstore.jetstream import JetStreamEventStore
from lockgate.eventstore.partitions import SINGLE, Partitions
from lockgate.intent.codec import decode_event
from lockgate.intent.events import ReviewRequested
from lockgate.operations.deployment import Deployment, ensure_deployment
from lockgate.operations.natsserver import NatsServer
from lockgate.operations.roles import SERVICES_ACCOUNT, deployment_roles
from lockgate.operations.status import CHILDREN, check_status, child_user
from lockgate.operations.supervisor import parent_death_signal
from lockgate.runtime.credentials import Credentials, credentials_path
from lockgate.runtime.settings import Settings
from lockgate.runtime.topology import ensure_topology
from lockgate.views.store import Views, views_position

REPO = Path(__file__).resolve().parents[3]


@dataclass
class System:
    """nats-server plus every service and the demo adapter, each its own process."""

    root: Path
    children: Sequence[tuple[str, str]] = CHILDREN
    extra_env: dict[str, str] = field(default_factory=dict)
    server: NatsServer | None = None
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    deployment: Deployment | None = None
    #: The broker's HTTP monitoring port on loopback (0: none); the benchmark reads it.
    monitor_port: int = 0
    #: The events streams (``lockgate.eventstore.partitions``); every child is told.
    partitions: Partitions = SINGLE

    @property
    def url(self) -> str:
        """The broker's URL."""
        if self.server is None:
            raise RuntimeError("system not started")
        return self.server.url

    @property
    def items_dir(self) -> Path:
        """Where the two create_item servers keep their state and ledgers."""
        return self.root / "worlds" / "items"

    @property
    def repo_dir(self) -> Path:
        """Where the repository world keeps its revisions, artifacts and ledgers."""
        return self.root / "worlds" / "repo"

    @property
    def world_dir(self) -> Path:
        """Where the case-notes world keeps its state and ledger."""
        return self.root / "worlds" / "case"

    def env(self) -> dict[str, str]:
        """The environment every child gets."""
        env = dict(os.environ)
        env.update(
            LOCKGATE_NATS_URL=self.url,
            LOCKGATE_VAR_DIR=str(self.root),
            LOCKGATE_POLICY_DIR=str(REPO / "deploy" / "policies"),
            LOCKGATE_CASE_WORLD_DIR=str(self.world_dir),
            LOCKGATE_ITEMS_WORLD_DIR=str(self.items_dir),
            LOCKGATE_REPO_WORLD_DIR=str(self.repo_dir),
            LOCKGATE_LOG_LEVEL="INFO",
            # Any free port: a console of `make run` may hold the default one.
            LOCKGATE_CONSOLE_PORT="0",
            LOCKGATE_EVENT_PARTITIONS=str(len(self.partitions)),
        )
        env.update(self.extra_env)  # a test's own settings win
        return env

    async def start(self, timeout_s: float = 60.0) -> None:
        """Make the users, start the broker, create the topology, start every child, wait for all."""
        (self.root / "log").mkdir(parents=True, exist_ok=True)
        # The users and accounts `lockgate run` makes, from the same settings.
        self.deployment = ensure_deployment(self.root, deployment_roles(self.settings()))
        self.server = NatsServer(
            store_dir=self.root / "nats", log_file=self.root / "log" / "nats.log",
            config_text="include ./accounts.conf", monitor_port=self.monitor_port,
        )
        self.server.start()
        nc = await self.connect()
        try:
            await ensure_topology(nc.jetstream(), partitions=self.partitions)
        finally:
            await nc.close()
        for name, module in self.children:
            self.spawn(name, module)
        await self.wait_ready([name for name, _ in self.children], timeout_s)

    def spawn(self, name: str, module: str, env: Mapping[str, str] | None = None) -> None:
        """Start one child process, as its own user (``env``: variables for this one only)."""
        child_env = {**self.env(), "LOCKGATE_CREDENTIALS_FILE": str(
            credentials_path(self.root, child_user(name))), **(env or {})}
        with open(self.log(name), "ab") as log:  # the child keeps its own copy
            self.processes[name] = subprocess.Popen(
                [sys.executable, "-m", module], env=child_env, stdout=log, stderr=log, cwd=REPO,
                # A test process that dies takes its children along: none lingers,
                # reconnecting to whatever server later takes the port.
                preexec_fn=parent_death_signal(),
            )

    def settings(self) -> Settings:
        """The settings the children run with (as far as the test's process needs them)."""
        return Settings(var_dir=self.root, event_partitions=len(self.partitions))

    def store(self, nc: Client) -> JetStreamEventStore:
        """The event store over ``nc``, on this system's partitions."""
        return JetStreamEventStore(nc, partitions=self.partitions)

    async def views_caught_up(self, views: Views, timeout_s: float = 30.0) -> None:
        """Wait until the views hold every event stored so far, in every partition.

        Raises:
            TimeoutError: not within ``timeout_s``.
        """
        nc = await self.connect()
        try:
            js = nc.jetstream()
            last = sum([(await js.stream_info(p.stream)).state.last_seq for p in self.partitions])
        finally:
            await nc.close()
        deadline = time.monotonic() + timeout_s
        while (position := views_position(views, self.partitions.streams) or 0) < last:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the views are at {position}, the streams at {last}")
            await asyncio.sleep(0.1)

    def credentials(self, user: str) -> Credentials:
        """The credentials of ``user`` (``admin``, ``agent-tenant-a``, ``reviewer-alice``…)."""
        if self.deployment is None:
            raise RuntimeError("system not started")
        return self.deployment.of(user)

    async def review_requested(self, tenant: str, intent_id: str,
                               timeout_s: float = 10.0) -> ReviewRequested:
        """The review an intent waits on, once it is on the record (polled with a deadline)."""
        nc = await self.connect()
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                for event in map(decode_event, (await self.store(nc).load(tenant, intent_id)).events):
                    if isinstance(event, ReviewRequested):
                        return event
                if time.monotonic() > deadline:
                    raise AssertionError(f"no review was requested for {intent_id}")
                await asyncio.sleep(0.05)
        finally:
            await nc.close()

    async def connect(self, user: str = "admin", **options: object) -> Client:
        """A client connection to the broker as ``user`` (the topology owner by default)."""
        creds = self.credentials(user)
        return await nats.connect(
            self.url, user=creds.user, password=creds.password, inbox_prefix=creds.inbox_prefix,
            max_reconnect_attempts=3, **options,
        )

    async def gateway(self, tenant: str = "tenant-a", *, timeout_s: float = 5.0) -> Gateway:
        """An agent runtime of ``tenant`` that is also its trusted host (opens its runs)."""
        return await connect_gateway(
            self.url, credentials=self.credentials(f"agent-{tenant}"),
            host=self.credentials("host"), timeout_s=timeout_s,
        )

    async def person(self, user: str, *, timeout_s: float = 5.0) -> Gateway:
        """A reviewer's or operator's connection (``reviewer-alice``, ``operator-ops``)."""
        return await connect_gateway(self.url, credentials=self.credentials(user), timeout_s=timeout_s)

    async def wait_ready(self, names: Sequence[str], timeout_s: float = 60.0) -> None:
        """Poll ``lg.status.<name>`` until every one answers that it is ready.

        Answering is not enough: a service answers its status as soon as it connected,
        and is ready once it consumes its durables and answers its requests; an adapter
        once every capability is registered and served. A test that started between the
        two opened a turn that did not offer the capability yet.

        Raises:
            TimeoutError: some did not answer within ``timeout_s``.
        """
        nc = await self.connect()
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                answers = await check_status(nc, names, timeout_s=0.5)
                missing = [n for n, a in answers.items() if a is None or a.get("ready") is False]
                if not missing:
                    return
                for name in missing:
                    proc = self.processes.get(name)
                    if proc is not None and proc.poll() is not None:
                        raise RuntimeError(f"{name} exited with {proc.returncode}: see {self.log(name)}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"not ready: {missing}")
                await asyncio.sleep(0.2)
        finally:
            await nc.close()

    async def console_url(self) -> str:
        """Where the console listens (it answers its status with its URL).

        Raises:
            RuntimeError: the console does not run or did not say.
        """
        nc = await self.connect()
        try:
            answer = (await check_status(nc, ["console"], timeout_s=2.0))["console"]
        finally:
            await nc.close()
        url = (answer or {}).get("url")
        if not isinstance(url, str):
            raise RuntimeError(f"the console did not say where it listens: {answer}")
        return url

    def violations(self, account: str = SERVICES_ACCOUNT) -> list[str]:
        """The broker's permission-violation lines for users of ``account`` (none is expected
        of the services: each does only what its row grants)."""
        path = self.root / "log" / "nats.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return [line for line in text.splitlines()
                if "Violation" in line and f'"{account}/user:' in line]

    def log(self, name: str) -> Path:
        """A child's log file."""
        return self.root / "log" / f"{name}.log"

    def kill(self, name: str) -> None:
        """SIGKILL one child, as a crash would."""
        proc = self.processes[name]
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    async def restart(self, name: str) -> None:
        """Start a killed child again and wait until it answers."""
        module = dict(self.children)[name]
        self.spawn(name, module)
        await self.wait_ready([name])

    def stop(self) -> None:
        """Stop every child (SIGTERM, then SIGKILL) and the broker."""
        for proc in self.processes.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.processes.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self.server is not None:
            self.server.stop()


@contextlib.contextmanager
def running(system: System, timeout_s: float = 60.0) -> Iterator[System]:
    """Start ``system``, hand it to the tests, stop it; fail if a service overstepped its role.

    Every service does only what its row of the role table grants it: a permission
    violation by any of them in the broker's log is a missing grant or a bug.

    Raises:
        AssertionError: the broker logged a violation by a service.
    """
    try:
        asyncio.run(system.start(timeout_s))
        yield system
        broke = system.violations()
        if broke:
            raise AssertionError(f"services stepped outside their roles: {broke[:5]}")
    finally:
        system.stop()


def bundle_copy(root: Path, bundle_yaml: str, extra: Mapping[str, str] | None = None) -> Path:
    """The demo policy bundle copied under ``root``, with ``bundle_yaml`` and ``extra`` files.

    ``extra`` maps a path inside the bundle to its text (another ``*.cedar``, say).
    Point a system at it with ``LOCKGATE_POLICY_DIR``.
    """
    policies = root / "policies"
    shutil.copytree(REPO / "deploy" / "policies", policies)
    (policies / "bundle.yaml").write_text(bundle_yaml)
    for name, text in (extra or {}).items():
        (policies / name).write_text(text)
    return policies
