"""How a consumer settles a message: never lost, never terminated by a handler's error."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest

from lockgate.core.errors import LockgateError, TransientError
from lockgate.eventstore import ConcurrencyConflict, MemoryEventStore
from lockgate.eventstore.subjects import NotAnEventSubject
from lockgate.intent.aggregate import EffectIntent
from lockgate.intent.codec import EventDecodeError, encode_event
from lockgate.runtime.service import Retry, backoff_s, decide_and_append, settle
from lockgate.testing.intents import History

LOG = logging.getLogger("test")


class FakeMessage:
    """Records what the consumer did with it, like a JetStream message would."""

    def __init__(self, delivered: int = 1) -> None:
        self.raw_message = SimpleNamespace(
            subject="lg.evt.tenant-a.x.1.Forged", metadata=SimpleNamespace(num_delivered=delivered)
        )
        self.calls: list[tuple[str, Any]] = []

    async def ack(self) -> None:
        self.calls.append(("ack", None))

    async def nack(self, delay: float | None = None) -> None:
        self.calls.append(("nak", delay))

    async def reject(self) -> None:
        self.calls.append(("term", None))


async def run(work_error: BaseException | None, delivered: int = 1) -> list[tuple[str, Any]]:
    msg = FakeMessage(delivered)

    async def work() -> None:
        if work_error is not None:
            raise work_error

    await settle(msg, work(), LOG, "d")  # type: ignore[arg-type]
    return msg.calls


async def test_success_acks() -> None:
    assert await run(None) == [("ack", None)]


async def test_a_timer_naks_with_its_own_delay() -> None:
    assert await run(Retry(12.5)) == [("nak", 12.5)]


async def test_errors_nak_with_backoff_and_never_terminate() -> None:
    assert await run(TransientError("x"), delivered=3) == [("nak", backoff_s(3))]
    assert await run(LockgateError("permanent"), delivered=1) == [("nak", backoff_s(1))]
    assert await run(ValueError("bug"), delivered=9) == [("nak", backoff_s(9, cap_s=60.0))]


async def test_only_unreadable_events_are_terminated() -> None:
    assert await run(EventDecodeError("garbage")) == [("term", None)]
    assert await run(NotAnEventSubject("lg.evt.x")) == [("term", None)]


def test_backoff_grows_and_is_capped() -> None:
    delays = [backoff_s(n) for n in range(1, 12)]
    assert delays == sorted(delays) and delays[-1] == 15.0


def normalized_after(intent: EffectIntent, event_id: str, offset: int = 1) -> EffectIntent.Event:
    return EffectIntent.CandidateNormalized.next(
        intent, now=intent.modified_on, event_id=event_id, causation_id="c", offset=offset,
        arguments={},
        resource={}, destination="", effect_class="write", digest=f"sha256:{event_id}",
        serializer="s", contract_revision="r")


async def test_decide_and_append_retries_the_whole_step_on_conflict() -> None:
    store = MemoryEventStore()
    h = History()
    history = await store.append(await store.load("tenant-a", h.intent_id), [encode_event(h.events[0])])
    seen_versions: list[int] = []

    async def step(intent: EffectIntent | None) -> list[EffectIntent.Event]:
        assert intent is not None
        seen_versions.append(intent.version)
        if len(seen_versions) == 1:  # another writer gets in between load and append
            await store.append(history, [encode_event(normalized_after(intent, "theirs"))])
        if intent.version > 1:
            return []  # past this step now: nothing to do
        return [normalized_after(intent, "mine")]

    assert await decide_and_append(store, "tenant-a", h.intent_id, step) == []
    assert seen_versions == [1, 2]
    assert [e.event_id for e in (await store.load("tenant-a", h.intent_id)).events][1:] == ["theirs"]


async def test_decide_and_append_gives_up_after_repeated_conflicts() -> None:
    store = MemoryEventStore()
    h = History()
    await store.append(await store.load("tenant-a", h.intent_id), [encode_event(h.events[0])])
    tries = 0

    async def step(intent: EffectIntent | None) -> list[EffectIntent.Event]:
        nonlocal tries
        tries += 1
        assert intent is not None
        # Another writer always appends between this step's load and its append.
        current = await store.load("tenant-a", h.intent_id)
        theirs = normalized_after(intent, f"theirs-{tries}", current.version - intent.version + 1)
        await store.append(current, [encode_event(theirs)])
        return [normalized_after(intent, f"mine-{tries}")]

    with pytest.raises(ConcurrencyConflict):
        await decide_and_append(store, "tenant-a", h.intent_id, step, conflicts=3)
    assert tries == 3


# -- liveness: what makes a process "not OK" ------------------------------------------------


def test_status_problem_tells_idle_from_stuck() -> None:
    from lockgate.runtime.status import STALL_S, ConsumerProgress, ProcessStatus, problem

    def answer(**consumers: ConsumerProgress) -> dict[str, object]:
        return ProcessStatus(service="policy", pid=1, consumers=consumers).to_dict()

    idle = ConsumerProgress(pending=0, idle_s=STALL_S * 10, busy_s=0.0)
    waiting_on_timers = ConsumerProgress(pending=0, idle_s=STALL_S * 2, busy_s=0.0)
    backlog_but_moving = ConsumerProgress(pending=50, idle_s=0.2, busy_s=1.0)
    assert problem(answer(policy=idle, pauses=waiting_on_timers, work=backlog_but_moving)) is None
    assert problem(None) == "no answer"
    assert problem(ProcessStatus(service="policy", pid=1, ready=False).to_dict()) == "not connected"
    hung = ConsumerProgress(pending=0, idle_s=1.0, busy_s=STALL_S + 1)
    assert problem(answer(policy=hung)) == f"policy: a handler has run for {STALL_S + 1:g}s"
    starved = ConsumerProgress(pending=7, idle_s=STALL_S, busy_s=0.0)
    assert problem(answer(policy=starved)) == f"policy: 7 waiting, nothing settled for {STALL_S:g}s"
    # An adapter's (or an older process's) answer says less: answering is all it proves.
    assert problem({"service": "adapter.x", "pid": 3, "capabilities": ["a"]}) is None
