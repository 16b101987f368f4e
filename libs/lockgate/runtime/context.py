"""The connections and ports a service process uses, made once the broker is connected."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from lockgate.contracts.capability import CapabilityContract
from lockgate.eventstore.base import EventStore
from lockgate.eventstore.jetstream import JetStreamEventStore
from lockgate.intent.cache import AggregateCache
from lockgate.runtime.ports.adapters import AdapterClient, Adapters, FakeAdapters
from lockgate.runtime.ports.capabilities import Capabilities, CapabilityRegistry, MemoryCapabilities
from lockgate.runtime.ports.catalogues import Catalogues, KvCatalogues, MemoryCatalogues
from lockgate.runtime.ports.history import History, KvHistory, MemoryHistory
from lockgate.runtime.ports.intents import IntentStore, StoredIntents
from lockgate.runtime.ports.leases import Leases, MemoryLeases, NatsLeases
from lockgate.runtime.ports.ledger import (
    Budgets,
    KvBudgets,
    LimitLedger,
    Limits,
    MemoryBudgets,
    MemoryLimits,
)
from lockgate.runtime.ports.locks import Locks, MemoryLocks, ResourceLocks
from lockgate.runtime.ports.orders import MemoryOrders, NatsOrders, Orders
from lockgate.runtime.ports.policies import KvPolicies, MemoryPolicies, Policies
from lockgate.runtime.ports.progress import KvProgress, MemoryProgress, Progress
from lockgate.runtime.ports.proposals import MemoryProposals, NatsProposals, Proposals
from lockgate.runtime.ports.responses import MemoryResponses, Responses, ResponseStore
from lockgate.runtime.ports.runs import KvRuns, MemoryRuns, Runs
from lockgate.runtime.ports.timers import MemoryTimers, NatsTimers, Timers
from lockgate.runtime.settings import Settings
from lockgate.runtime.topology import (
    BUDGETS_BUCKET,
    CAPABILITIES_BUCKET,
    CATALOGUES_BUCKET,
    LOCKS_BUCKET,
    POLICY_BUCKET,
    PROGRESS_BUCKET,
    RUNS_BUCKET,
    ensure_topology,
)


@dataclass(frozen=True)
class Connection:
    """The broker under ports built over NATS, for the service host (consumers, status).
    Handlers reach the world through the ports."""

    nc: Client
    js: JetStreamContext
    #: The ``LG_RUNS`` bucket.
    runs: KeyValue


@dataclass
class Ports:
    """Everything a handler may talk to: one typed port each (``lockgate.runtime.ports``)."""

    #: Intents: decided on, appended to, loaded.
    intents: IntentStore
    #: Runs, their turns' catalogue keys, what happened in them.
    runs: Runs
    #: Turn catalogues by digest.
    catalogues: Catalogues
    #: Budget counters (policy reserves and settles, the gate reads).
    budgets: Budgets
    #: Flood-limit places (intake admits).
    limits: Limits
    #: Per-resource locks (the executor's).
    locks: Locks
    #: Orders to adapters, and requests to stop.
    orders: Orders
    #: Held triggers let go early.
    timers: Timers
    #: Candidates put forward on a run's behalf (a reviewer's edit).
    proposals: Proposals
    #: What the model is answered.
    responses: Responses
    #: A run's denials and completed effects.
    progress: Progress
    #: A run's history and its windows (``context.history`` in a policy).
    history: History
    #: The shadow bundle and the log of bundle changes.
    policies: Policies
    #: Registered capabilities.
    registry: Capabilities
    #: Adapters, asked and answered.
    adapters: Adapters
    #: Runs' leases and ends (intake's).
    leases: Leases
    #: The event store the intents are kept in (the service host records abandonments there).
    store: EventStore
    #: The broker under these ports (``None``: in-memory ports).
    connection: Connection | None = None

    @property
    def nc(self) -> Client:
        """The broker connection, for the service host.

        Raises:
            RuntimeError: in-memory ports have none.
        """
        return self._connected().nc

    @property
    def js(self) -> JetStreamContext:
        """The JetStream context, for the service host.

        Raises:
            RuntimeError: in-memory ports have none.
        """
        return self._connected().js

    def _connected(self) -> Connection:
        if self.connection is None:
            raise RuntimeError("in-memory ports have no broker connection")
        return self.connection


@dataclass
class MemoryPorts(Ports):
    """Ports of in-memory fakes, for unit tests: each field is the fake, to script and read.

    Build them with ``MemoryPorts.create``.
    """

    intents: StoredIntents
    runs: MemoryRuns
    catalogues: MemoryCatalogues
    budgets: MemoryBudgets
    limits: MemoryLimits
    locks: MemoryLocks
    orders: MemoryOrders
    timers: MemoryTimers
    proposals: MemoryProposals
    responses: MemoryResponses
    progress: MemoryProgress
    history: MemoryHistory
    policies: MemoryPolicies
    registry: MemoryCapabilities
    adapters: FakeAdapters
    leases: MemoryLeases
    store: EventStore = field(init=False)

    def __post_init__(self) -> None:
        self.store = self.intents.store

    @classmethod
    def create(
        cls, *contracts: CapabilityContract, adapters: FakeAdapters | None = None,
        clock_s: Callable[[], float] = time.time,
    ) -> MemoryPorts:
        """Empty fakes; ``contracts`` registered; ``adapters`` as scripted (none answers by
        default); ``clock_s``: the limits', locks' and leases' clock, in seconds."""
        responses = MemoryResponses()
        return cls(
            intents=StoredIntents.memory(), runs=MemoryRuns(), catalogues=MemoryCatalogues(),
            budgets=MemoryBudgets(), limits=MemoryLimits(clock_s), locks=MemoryLocks(clock_s=clock_s),
            orders=MemoryOrders(), timers=MemoryTimers(), proposals=MemoryProposals(),
            responses=responses, progress=MemoryProgress(), history=MemoryHistory(), policies=MemoryPolicies(),
            registry=MemoryCapabilities(*contracts),
            adapters=adapters if adapters is not None else FakeAdapters(),
            leases=MemoryLeases(responses, clock_s),
        )


