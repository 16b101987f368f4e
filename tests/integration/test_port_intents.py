"""One contract for the intent store port: over the in-memory store and over JetStream."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from lockgate.core.ids import random_id
from lockgate.eventstore.base import ConcurrencyConflict
from lockgate.intent.aggregate import EffectIntent, Event, State
from lockgate.intent.codec import encode_event
from lockgate.intent.events import CandidateNormalized, CandidateReceived, ProcessingAbandoned
from lockgate.runtime.context import Ports
from lockgate.runtime.settlement import Abandonment
from lockgate.testing.intents import T0, History


def fresh() -> History:
    """A normalized intent of its own (the JetStream store is shared by the session)."""
    return History(call_id=f"call-{random_id()}").normalized()


def received(h: History) -> list[Event]:
    return h.events[:1]


async def stored(ports: Ports, h: History, upto: int) -> None:
    history = await ports.store.load("tenant-a", h.intent_id)
    await ports.store.append(history, [encode_event(e) for e in h.events[history.version:upto]])


async def interlope(ports: Ports, h: History) -> None:
    """Another writer appends to the intent (a neutral event of its own)."""
    history = await ports.store.load("tenant-a", h.intent_id, at_least=1)
    await ports.store.append(history, [encode_event(ProcessingAbandoned(
        originator_id=h.events[0].originator_id, originator_version=history.version + 1,
        timestamp=T0, event_id=random_id(), correlation_id="", causation_id="x",
        durable="elsewhere", trigger=random_id(), cause="c", deliveries=1))])


async def test_a_decision_on_a_new_intent_is_appended_and_says_before_and_after(ports: Ports) -> None:
    h = fresh()

    async def step(intent: EffectIntent | None) -> Sequence[Event]:
        return received(h) if intent is None else []

    decision = await ports.intents.decide("tenant-a", h.intent_id, step)
    assert decision.before is None
    assert decision.events == tuple(received(h))
    assert decision.after is not None and decision.after.state is State.PROPOSED
    loaded = await ports.intents.load("tenant-a", h.intent_id)
    assert loaded is not None and loaded.version == 1


async def test_after_folds_the_new_events_and_leaves_before_as_it_was(ports: Ports) -> None:
    h = fresh()
    await stored(ports, h, 1)

    async def step(intent: EffectIntent | None) -> Sequence[Event]:
        return h.events[1:2] if intent is not None and intent.version == 1 else []

    decision = await ports.intents.decide("tenant-a", h.intent_id, step)
    assert decision.before is not None and decision.before.state is State.PROPOSED
    assert decision.before.version == 1
    assert decision.after is not None and decision.after.state is State.NORMALIZED
    assert decision.after.version == 2


async def test_nothing_to_do_appends_nothing_and_after_is_before(ports: Ports) -> None:
    h = fresh()
    await stored(ports, h, 2)

    async def step(intent: EffectIntent | None) -> Sequence[Event]:
        return []

    decision = await ports.intents.decide("tenant-a", h.intent_id, step)
    assert decision.events == ()
    assert decision.after is decision.before
    assert decision.before is not None and decision.before.version == 2


async def test_a_step_says_what_it_found(ports: Ports) -> None:
    h = fresh()
    await stored(ports, h, 2)

    async def step(intent: EffectIntent | None) -> tuple[Sequence[Event], str]:
        return [], intent.state.value if intent is not None else "none"

    decision = await ports.intents.decide_with("tenant-a", h.intent_id, step)
    assert decision.result == State.NORMALIZED.value


async def test_a_conflict_runs_the_step_again_on_the_fresh_history(ports: Ports) -> None:
    h = fresh()
    await stored(ports, h, 1)
    seen: list[int] = []

    async def step(intent: EffectIntent | None) -> tuple[Sequence[Event], int]:
        assert intent is not None
        seen.append(intent.version)
        if len(seen) == 1:
            await interlope(ports, h)  # another writer gets in first
            return h.events[1:2], intent.version
        return [], intent.version

    decision = await ports.intents.decide_with("tenant-a", h.intent_id, step)
    assert seen == [1, 2]
    assert decision.events == () and decision.result == 2
    assert decision.before is not None and decision.before.abandoned[0].startswith("elsewhere:")


async def test_assume_new_decides_without_a_load_and_a_repeat_appends_nothing(ports: Ports) -> None:
    h = fresh()
    await stored(ports, h, 1)
    seen: list[EffectIntent | None] = []

    async def step(intent: EffectIntent | None) -> Sequence[Event]:
        seen.append(intent)
        return received(h) if intent is None else []

    decision = await ports.intents.decide("tenant-a", h.intent_id, step, assume_new=True)
    assert seen == [None]  # decided on no history at all
    assert decision.before is None
    assert len((await ports.store.load("tenant-a", h.intent_id)).events) == 1  # stored once


async def test_conflicting_every_time_raises_after_the_tries(ports: Ports) -> None:
    h = fresh()
    await stored(ports, h, 1)

    async def step(intent: EffectIntent | None) -> Sequence[Event]:
        await interlope(ports, h)
        return h.events[1:2]

    with pytest.raises(ConcurrencyConflict):
        await ports.intents.decide("tenant-a", h.intent_id, step, conflicts=2)


async def test_load_and_events_of_an_unknown_intent(ports: Ports) -> None:
    h = fresh()
    assert await ports.intents.load("tenant-a", h.intent_id) is None
    assert await ports.intents.events("tenant-a", h.intent_id) == ()
    await stored(ports, h, 2)
    assert [type(e) for e in await ports.intents.events("tenant-a", h.intent_id, at_least=2)] == [
        CandidateReceived, CandidateNormalized]
    latest = await ports.intents.load("tenant-a", h.intent_id, latest=True)
    assert latest is not None and latest.version == 2
    assert await ports.intents.tenant_of(h.intent_id) == "tenant-a"


async def test_load_at_a_trigger_is_never_before_it(ports: Ports) -> None:
    h = fresh()
    await stored(ports, h, 2)
    trigger = (await ports.store.load("tenant-a", h.intent_id)).events[-1]
    intent = await ports.intents.load("tenant-a", h.intent_id, trigger=trigger)
    assert intent is not None and intent.version == 2


async def test_an_abandonment_is_recorded_once_per_consumer_and_message(ports: Ports) -> None:
    h = fresh()
    why = Abandonment("policy-normalized", "KeyError", 5)
    await ports.intents.record_abandonment("tenant-a", h.intent_id, why, "msg-9", lambda: T0)
    assert await ports.intents.load("tenant-a", h.intent_id) is None  # nothing to record on
    await stored(ports, h, 2)
    for _ in range(2):
        await ports.intents.record_abandonment("tenant-a", h.intent_id, why, "msg-9", lambda: T0)
    intent = await ports.intents.load("tenant-a", h.intent_id, latest=True)
    assert intent is not None and list(intent.abandoned) == ["policy-normalized:msg-9"]
