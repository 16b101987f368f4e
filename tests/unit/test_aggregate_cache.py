"""The aggregate cache: which deliveries need no load, and that none of them decides wrongly."""

from __future__ import annotations

from collections.abc import Sequence

from lockgate.eventstore.base import AggregateHistory, NewEvent
from lockgate.eventstore.memory import MemoryEventStore
from lockgate.intent.aggregate import EffectIntent, Event, Stamp, State
from lockgate.intent.cache import AggregateCache
from lockgate.intent.codec import encode_event
from lockgate.intent.events import GateRefused, Withdrawn
from lockgate.runtime.ports.intents import decide_and_append, load_intent
from lockgate.testing.intents import T0, History


class CountingStore(MemoryEventStore):
    """The in-memory store, counting its loads."""

    def __init__(self) -> None:
        super().__init__()
        self.loads = 0

    async def load(self, tenant: str, intent_id: str, *, at_least: int = 0) -> AggregateHistory:
        self.loads += 1
        return await super().load(tenant, intent_id)


async def stored(store: MemoryEventStore, events: Sequence[Event], tenant: str = "tenant-a") -> AggregateHistory:
    intent_id = events[0].originator_id.hex
    history = await store.load(tenant, intent_id)
    new: list[NewEvent] = [encode_event(e) for e in events[history.version:]]
    return await store.append(history, new)


async def test_a_delivery_after_the_version_this_process_knows_needs_no_load() -> None:
    store, cache = CountingStore(), AggregateCache()
    h = History().normalized()
    history = await stored(store, h.events)
    first = history.events[0]
    assert cache.recall("tenant-a", h.intent_id, first) is not None  # a first event is whole
    store.loads = 0
    recall = cache.recall("tenant-a", h.intent_id, history.events[1])
    assert recall is not None and recall.exact and recall.known.history.version == 2
    intent = await load_intent(store, "tenant-a", h.intent_id, trigger=history.events[1], cache=cache)
    assert intent is not None and intent.state is State.NORMALIZED and store.loads == 0


async def test_a_gap_is_loaded_and_an_older_load_never_replaces_a_newer_history() -> None:
    store, cache = CountingStore(), AggregateCache()
    h = History().normalized().decided("allow")
    history = await stored(store, h.events)
    cache.recall("tenant-a", h.intent_id, history.events[0])  # knows version 1
    assert cache.recall("tenant-a", h.intent_id, history.events[2]) is None  # 2 never seen
    store.loads = 0
    intent = await load_intent(store, "tenant-a", h.intent_id, trigger=history.events[2], cache=cache)
    assert intent is not None and intent.state is State.ALLOWED and store.loads == 1
    cache.remember(AggregateHistory("tenant-a", h.intent_id, history.events[:1]), ())
    recall = cache.recall("tenant-a", h.intent_id)
    assert recall is not None and recall.known.history.version == 3


async def test_a_history_cut_at_the_trigger_is_the_state_the_trigger_saw() -> None:
    store, cache = CountingStore(), AggregateCache()
    h = History().normalized().decided("deny")
    history = await stored(store, h.events)
    cache.remember(history, tuple(h.events))
    known = cache.at("tenant-a", h.intent_id, history.events[1])
    assert known is not None and known.history.version == 2
    assert [type(e).__name__ for e in known.events] == ["CandidateReceived", "CandidateNormalized"]


async def known_allowed_then_withdrawn() -> tuple[CountingStore, AggregateCache, History]:
    """A cache that knows an intent as allowed; the store has it withdrawn since."""
    store, cache = CountingStore(), AggregateCache()
    h = History().normalized().decided("allow")
    history = await stored(store, h.events)
    cache.remember(history, tuple(h.events))
    later = History().normalized().decided("allow")
    later.add(Withdrawn, by="runtime", why="")
    await stored(store, later.events)
    return store, cache, h


async def test_nothing_to_do_on_a_history_that_may_be_behind_is_asked_of_the_store() -> None:
    """This process knows the intent as allowed; another appended a withdrawal since. A
    step that finds nothing to do on what it knows is run again on the stored history."""
    store, cache, h = await known_allowed_then_withdrawn()
    seen: list[State] = []

    async def step(intent: EffectIntent | None) -> list[Event]:
        assert intent is not None
        seen.append(intent.state)
        return []

    store.loads = 0
    assert await decide_and_append(store, "tenant-a", h.intent_id, step, cache=cache) == []
    assert seen == [State.ALLOWED, State.WITHDRAWN] and store.loads == 1


async def test_a_decision_on_a_stale_history_conflicts_and_is_made_again_on_the_stored_one() -> None:
    store, cache, h = await known_allowed_then_withdrawn()

    async def step(intent: EffectIntent | None) -> list[Event]:
        assert intent is not None
        if intent.state is not State.ALLOWED:
            return []
        return [GateRefused.next(intent, Stamp(T0, "refused", "c"),
                                              reason="gate.policy-changed", gate_facts={})]

    assert await decide_and_append(store, "tenant-a", h.intent_id, step, cache=cache) == []
    final = await store.load("tenant-a", h.intent_id)
    assert [e.event_type for e in final.events][-1] == "Withdrawn"  # nothing written over it


async def test_nothing_to_do_on_a_known_terminal_history_needs_no_load() -> None:
    """A timer that comes due after the effect settled: the intent is final where this
    process last saw it, so the step's 'nothing to do' holds for the store too."""
    store, cache = CountingStore(), AggregateCache()
    h = History().normalized().decided("deny")
    history = await stored(store, h.events)
    cache.remember(history, tuple(h.events))
    store.loads = 0

    async def step(intent: EffectIntent | None) -> list[Event]:
        assert intent is not None and intent.state is State.DENIED
        return []

    assert await decide_and_append(store, "tenant-a", h.intent_id, step,
                                   trigger=history.events[1], cache=cache) == []
    assert store.loads == 0