__all__ = ["Connection", "MemoryPorts", "Ports", "ports_for"]



async def ports_for(nc: Client, settings: Settings) -> Ports:
    """Make sure the topology exists and build the ports over a connected client."""
    js = nc.jetstream()
    if settings.manage_topology:
        await ensure_topology(js, replicas=settings.replicas, ack_wait_s=settings.ack_wait_s,
                              partitions=settings.partitions)
    store = JetStreamEventStore(nc, partitions=settings.partitions)
    runs = await js.key_value(RUNS_BUCKET)
    budgets = await js.key_value(BUDGETS_BUCKET)
    progress = await js.key_value(PROGRESS_BUCKET)
    return Ports(
        intents=StoredIntents(store, AggregateCache()),
        runs=KvRuns(js, runs),
        catalogues=KvCatalogues(js, await js.key_value(CATALOGUES_BUCKET)),
        budgets=KvBudgets(budgets, js),
        limits=LimitLedger(budgets, js=js),
        locks=ResourceLocks(js, await js.key_value(LOCKS_BUCKET)),
        orders=NatsOrders(nc, js),
        timers=NatsTimers(nc),
        proposals=NatsProposals(js),
        responses=ResponseStore(js),
        progress=KvProgress(progress),
        history=KvHistory(progress),
        policies=KvPolicies(await js.key_value(POLICY_BUCKET)),
        registry=CapabilityRegistry(await js.key_value(CAPABILITIES_BUCKET), js=js),
        adapters=AdapterClient(nc, timeout_s=settings.adapter_timeout_s),
        leases=NatsLeases(nc, js, runs),
        store=store,
        connection=Connection(nc, js, runs),
    )
