"""The connections and ports a service process uses, made once the broker is connected."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import msgspec
from faststream.nats import NatsBroker
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from lockgate.adapters.client import AdapterClient
from lockgate.contracts.buckets import confirmed_get
from lockgate.contracts.messages import RunContext
from lockgate.contracts.registry import CapabilityRegistry
from lockgate.contracts.subjects import run_key
from lockgate.core.bounded import keep
from lockgate.core.ids import is_subject_token
from lockgate.eventstore.jetstream import JetStreamEventStore
from lockgate.intent.cache import AggregateCache
from lockgate.runtime.settings import Settings
from lockgate.runtime.topology import (
    BUDGETS_BUCKET,
    CAPABILITIES_BUCKET,
    CATALOGUES_BUCKET,
    LOCKS_BUCKET,
    PROGRESS_BUCKET,
    RUNS_BUCKET,
    ensure_topology,
)


@dataclass
class Ports:
    """Everything a handler may talk to."""

    nc: Client
    js: JetStreamContext
    store: JetStreamEventStore
    #: Intents this process loaded or appended lately (see ``lockgate.intent.cache``).
    cache: AggregateCache
    registry: CapabilityRegistry
    adapters: AdapterClient
    runs: KeyValue
    catalogues: KeyValue
    locks: KeyValue
    progress: KeyValue
    budgets: KeyValue

    _runs: OrderedDict[tuple[str, str], RunContext] = field(default_factory=OrderedDict)

    async def run(self, tenant: str, run_id: str) -> RunContext | None:
        """The run's authoritative context, or ``None`` when no such run was opened.

        A run never changes once opened, so recent ones are kept in memory.
        """
        if not (is_subject_token(tenant) and is_subject_token(run_id)):
            return None
        cached = self._runs.get((tenant, run_id))
        if cached is not None:
            self._runs.move_to_end((tenant, run_id))
            return cached
        # A run opened a moment ago may not be on every replica yet: a miss asks the leader.
        value = await confirmed_get(self.js, self.runs, RUNS_BUCKET, run_key(tenant, run_id))
        if value is None:
            return None
        run = msgspec.json.decode(value, type=RunContext)
        return keep(self._runs, (tenant, run_id), run, _RUNS_CACHED)


#: Runs kept in memory per process.
_RUNS_CACHED = 4096

__all__ = ["Ports", "Service", "connect_ports", "ports_for", "run_key"]


H = TypeVar("H")


async def ports_for(nc: Client, settings: Settings) -> Ports:
    """Make sure the topology exists and build the ports over a connected client."""
    js = nc.jetstream()
    if settings.manage_topology:
        await ensure_topology(js, replicas=settings.replicas, ack_wait_s=settings.ack_wait_s,
                              partitions=settings.partitions)
    return Ports(
        nc=nc,
        js=js,
        store=JetStreamEventStore(nc, partitions=settings.partitions),
        cache=AggregateCache(),
        registry=CapabilityRegistry(await js.key_value(CAPABILITIES_BUCKET)),
        adapters=AdapterClient(nc, timeout_s=settings.adapter_timeout_s),
        runs=await js.key_value(RUNS_BUCKET),
        catalogues=await js.key_value(CATALOGUES_BUCKET),
        locks=await js.key_value(LOCKS_BUCKET),
        progress=await js.key_value(PROGRESS_BUCKET),
        budgets=await js.key_value(BUDGETS_BUCKET),
    )


async def connect_ports(broker: NatsBroker, settings: Settings) -> Ports:
    """Connect ``broker`` and build the ports over its connection."""
    nc: Client = await broker.connect()
    return await ports_for(nc, settings)


class Service(Generic[H]):
    """A service's handlers, built from its ports when the broker connects.

    Subscribers start only after the startup hooks ran, so a handler never sees a
    service without its ports.
    """

    def __init__(self, build: Callable[[Ports], H]) -> None:
        self._build = build
        self._handlers: H | None = None
        self._ports: Ports | None = None

    @property
    def handlers(self) -> H:
        """The handlers.

        Raises:
            RuntimeError: used before the service connected.
        """
        if self._handlers is None:
            raise RuntimeError("service used before it connected")
        return self._handlers

    @property
    def connected(self) -> Ports | None:
        """The ports, or ``None`` while the service has not connected yet."""
        return self._ports

    @property
    def ports(self) -> Ports:
        """The ports the handlers were built with.

        Raises:
            RuntimeError: used before the service connected.
        """
        if self._ports is None:
            raise RuntimeError("service used before it connected")
        return self._ports

    async def start(self, broker: NatsBroker, settings: Settings) -> None:
        """Connect and build the handlers."""
        self._ports = await connect_ports(broker, settings)
        self._handlers = self._build(self._ports)
