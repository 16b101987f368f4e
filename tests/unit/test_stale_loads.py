"""A load that ends before the event that triggered it came from a replica behind the
leader (any replica of an R3 stream answers direct gets): it is loaded again, and a
store that stays behind makes the handler ask for the message later, never act on it."""

from __future__ import annotations

import pytest

from lockgate.eventstore.base import AggregateHistory, EventStoreUnavailable
from lockgate.eventstore.memory import MemoryEventStore
from lockgate.intent.aggregate import State
from lockgate.intent.codec import encode_event
from lockgate.runtime.service import load_intent
from lockgate.testing.intents import History


class LaggingStore(MemoryEventStore):
    """Answers the first ``behind`` loads without the aggregate's last event."""

    def __init__(self, behind: int) -> None:
        super().__init__()
        self.behind = behind
        self.loads = 0

    async def load(self, tenant: str, intent_id: str) -> AggregateHistory:
        self.loads += 1
        full = await super().load(tenant, intent_id)
        if self.loads <= self.behind:
            return AggregateHistory(tenant, intent_id, full.events[:-1])
        return full


async def stored(store: MemoryEventStore) -> AggregateHistory:
    h = History().normalized().decided("deny")
    history = await store.append(AggregateHistory("tenant-a", h.intent_id),
                                 [encode_event(e) for e in h.events])
    return history


async def test_a_lagging_replica_is_asked_again() -> None:
    store = LaggingStore(behind=2)
    history = await stored(store)
    intent = await load_intent(store, "tenant-a", history.intent_id, trigger=history.events[-1])
    assert intent is not None and intent.state is State.DENIED
    assert store.loads == 3


async def test_a_replica_that_stays_behind_is_not_acted_on() -> None:
    store = LaggingStore(behind=100)
    history = await stored(store)
    with pytest.raises(EventStoreUnavailable):
        await load_intent(store, "tenant-a", history.intent_id, trigger=history.events[-1])


async def test_without_a_trigger_the_load_is_taken_as_it_is() -> None:
    store = LaggingStore(behind=100)
    history = await stored(store)
    intent = await load_intent(store, "tenant-a", history.intent_id)
    assert intent is not None and intent.state is not State.DENIED
