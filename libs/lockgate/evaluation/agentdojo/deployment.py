"""A private Lockgate for one suite: broker, services and read side, and the suite's adapter.

The system runs as ``make run`` runs it (``lockgate.testing.system``: every service its
own process and broker user) in a temporary directory, with the demo policy bundle unless
told otherwise, one tenant and one adapter: the suite's tools, served from this process
(their environments are Python objects here) on a connection of the adapter's own broker
user. The trusted host opens the runs, an agent runtime proposes, a reviewer decides.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lockgate.adapters.functions import CapabilityFunction
from lockgate.adapters.worker import serve
from lockgate.client.sdk import Gateway
from lockgate.eventstore.jetstream import JetStreamEventStore
from lockgate.operations.status import READ_SIDE, SERVICES
from lockgate.runtime.settings import Settings
from lockgate.testing.system import REPO, System

#: The tenant every run is opened in, and the prefix of each run's actor (one per run).
TENANT, ACTOR = "agentdojo", "user"
#: The reviewer (``Settings.reviewers`` makes a user for each).
REVIEWER = "alice"
#: The demo policy bundle.
DEMO_BUNDLE = REPO / "deploy" / "policies"
#: How long the system may take to start.
START_TIMEOUT_S = 120.0


@dataclass
class SuiteSystem(System):
    """The system with one tenant and one adapter serving ``capabilities`` as ``adapter``."""

    adapter: str = "agentdojo"
    capabilities: tuple[str, ...] = ()
    policy_dir: Path = DEMO_BUNDLE
    children: Sequence[tuple[str, str]] = field(default_factory=lambda: (
        *((s, f"lockgate.{s}") for s in SERVICES), *READ_SIDE))

    def settings(self) -> Settings:
        """The deployment's users: this tenant, this adapter, the demo's people."""
        return Settings(var_dir=self.root, event_partitions=len(self.partitions),
                        tenants=(TENANT,), adapters={self.adapter: self.capabilities},
                        policy_dir=self.policy_dir)

    def env(self) -> dict[str, str]:
        """Every child's environment: the same tenant, adapter and bundle."""
        return {**super().env(), "LOCKGATE_TENANTS": json.dumps([TENANT]),
                "LOCKGATE_ADAPTERS": json.dumps({self.adapter: list(self.capabilities)}),
                "LOCKGATE_POLICY_DIR": str(self.policy_dir)}


@dataclass
class Connected:
    """The running system as the evaluation uses it: its users' connections."""

    system: SuiteSystem
    agent: Gateway
    reviewer: Gateway
    store: JetStreamEventStore


@contextlib.asynccontextmanager
async def running(functions: Sequence[CapabilityFunction], *, name: str,
                  policy_dir: Path = DEMO_BUNDLE) -> AsyncIterator[Connected]:
    """Start a private system serving ``functions`` as the adapter ``name``; stop it after.

    Raises:
        TimeoutError: the system or the adapter was not ready in time.
    """
    with tempfile.TemporaryDirectory(prefix="lockgate-agentdojo-") as root:
        system = SuiteSystem(Path(root), adapter=name,
                             capabilities=tuple(f.name for f in functions), policy_dir=policy_dir)
        stop, ready = asyncio.Event(), asyncio.Event()
        serving: asyncio.Task[None] | None = None
        try:
            await system.start(START_TIMEOUT_S)
            creds = system.credentials(f"adapter-{name}")
            adapter_nc = await system.connect(f"adapter-{name}")
            serving = asyncio.create_task(serve(
                [f.adapter() for f in functions], adapter_nc, name=name, stop=stop, ready=ready,
                js_prefix=creds.js_prefix))
            await asyncio.wait_for(ready.wait(), START_TIMEOUT_S)
            admin = await system.connect()
            agent = await system.gateway(TENANT, timeout_s=10.0)
            reviewer = await system.person(f"reviewer-{REVIEWER}", timeout_s=10.0)
            try:
                yield Connected(system, agent, reviewer, system.store(admin))
            finally:
                await agent.close()
                await reviewer.close()
                await admin.close()
        finally:
            stop.set()
            if serving is not None:
                # Whatever ended the serving, the system stops all the same.
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(serving, 30.0)
                await adapter_nc.close()
            system.stop()
