"""Types and the port every event store implements."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from lockgate.core.errors import LockgateError, TransientError


class EventStoreError(LockgateError):
    """Root of event store errors."""


class ConcurrencyConflict(EventStoreError):
    """Another writer appended to the aggregate after it was loaded.

    Retryable: reload, decide again, append again.
    """

    retryable = True

    def __init__(self, tenant: str, intent_id: str, expected_version: int) -> None:
        super().__init__(
            f"aggregate {tenant}/{intent_id} moved past version {expected_version}",
            code="eventstore.concurrency-conflict",
        )
        self.tenant = tenant
        self.intent_id = intent_id
        self.expected_version = expected_version


class EventStoreUnavailable(EventStoreError, TransientError):
    """The store did not answer or answered with an error that is not a conflict."""

    retryable = True


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event to append: its id (the deduplication key), type name, encoded body and route.

    ``route``: the last token of its subject (``lockgate.eventstore.subjects``).
    """

    event_id: str
    event_type: str
    data: bytes
    route: str = "_"


@dataclass(frozen=True, slots=True)
class RecordedEvent:
    """An event as stored: its place in the aggregate and in the whole store."""

    tenant: str
    intent_id: str
    version: int
    event_type: str
    event_id: str
    data: bytes
    sequence: int
    """Global position in the store; projections track it."""


@dataclass(frozen=True, slots=True)
class AggregateHistory:
    """Everything stored for one aggregate, in order, and where the next append goes."""

    tenant: str
    intent_id: str
    events: tuple[RecordedEvent, ...] = field(default=())

    @property
    def version(self) -> int:
        """Version of the last event; 0 for an aggregate with no events."""
        return self.events[-1].version if self.events else 0

    @property
    def last_sequence(self) -> int:
        """Store sequence of the last event; 0 for an aggregate with no events."""
        return self.events[-1].sequence if self.events else 0


class EventStore(Protocol):
    """Loads and appends aggregate histories with optimistic concurrency."""

    async def load(self, tenant: str, intent_id: str, *, at_least: int = 0) -> AggregateHistory:
        """Return every event of the aggregate in version order (empty when unknown).

        ``at_least``: a version the caller has reason to think the aggregate reached
        (the event that triggered it was delivered at it, a conflict said a later one
        exists, an order names it). A store whose reads may lag behind its writes
        (replicas) reads a shorter history again where none lags, and answers with that:
        if it is still shorter, that is the store's answer (an order ahead of the record,
        or a forged one), and the caller judges it.

        Raises:
            EventStoreUnavailable: the store did not answer.
        """
        ...

    async def load_latest(self, tenant: str, intent_id: str) -> AggregateHistory:
        """Return the aggregate's history as the store's leader holds it now.

        For the rare decision that must not rest on a replica behind the leader (whether
        an intent still holds a lock it may have taken on an old view); ``load`` serves
        every other read.

        Raises:
            EventStoreUnavailable: the store did not answer.
        """
        ...

    async def append(
        self, history: AggregateHistory, events: Sequence[NewEvent]
    ) -> AggregateHistory:
        """Append ``events`` after the last event of ``history``, all or nothing.

        Returns the history including the new events. Appending the same events
        again after a lost acknowledgement returns success, not a conflict.

        Raises:
            ConcurrencyConflict: another writer appended first.
            EventStoreUnavailable: the store did not answer.
        """
        ...


@runtime_checkable
class TenantLookup(Protocol):
    """A store that can say whose intent an id names (intent ids are derived from the
    tenant, so one id never names aggregates of two tenants)."""

    async def tenant_of(self, intent_id: str) -> str | None:
        """The tenant of the stored aggregate ``intent_id`` names; ``None`` when none is
        stored, or the id is no subject token.

        Raises:
            EventStoreUnavailable: the store did not answer.
        """
        ...
