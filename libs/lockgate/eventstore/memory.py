"""An in-memory event store with the JetStream store's semantics, for unit tests."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace

from lockgate.eventstore.base import (
    AggregateHistory,
    ConcurrencyConflict,
    NewEvent,
    RecordedEvent,
)
from lockgate.eventstore.subjects import event_subject


class MemoryEventStore:
    """Keeps every aggregate's events in a dict; one lock makes appends atomic."""

    def __init__(self) -> None:
        self._streams: dict[tuple[str, str], tuple[RecordedEvent, ...]] = {}
        self._sequence = 0
        self._lock = asyncio.Lock()

    async def load(self, tenant: str, intent_id: str, *, at_least: int = 0) -> AggregateHistory:
        """Return the aggregate's history (empty when unknown; never behind, so ``at_least``
        asks nothing of it)."""
        event_subject(tenant, intent_id, 1, "Probe")  # same token rules as the real store
        return AggregateHistory(tenant, intent_id, self._streams.get((tenant, intent_id), ()))

    async def load_latest(self, tenant: str, intent_id: str) -> AggregateHistory:
        """The whole history: this store is its own leader (a subclass that plays a
        lagging replica in ``load`` still answers this one in full)."""
        return await MemoryEventStore.load(self, tenant, intent_id)

    async def append(
        self, history: AggregateHistory, events: Sequence[NewEvent]
    ) -> AggregateHistory:
        """Append after ``history``'s last event or raise ``ConcurrencyConflict``."""
        key = (history.tenant, history.intent_id)
        async with self._lock:
            current = self._streams.get(key, ())
            head = current[-1].sequence if current else 0
            if head != history.last_sequence:
                mine = current[history.version : history.version + len(events)]
                if [e.event_id for e in mine] == [e.event_id for e in events]:
                    return replace(history, events=history.events + tuple(mine))
                raise ConcurrencyConflict(history.tenant, history.intent_id, history.version)
            stored_ids = {e.event_id for e in current}
            if any(new.event_id in stored_ids for new in events):
                # Like the server's deduplication: an id already stored is not appended again.
                raise ConcurrencyConflict(history.tenant, history.intent_id, history.version)
            recorded = []
            for offset, new in enumerate(events, start=1):
                event_subject(history.tenant, history.intent_id, 1, new.event_type, new.route)
                self._sequence += 1
                recorded.append(
                    RecordedEvent(
                        tenant=history.tenant,
                        intent_id=history.intent_id,
                        version=history.version + offset,
                        event_type=new.event_type,
                        event_id=new.event_id,
                        data=new.data,
                        sequence=self._sequence,
                    )
                )
            self._streams[key] = current + tuple(recorded)
        return replace(history, events=history.events + tuple(recorded))

    async def tenant_of(self, intent_id: str) -> str | None:
        """The tenant of the stored aggregate ``intent_id`` names (``TenantLookup``)."""
        return next((tenant for tenant, stored in self._streams if stored == intent_id), None)

    def all_events(self) -> list[RecordedEvent]:
        """Return every stored event in store order."""
        return sorted(
            (e for stream in self._streams.values() for e in stream), key=lambda e: e.sequence
        )
