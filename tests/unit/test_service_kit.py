"""How a consumer settles a message: never lost, never terminated by a handler's error."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace
from typing import Any

import pytest

from lockgate.core.errors import LockgateError, TransientError
from lockgate.eventstore import ConcurrencyConflict, MemoryEventStore
from lockgate.eventstore.subjects import NotAnEventSubject
from lockgate.intent.aggregate import EffectIntent, Stamp, State
from lockgate.intent.codec import EventDecodeError, encode_event
from lockgate.intent.disclosure import model_view
from lockgate.intent.events import CandidateNormalized, Event, ExecutionAuthorized
from lockgate.runtime.ports.intents import abandonment, decide_and_append
from lockgate.runtime.service import BOUNDS, Bounds, Failures, Guard, Retry, Unaddressed, settle
from lockgate.runtime.settlement import Abandonment, backoff_s, is_transient
from lockgate.runtime.spec import DELIVERIES, RECORD_TRIES, give_up_from, max_deliver_for
from lockgate.testing.intents import T0, History

LOG = logging.getLogger("test")


class FakeMessage:
    """Records what the consumer did with it, like a JetStream message would."""

    def __init__(self, delivered: int = 1, sequence: int = 7) -> None:
        self.raw_message = SimpleNamespace(
            subject="lg.evt.tenant-a.x.1.Forged",
            metadata=SimpleNamespace(num_delivered=delivered, sequence=SimpleNamespace(stream=sequence)),
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

    await settle(msg, work(), LOG)  # type: ignore[arg-type]
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
    # However often a timer's message was delivered (the reconciler's wait on it, say).
    assert backoff_s(1025, base_s=1.0, cap_s=60.0) == backoff_s(10**6) * 4 == 60.0


def normalized_after(intent: EffectIntent, event_id: str, offset: int = 1) -> Event:
    return CandidateNormalized.next(
        intent, Stamp(now=intent.modified_on, event_id=event_id, causation_id="c", offset=offset),
        arguments={},
        resource={}, destination="", effect_class="write", digest=f"sha256:{event_id}",
        serializer="s", contract_revision="r")


async def test_decide_and_append_retries_the_whole_step_on_conflict() -> None:
    store = MemoryEventStore()
    h = History()
    history = await store.append(await store.load("tenant-a", h.intent_id), [encode_event(h.events[0])])
    seen_versions: list[int] = []

    async def step(intent: EffectIntent | None) -> list[Event]:
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

    async def step(intent: EffectIntent | None) -> list[Event]:
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
    from lockgate.operations.status import STALL_S, ConsumerProgress, ProcessStatus, problem

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
class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def guarded(bounds: Bounds = BOUNDS, clock: Clock | None = None,
            refuse: BaseException | None = None) -> tuple[Guard, list[Abandonment]]:
    given_up: list[Abandonment] = []

    async def abandon(msg: object, why: Abandonment) -> None:
        if refuse is not None:
            raise refuse
        given_up.append(why)

    return Guard("d", bounds, abandon, Failures(clock=clock or Clock())), given_up


async def deliver(guard: Guard, error: BaseException | None, delivered: int) -> list[tuple[str, Any]]:
    msg = FakeMessage(delivered)

    async def work() -> None:
        if error is not None:
            raise error

    await settle(msg, work(), LOG, guard)  # type: ignore[arg-type]
    return msg.calls


async def test_a_message_that_keeps_failing_is_given_up_on_the_record_and_acked() -> None:
    guard, given_up = guarded(Bounds(permanent_failures=3))
    for n in (1, 2):
        assert (await deliver(guard, ValueError("bug"), n))[0][0] == "nak"
    assert given_up == []
    assert await deliver(guard, ValueError("bug"), 3) == [("ack", None)]
    (why,) = given_up
    assert (why.durable, why.deliveries) == ("d", 3)
    assert "failed 3 times" in why.cause and "ValueError: bug" in why.cause


async def test_timers_never_count_as_failures() -> None:
    guard, given_up = guarded(Bounds(permanent_failures=2, deliveries=None))
    for n in range(1, 500):
        assert await deliver(guard, Retry(1.0), n) == [("nak", 1.0)]
    assert (await deliver(guard, ValueError("bug"), 500))[0][0] == "nak"  # the first failure
    assert given_up == []
    assert await deliver(guard, ValueError("bug"), 501) == [("ack", None)]
    assert len(given_up) == 1


async def test_transient_failures_are_bounded_by_time_not_count() -> None:
    clock = Clock()
    guard, given_up = guarded(Bounds(permanent_failures=2, transient_for_s=60), clock)
    for n in range(1, 20):
        clock.now += 2
        assert (await deliver(guard, TransientError("store down"), n))[0][0] == "nak"
    assert given_up == []
    clock.now += 60
    assert await deliver(guard, TransientError("store down"), 20) == [("ack", None)]
    assert "failing for" in given_up[0].cause


async def test_a_success_forgets_the_failures() -> None:
    guard, given_up = guarded(Bounds(permanent_failures=2))
    await deliver(guard, ValueError("bug"), 1)
    assert await deliver(guard, None, 2) == [("ack", None)]
    await deliver(guard, ValueError("bug"), 3)
    assert given_up == []


async def test_too_many_deliveries_are_given_up_without_running_the_handler() -> None:
    guard, given_up = guarded(Bounds(deliveries=10))
    ran: list[int] = []

    async def work() -> None:
        ran.append(1)

    msg = FakeMessage(11)
    await settle(msg, work(), LOG, guard)  # type: ignore[arg-type]
    assert msg.calls == [("ack", None)] and ran == [] and "delivered 11 times" in given_up[0].cause
    timers, none = guarded(Bounds(deliveries=None))
    assert await deliver(timers, None, 10_000) == [("ack", None)] and none == []


async def test_giving_up_waits_for_the_store_and_terminates_only_what_cannot_be_recorded() -> None:
    waiting, _ = guarded(Bounds(permanent_failures=1), refuse=TransientError("store down"))
    assert (await deliver(waiting, ValueError("bug"), 1))[0][0] == "nak"
    broken, _ = guarded(Bounds(permanent_failures=1), refuse=ValueError("cannot record"))
    assert await deliver(broken, ValueError("bug"), 1) == [("term", None)]


async def test_the_bound_delivery_itself_is_given_up_before_the_handler_runs() -> None:
    guard, given_up = guarded(Bounds(deliveries=give_up_from(max_deliver_for(100))))
    ran: list[int] = []

    async def work() -> None:
        ran.append(1)

    before, at = FakeMessage(99), FakeMessage(100)
    await settle(before, work(), LOG, guard)  # type: ignore[arg-type]
    await settle(at, work(), LOG, guard)  # type: ignore[arg-type]
    assert (before.calls, at.calls, ran) == ([("ack", None)], [("ack", None)], [1])
    assert [why.deliveries for why in given_up] == [100]


def test_the_server_keeps_deliveries_to_record_a_give_up() -> None:
    assert max_deliver_for(100) == 100 + RECORD_TRIES and give_up_from(max_deliver_for(100)) == 100
    assert give_up_from(-1) is None
    # A bound too small to keep them all keeps half; the last delivery always gives up.
    assert [give_up_from(m) for m in (1, 2, 3, 6)] == [1, 2, 2, 4]


async def test_an_unreadable_event_is_given_up_on_its_intent_and_acked() -> None:
    guard, given_up = guarded()
    assert await deliver(guard, EventDecodeError("garbage"), 1) == [("ack", None)]
    assert "unreadable event" in given_up[0].cause and "garbage" in given_up[0].cause


async def test_a_message_that_names_no_intent_is_terminated_as_poison() -> None:
    guard, _ = guarded(refuse=Unaddressed("lg.evt.x", "not an event's subject"))
    msg = FakeMessage(1)

    async def work() -> None:
        raise NotAnEventSubject("lg.evt.x")

    assert await settle(msg, work(), LOG, guard) == "poison"  # type: ignore[arg-type]
    assert msg.calls == [("term", None)]


def test_what_is_transient() -> None:
    import nats.errors
    import nats.js.errors

    assert is_transient(TransientError("x")) and is_transient(nats.errors.TimeoutError())
    assert is_transient(nats.errors.NoRespondersError()) and is_transient(TimeoutError())
    assert is_transient(nats.js.errors.ServiceUnavailableError(code=503))
    assert is_transient(nats.js.errors.KeyWrongLastSequenceError())
    assert not is_transient(LockgateError("permanent")) and not is_transient(ValueError("bug"))
    assert not is_transient(nats.js.errors.BadRequestError(code=400))
    assert not is_transient(nats.js.errors.InvalidKeyError())


def test_abandonment_before_dispatch_refuses_and_after_it_needs_an_operator() -> None:
    why = Abandonment("policy", "failed 5 times; last: ValueError: x", 5)
    h = History().normalized()
    h.extend(abandonment(h.intent, why, "e1", T0))
    assert (h.intent.state, h.intent.reason) == (State.REFUSED, "candidate.unprocessable")
    assert abandonment(h.intent, why, "e1", T0) == []  # once per consumer and message
    view = model_view(h.intent, None)
    assert view is not None and (view.status, view.code) == ("unavailable", "operation.unavailable")

    sent = History().normalized().decided("allow")
    sent.add(ExecutionAuthorized, attempt_id="a1", intent_key="k1", digest="sha256:d1",
             policy_revision="p", contract_revision="rev-1", gate_facts={}, deadline_at=T0)
    sent.extend(abandonment(sent.intent, Abandonment("executor-dispatch", "x", 5), "e2", T0))
    assert sent.intent.state is State.NEEDS_OPERATOR  # the order may be out: never "failed"
    view = model_view(sent.intent, None)
    assert view is not None and view.status == "outcome_unknown"

    done = History().normalized().decided("deny", ["case.closed"])
    done.extend(abandonment(done.intent, Abandonment("policy-budgets", "x", 5), "e3", T0))
    assert done.intent.state is State.DENIED  # a settled intent keeps its state


def test_the_deliveries_kept_for_recording_outlast_a_transient_outage() -> None:
    kept = sum(backoff_s(n) for n in range(DELIVERIES, DELIVERIES + RECORD_TRIES))
    assert kept >= BOUNDS.transient_for_s


async def test_a_handler_that_never_returns_is_cancelled_counted_and_given_up() -> None:
    guard, given_up = guarded(Bounds(permanent_failures=2, handler_timeout_s=0.05))
    cancelled: list[int] = []

    async def hang(n: int) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.append(n)

    first = FakeMessage(1)
    # (A kit without the bound would wait for ever: the test's own limit turns that into a failure.)
    assert await asyncio.wait_for(settle(first, hang(1), LOG, guard), 10) == "error"  # type: ignore[arg-type]
    assert first.calls[0][0] == "nak" and given_up == []
    second = FakeMessage(2)
    await asyncio.wait_for(settle(second, hang(2), LOG, guard), 10)  # type: ignore[arg-type]
    assert second.calls == [("ack", None)] and cancelled == [1, 2]
    assert "failed 2 times" in given_up[0].cause and "HandlerHung" in given_up[0].cause


async def test_a_timeout_met_inside_the_handler_is_not_a_hang() -> None:
    guard, given_up = guarded(Bounds(permanent_failures=1, handler_timeout_s=30))
    calls = await deliver(guard, TimeoutError("the adapter did not answer"), 1)
    assert calls[0][0] == "nak" and given_up == []  # transient: bounded by time, not counted


class JournalFake:
    """A crash journal that says how often each message went down with its process."""

    def __init__(self, counts: dict[str, int]) -> None:
        self.counts = counts
        self.in_flight: list[str] = []
        self.ended: list[str] = []

    def begin(self, key: str) -> int:
        self.in_flight.append(key)
        return self.counts.get(key, 0)

    def end(self, key: str) -> None:
        self.ended.append(key)


async def test_a_redelivery_that_took_its_process_down_three_times_is_given_up_unrun() -> None:
    guard, given_up = guarded(Bounds(deliveries=5_000))
    journal = JournalFake({"LG_EVENTS/7": 3})
    guard.crashes = journal  # type: ignore[assignment]
    ran: list[int] = []

    async def work() -> None:
        ran.append(1)

    msg = FakeMessage(5)
    msg.raw_message.metadata.stream = "LG_EVENTS"
    await settle(msg, work(), LOG, guard)  # type: ignore[arg-type]
    assert msg.calls == [("ack", None)] and ran == []
    assert "took its process down 3 times in a row" in given_up[0].cause
    assert journal.ended == ["LG_EVENTS/7"]


async def test_first_deliveries_write_nothing_and_redeliveries_are_struck_out_when_handled() -> None:
    guard, given_up = guarded()
    journal = JournalFake({"LG_EVENTS/7": 2})
    guard.crashes = journal  # type: ignore[assignment]
    first = FakeMessage(1)
    first.raw_message.metadata.stream = "LG_EVENTS"
    assert await deliver_msg(guard, first) == [("ack", None)]
    assert journal.in_flight == []
    again = FakeMessage(2)
    again.raw_message.metadata.stream = "LG_EVENTS"
    assert await deliver_msg(guard, again) == [("ack", None)]  # two crashes: still tried
    assert (journal.in_flight, journal.ended, given_up) == (["LG_EVENTS/7"], ["LG_EVENTS/7"], [])


async def deliver_msg(guard: Guard, msg: FakeMessage) -> list[tuple[str, Any]]:
    async def work() -> None:
        return None

    await settle(msg, work(), LOG, guard)  # type: ignore[arg-type]
    return msg.calls
