"""A load for a trigger never answers with a history before it.

On an R3 stream any current replica answers a direct get, and one that has not applied
the latest writes answers with an older history. A policy handler that loaded such a
history for a ``CandidateNormalized`` found an intent not yet normalized, decided
nothing, and its message was acknowledged: the candidate stayed ``normalized`` forever
(seen in the cluster fault suite). Every load for a trigger, and every reload after a
conflict, now tells the store the version it knows exists (``at_least``).
"""

from __future__ import annotations

from collections.abc import Sequence

from lockgate.eventstore.base import AggregateHistory
from lockgate.eventstore.memory import MemoryEventStore
from lockgate.intent.aggregate import EffectIntent, Event, State
from lockgate.intent.codec import encode_event
from lockgate.runtime.ports.intents import decide_and_append, load_intent
from lockgate.testing.intents import History


class LaggingReplica(MemoryEventStore):
    """Answers without the aggregate's last event unless the caller says it exists."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[int] = []

    async def load(self, tenant: str, intent_id: str, *, at_least: int = 0) -> AggregateHistory:
        self.asked.append(at_least)
        full = await super().load(tenant, intent_id)
        if at_least <= full.version - 1:
            return AggregateHistory(tenant, intent_id, full.events[:-1])
        return full


async def normalized(store: MemoryEventStore) -> AggregateHistory:
    h = History().normalized()
    return await store.append(AggregateHistory("tenant-a", h.intent_id), [encode_event(e) for e in h.events])


async def test_a_step_for_a_trigger_sees_the_trigger() -> None:
    store = LaggingReplica()
    history = await normalized(store)
    trigger = history.events[-1]
    seen: list[State | None] = []

    async def decide(intent: EffectIntent | None) -> Sequence[Event]:
        # Policy's stage: only a normalized intent gets a decision; anything earlier is
        # "not mine yet", which on a lagging history would drop the trigger unanswered.
        seen.append(intent.state if intent is not None else None)
        if intent is None or intent.state is not State.NORMALIZED:
            return []
        return History().normalized().decided("allow").events[len(history.events):]

    decided = await decide_and_append(store, "tenant-a", history.intent_id, decide, trigger=trigger)
    assert [type(e).__name__ for e in decided] == ["PolicyDecided"]
    assert seen == [State.NORMALIZED] and store.asked == [trigger.version]


async def test_load_intent_asks_for_the_triggers_version() -> None:
    store = LaggingReplica()
    history = await normalized(store)
    intent = await load_intent(store, "tenant-a", history.intent_id, trigger=history.events[-1])
    assert intent is not None and intent.state is State.NORMALIZED


async def test_without_a_trigger_nothing_is_asked() -> None:
    store = LaggingReplica()
    history = await normalized(store)
    intent = await load_intent(store, "tenant-a", history.intent_id)
    assert intent is not None and intent.state is not State.NORMALIZED and store.asked == [0]
