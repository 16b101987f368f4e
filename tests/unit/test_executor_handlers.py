"""The executor's handlers on in-memory ports: the gate, orders, reports, claims, withdrawals,
timers and locks, without a broker.

Each test builds a history in the fake store, runs one handler as its consumer or request
would, and reads back what was appended, which orders went out, which locks are held and
which timers were let go.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Sequence
from datetime import timedelta

import msgspec
import pytest

from lockgate.authz.source import BundleSource
from lockgate.contracts import subjects
from lockgate.contracts.messages import (
    AttemptReport,
    Claim,
    ClaimAnswer,
    ExecutionOrder,
    Facts,
    FactsRequest,
    Withdraw,
)
from lockgate.contracts.proofs import report_token
from lockgate.contracts.responses import ModelResponse
from lockgate.contracts.vocabulary import ReportStage
from lockgate.core.ids import derived_id
from lockgate.eventstore.base import AggregateHistory, EventStore, NewEvent, RecordedEvent
from lockgate.executor.domain import order_for
from lockgate.executor.handlers import AttemptDue, ExecutorHandlers
from lockgate.intent.aggregate import Stamp, State
from lockgate.intent.codec import encode_event
from lockgate.intent.events import (
    AttemptInterrupted,
    AttemptRejected,
    AttemptSent,
    EffectCompleted,
    ExecutionAuthorized,
    GateRefused,
    InterruptionRequested,
    OutcomeUnknown,
    ProcessingAbandoned,
    Reconciled,
    WithdrawalRequested,
    Withdrawn,
)
from lockgate.runtime.context import MemoryPorts
from lockgate.runtime.ports.adapters import FakeAdapters
from lockgate.runtime.ports.intents import StoredIntents
from lockgate.runtime.settings import Settings
from lockgate.runtime.specs import ENDS_HOLD_BY_TRIGGER, ENDS_HOLD_ELSEWHERE
from lockgate.testing.intents import T0, History
from lockgate.worlds.casenotes.adapter import CONTRACT

BUNDLES = BundleSource(Settings().policy_dir)
#: The executor's report-token key in these tests.
KEY = b"k" * 32
#: The case-notes world's facts about an open case the actor may write to.
OPEN_FACTS: dict[str, str | int | bool] = {
    "exists": True, "tenant": "tenant-a", "status": "open", "writes_suspended": False,
    "actor_may_add_note": True, "sensitive": False, "version": 4}
#: The lock of case-123, the resource every history here names.
LOCK = "tenant-a.case.case-123"


@pytest.fixture
def ports() -> MemoryPorts:
    """case.add_note registered (its contract serializes each case); facts as for an open case."""
    return MemoryPorts.create(CONTRACT, adapters=FakeAdapters(
        facts_answer=Facts(facts=OPEN_FACTS, revision="4")))


def executor_handlers(ports: MemoryPorts) -> ExecutorHandlers:
    return ExecutorHandlers(ports, BUNDLES, lambda: T0, report_key=KEY)


def signed(report: AttemptReport) -> AttemptReport:
    """``report`` with the token its order carried (as the adapter SDK echoes it)."""
    return msgspec.structs.replace(report, token=report_token(
        KEY, report.tenant, report.intent_id, report.attempt_id, "case.add_note"))


async def deliver(executor: ExecutorHandlers, report: AttemptReport) -> None:
    """Hand ``report`` to the executor as its report consumer would."""
    await executor.report(msgspec.json.encode(report), f"lg.report.case.add_note.{report.intent_id}", 1)


async def store_history(ports: MemoryPorts, h: History) -> RecordedEvent:
    """Append ``h`` and return its last event as stored (what a consumer is handed)."""
    history = await ports.store.load("tenant-a", h.intent_id)
    history = await ports.store.append(history, [encode_event(e) for e in h.events[history.version:]])
    return history.events[-1]


async def stored_types(ports: MemoryPorts, h: History) -> list[str]:
    return [e.event_type for e in (await ports.store.load("tenant-a", h.intent_id)).events]


def authorized_history() -> History:
    h = History().normalized().decided("allow")
    return h.add(ExecutionAuthorized, attempt_id="a1", intent_key="k1",
                 digest="sha256:d1", policy_revision="p", contract_revision="rev-1",
                 gate_facts={}, deadline_at=T0 + timedelta(seconds=30))


def order_of(h: History) -> ExecutionOrder:
    """The order the executor dispatched for ``h``'s authorized attempt."""
    authorized = next(e for e in h.events if isinstance(e, ExecutionAuthorized))
    order = order_for(h.intent, authorized, key=KEY)
    assert order is not None
    return order


def authorized_on_its_trigger(attempt_id: str = "a1") -> History:
    """Policy allowed, and the gate authorized ``attempt_id`` on that decision (its trigger)."""
    h = History().normalized().decided("allow")
    trigger = h.events[-1].event_id
    return h.extend([ExecutionAuthorized.next(
        h.intent, Stamp(now=T0, event_id=derived_id("gate", trigger), causation_id=trigger),
        attempt_id=attempt_id, intent_key="k1", digest="sha256:d1", policy_revision="p",
        contract_revision="rev-1", gate_facts={}, deadline_at=T0 + timedelta(seconds=30))])


async def store_with_trigger(ports: MemoryPorts, h: History) -> RecordedEvent:
    """Store ``h``; return its ``PolicyDecided`` as stored (what the gate's durable is handed)."""
    await store_history(ports, h)
    stored = await ports.store.load("tenant-a", h.intent_id)
    return next(e for e in stored.events if e.event_type == "PolicyDecided")


# -- withdrawals and claims ------------------------------------------------------------------


async def test_withdrawing_a_sent_attempt_asks_its_adapter_to_stop(ports: MemoryPorts) -> None:
    h = History().normalized().decided("allow")
    h.add(ExecutionAuthorized, attempt_id="a1", intent_key="k1", digest="sha256:d1",
          policy_revision="p", contract_revision="rev-1", gate_facts={}, deadline_at=T0)
    h.add(AttemptSent, attempt_id="a1")
    await store_history(ports, h)
    subject = subjects.withdraw("tenant-a", h.intent.run_id, h.intent_id, "agent-tenant-a")
    reply = await executor_handlers(ports).withdraw(subject, msgspec.json.encode(Withdraw(why="stop")))
    assert msgspec.json.decode(reply, type=ModelResponse).status == "interruption_requested"
    assert ports.orders.interrupted == [("case.add_note", h.intent_id, "a1")]
    assert (await stored_types(ports, h))[-1] == "InterruptionRequested"


async def test_withdrawing_a_dispatched_attempt_is_a_request_until_the_adapter_refuses(
    ports: MemoryPorts,
) -> None:
    h = authorized_history()
    await store_history(ports, h)
    executor = executor_handlers(ports)
    withdraw = msgspec.json.encode(Withdraw(why="changed my mind"))
    subject = subjects.withdraw("tenant-a", h.intent.run_id, h.intent_id, "agent-tenant-a")
    first = msgspec.json.decode(await executor.withdraw(subject, withdraw), type=ModelResponse)
    assert (first.status, first.code) == ("withdrawal_requested", "operation.withdrawal-requested")
    again = msgspec.json.decode(await executor.withdraw(subject, withdraw), type=ModelResponse)
    assert again.status == "withdrawal_requested"  # recorded once
    await deliver(executor, signed(AttemptReport(tenant="tenant-a", intent_id=h.intent_id,
                                                 attempt_id="a1", stage=ReportStage.WITHDRAWN,
                                                 reason="order.withdrawn")))
    final = msgspec.json.decode(await executor.withdraw(subject, withdraw), type=ModelResponse)
    assert (final.status, final.code) == ("withdrawn", "proposal.withdrawn")
    assert (await stored_types(ports, h))[-2:] == ["WithdrawalRequested", "Withdrawn"]


async def test_a_withdrawal_outside_the_runs_scope_is_refused_and_changes_nothing(
    ports: MemoryPorts,
) -> None:
    h = authorized_history()
    await store_history(ports, h)
    subject = subjects.withdraw("tenant-a", "another-run", h.intent_id, "agent-tenant-a")
    reply = await executor_handlers(ports).withdraw(subject, msgspec.json.encode(Withdraw(why="x")))
    assert msgspec.json.decode(reply)["error"] == "withdraw.unknown-intent"
    assert (await stored_types(ports, h))[-1] == "ExecutionAuthorized"


async def test_a_claim_after_a_withdrawal_request_is_refused_and_the_intent_withdrawn(
    ports: MemoryPorts,
) -> None:
    h = authorized_history()
    order = order_of(h)
    h.add(WithdrawalRequested, attempt_id="a1", by="runtime", why="")
    await store_history(ports, h)
    assert await ports.locks.take(LOCK, h.intent_id.encode())
    answer = msgspec.json.decode(await executor_handlers(ports).claim(
        "lg.claim.case.add_note", msgspec.json.encode(Claim(order=order, claimant="w1"))),
        type=ClaimAnswer)
    assert (answer.verdict, answer.reason) == ("refused", "order.withdrawn")
    intent = await ports.intents.load("tenant-a", h.intent_id)
    assert intent is not None and intent.state is State.WITHDRAWN
    assert await ports.locks.holder(LOCK) is None  # the withdrawal ended the hold: the lock is free


async def test_a_claim_the_executor_grants_is_on_the_record_before_the_answer(ports: MemoryPorts) -> None:
    h = authorized_history()
    await store_history(ports, h)
    executor = executor_handlers(ports)
    body = msgspec.json.encode(Claim(order=order_of(h), claimant="w1"))
    answer = msgspec.json.decode(await executor.claim("lg.claim.case.add_note", body), type=ClaimAnswer)
    assert answer.verdict == "crossed"
    intent = await ports.intents.load("tenant-a", h.intent_id)
    assert intent is not None and intent.state is State.SENT and intent.attempt("a1").claimant == "w1"
    rival = msgspec.json.encode(Claim(order=order_of(h), claimant="w2"))
    refused = msgspec.json.decode(await executor.claim("lg.claim.case.add_note", rival), type=ClaimAnswer)
    # case.add_note's remote deduplicates by the intent key: a second writer changes nothing
    assert CONTRACT.idempotency is not None and refused.verdict == "crossed"
    assert (await stored_types(ports, h)).count("AttemptSent") == 1


# -- the gate, its orders and its timer -------------------------------------------------------


async def test_the_gate_authorizes_under_the_lock_and_sends_the_order_once(ports: MemoryPorts) -> None:
    h = History(contract_revision=CONTRACT.revision).normalized(
        contract_revision=CONTRACT.revision).decided("allow")
    last = await store_history(ports, h)
    executor = executor_handlers(ports)
    with pytest.raises(AttemptDue):  # the trigger is now the attempt's timer
        await executor.ready(last, timer="reply-1")
    intent = await ports.intents.load("tenant-a", h.intent_id)
    assert intent is not None and intent.state is State.AUTHORIZED
    assert await ports.locks.holder(LOCK) == h.intent_id.encode()
    assert [(o.intent_id, o.attempt_id) for o in ports.orders.sent] == [
        (h.intent_id, intent.attempts[-1].attempt_id)]
    assert ports.adapters.asked_for("facts") == [
        FactsRequest(tenant="tenant-a", actor="user-42", resource=intent.resource)]


async def test_the_trigger_of_an_open_attempt_comes_back_at_its_deadline(ports: MemoryPorts) -> None:
    """The gate's trigger is its attempt's timer: asked for again until the deadline, where
    the attempt still open becomes OutcomeUnknown; after that it is settled for good."""
    h = authorized_on_its_trigger()
    trigger = await store_with_trigger(ports, h)
    now = [T0]
    executor = ExecutorHandlers(ports, BUNDLES, lambda: now[0], report_key=KEY)
    executor._sent["a1"] = None  # its order went out
    with pytest.raises(AttemptDue) as due:
        await executor.ready(trigger)
    assert 29.9 < due.value.delay_s <= 30.1
    now[0] = T0 + timedelta(seconds=31)
    await executor.ready(trigger)  # due: silence is an unknown outcome
    intent = await ports.intents.load("tenant-a", h.intent_id)
    assert intent is not None and intent.state is State.UNKNOWN
    await executor.ready(trigger)  # once
    assert (await stored_types(ports, h)).count("OutcomeUnknown") == 1


async def test_the_attempts_timer_is_let_go_when_its_report_ends_the_intent_here(
    ports: MemoryPorts,
) -> None:
    h = authorized_on_its_trigger()
    trigger = await store_with_trigger(ports, h)
    executor = executor_handlers(ports)
    executor._sent["a1"] = None
    with pytest.raises(AttemptDue):
        await executor.ready(trigger, timer="reply-1")
    assert ports.timers.done_timers == []
    await deliver(executor, signed(AttemptReport(tenant="tenant-a", intent_id=h.intent_id,
                                                 attempt_id="a1", stage=ReportStage.COMPLETED)))
    assert (await stored_types(ports, h))[-1] == "EffectCompleted"
    assert ports.timers.done_timers == ["reply-1"]


async def test_a_report_the_timer_holder_did_not_record_leaves_the_timer_to_run_out(
    ports: MemoryPorts,
) -> None:
    h = authorized_on_its_trigger()
    trigger = await store_with_trigger(ports, h)
    holder, other = executor_handlers(ports), executor_handlers(ports)
    holder._sent["a1"] = None
    with pytest.raises(AttemptDue):
        await holder.ready(trigger, timer="reply-1")
    await deliver(other, signed(AttemptReport(tenant="tenant-a", intent_id=h.intent_id,
                                              attempt_id="a1", stage=ReportStage.COMPLETED)))
    assert (await stored_types(ports, h))[-1] == "EffectCompleted"
    assert ports.timers.done_timers == []


async def test_a_report_recorded_before_the_gate_finished_leaves_nothing_to_time(
    ports: MemoryPorts,
) -> None:
    """The adapter answered so fast that its report was recorded here while the gate was
    still finishing: the trigger is not kept as a timer at all."""
    h = authorized_on_its_trigger()
    trigger = await store_with_trigger(ports, h)
    executor = executor_handlers(ports)
    executor._sent["a1"] = None
    executor._ended["a1"] = None  # what the report handler notes
    await executor._time(trigger, h.intent, timer="reply-1")  # no AttemptDue


async def test_a_trigger_handed_again_sends_no_order_once_a_withdrawal_was_requested(
    ports: MemoryPorts,
) -> None:
    h = authorized_on_its_trigger()
    trigger = await store_with_trigger(ports, h)
    h.extend([WithdrawalRequested.next(
        h.intent, Stamp(now=T0, event_id="w1", causation_id="w"), attempt_id="a1", by="runtime", why="")])
    await store_history(ports, h)
    with pytest.raises(AttemptDue):  # the deadline is still ahead
        await executor_handlers(ports).ready(trigger)
    assert ports.orders.sent == []


async def test_an_order_not_sent_after_its_authorization_is_sent_when_its_trigger_comes_again(
    ports: MemoryPorts,
) -> None:
    """The executor appended ``ExecutionAuthorized`` and died before sending the order: the
    next one, handed the gate's trigger again, sends it, once."""
    h = authorized_on_its_trigger()
    trigger = await store_with_trigger(ports, h)
    executor = executor_handlers(ports)
    for _ in range(2):  # the timer comes back; the order is not sent again
        with pytest.raises(AttemptDue):
            await executor.ready(trigger)
    assert [(o.intent_id, o.attempt_id) for o in ports.orders.sent] == [(h.intent_id, "a1")]


# -- locks released from the record -----------------------------------------------------------


def ended_by(name: str, call_id: str = "call-1") -> History:
    """A history that took the resource lock and ended its hold with ``name``."""
    h = authorized_history()
    if name == "GateRefused":
        return History(call_id=call_id).normalized().decided("allow").add(
            GateRefused, reason="gate.policy-changed", gate_facts={})
    if name == "Withdrawn":
        return History().normalized().decided("allow").add(Withdrawn, by="r", why="")
    if name == "ProcessingAbandoned":  # the gate gave up on an allowed intent it had locked
        return History().normalized().decided("allow").add(
            ProcessingAbandoned, durable="executor-gate", trigger="t", cause="boom",
            deliveries=5)
    h.add(AttemptSent, attempt_id="a1")
    if name == "EffectCompleted":
        return h.add(EffectCompleted, attempt_id="a1", receipt={}, result={},
                     provenance={})
    if name == "AttemptRejected":
        return h.add(AttemptRejected, attempt_id="a1", reason="case.closed", detail="")
    if name == "AttemptInterrupted":
        h.add(InterruptionRequested, attempt_id="a1", by="r", why="")
        return h.add(AttemptInterrupted, attempt_id="a1", detail="")
    h.add(OutcomeUnknown, attempt_id="a1", evidence="silence")
    return h.add(Reconciled, attempt_id="a1", finding="confirmed", receipt={},
                 by="reconciler", why="found", resolution="completed")


@pytest.mark.parametrize("name", [e.__name__ for e in ENDS_HOLD_ELSEWHERE])
async def test_a_lock_left_by_a_crash_right_after_the_append_is_released_from_the_record(
    ports: MemoryPorts, name: str
) -> None:
    """The executor died after appending ``name`` and before freeing the lock: a restarted
    one (nothing in memory) releases it when its lock durable delivers the event."""
    h = ended_by(name)
    last = await store_history(ports, h)
    assert last.event_type == name
    await ports.locks.take(LOCK, h.intent_id.encode())
    await executor_handlers(ports).settled(last)
    assert await ports.locks.holder(LOCK) is None


#: The report each attempt's end was appended on (what the reports' durable hands again).
ENDED_ON: dict[str, AttemptReport] = {
    "EffectCompleted": AttemptReport(tenant="tenant-a", intent_id="", attempt_id="a1",
                                     stage=ReportStage.COMPLETED),
    "AttemptRejected": AttemptReport(tenant="tenant-a", intent_id="", attempt_id="a1",
                                     stage=ReportStage.REJECTED, reason="case.closed"),
    "AttemptInterrupted": AttemptReport(tenant="tenant-a", intent_id="", attempt_id="a1",
                                        stage=ReportStage.INTERRUPTED),
}


@pytest.mark.parametrize("name", [e.__name__ for e in ENDS_HOLD_BY_TRIGGER])
async def test_a_lock_left_by_a_crash_right_after_the_append_is_released_by_the_trigger_again(
    ports: MemoryPorts, name: str
) -> None:
    """The executor died after appending ``name`` and before freeing the lock, so the trigger
    it was handling was never acknowledged: a restarted one (nothing in memory), handed it
    again, finds the hold ended on the record and frees the lock."""
    h = ended_by(name, call_id=f"call-{name}")
    last = await store_history(ports, h)
    assert last.event_type == name
    await ports.locks.take(LOCK, h.intent_id.encode())
    executor = executor_handlers(ports)
    if name == "GateRefused":
        stored = await ports.store.load("tenant-a", h.intent_id)
        await executor.ready(next(e for e in stored.events if e.event_type == "PolicyDecided"))
    else:
        await deliver(executor, signed(msgspec.structs.replace(ENDED_ON[name], intent_id=h.intent_id)))
    assert await ports.locks.holder(LOCK) is None


async def test_an_event_that_leaves_the_hold_in_place_keeps_the_lock(ports: MemoryPorts) -> None:
    h = authorized_history()
    h.add(AttemptSent, attempt_id="a1")
    h.add(OutcomeUnknown, attempt_id="a1", evidence="silence")
    h.add(Reconciled, attempt_id="a1", finding="absent", receipt={}, by="reconciler",
          why="absent", resolution="retry")
    last = await store_history(ports, h)
    await ports.locks.take(LOCK, h.intent_id.encode())
    await ports.locks.take("tenant-a.case.other", b"someone-else")
    executor = executor_handlers(ports)
    await executor.settled(last)  # allowed again: the same intent tries again under its lock
    assert await ports.locks.holder(LOCK) == h.intent_id.encode()
    done = await store_history(ports, ended_by("GateRefused", call_id="call-2"))
    await executor.settled(done)  # another intent's end never frees a lock it does not hold
    assert await ports.locks.holder("tenant-a.case.other") == b"someone-else"


async def test_the_gate_frees_a_lock_it_took_for_an_intent_withdrawn_meanwhile(
    ports: MemoryPorts,
) -> None:
    """Taken, then the append lost to a Withdrawn: the lock durable may have seen that
    Withdrawn before the lock existed, so the gate itself lets go."""
    h = History(contract_revision=CONTRACT.revision).normalized(
        contract_revision=CONTRACT.revision).decided("allow")
    last = await store_history(ports, h)

    async def facts(_: FactsRequest) -> Facts:
        assert await ports.locks.holder(LOCK) == h.intent_id.encode()  # held, under the lock
        stored = await ports.store.load("tenant-a", h.intent_id)
        await ports.store.append(stored, [encode_event(Withdrawn.next(
            h.intent, Stamp(now=T0, event_id="w1", causation_id="w"), by="runtime", why=""))])
        return Facts(facts=OPEN_FACTS, revision="4")

    ports.adapters.facts_answer = facts
    await executor_handlers(ports).ready(last)
    intent = await ports.intents.load("tenant-a", h.intent_id)
    assert intent is not None and intent.state is State.WITHDRAWN
    assert await ports.locks.holder(LOCK) is None
    assert ports.orders.sent == []


class OldViews:
    """The store as a replica behind the leader shows it: each ``load`` answers with the
    history cut after the next of ``cuts`` events (none left: whole); ``load_latest``, the
    leader's answer, is whole."""

    def __init__(self, store: EventStore, cuts: list[int]) -> None:
        self._store = store
        self._cuts = cuts

    async def load(self, tenant: str, intent_id: str, *, at_least: int = 0) -> AggregateHistory:
        whole = await self._store.load(tenant, intent_id, at_least=at_least)
        cut = self._cuts.pop(0) if self._cuts else len(whole.events)
        return dataclasses.replace(whole, events=whole.events[:cut])

    async def load_latest(self, tenant: str, intent_id: str) -> AggregateHistory:
        return await self._store.load_latest(tenant, intent_id)

    async def append(self, history: AggregateHistory, events: Sequence[NewEvent]) -> AggregateHistory:
        return await self._store.append(history, events)


def on_old_views(ports: MemoryPorts, cuts: list[int]) -> ExecutorHandlers:
    """An executor (nothing in memory) whose loads answer as ``OldViews`` does."""
    old = OldViews(ports.store, cuts)
    return executor_handlers(dataclasses.replace(ports, intents=StoredIntents(old, ports.intents.cache)))


def serialized(*, completed: bool) -> History:
    """case.add_note as registered (its contract serializes each case), allowed, its
    attempt sent and, if ``completed``, completed."""
    h = History(contract_revision=CONTRACT.revision).normalized(
        contract_revision=CONTRACT.revision).decided("allow")
    h.add(ExecutionAuthorized, attempt_id="a1", intent_key="k1", digest="sha256:d1",
          policy_revision="p", contract_revision=CONTRACT.revision, gate_facts={},
          deadline_at=T0 + timedelta(seconds=30))
    h.add(AttemptSent, attempt_id="a1")
    if completed:
        h.add(EffectCompleted, attempt_id="a1", receipt={}, result={}, provenance={})
    return h


async def gate_again(ports: MemoryPorts, executor: ExecutorHandlers, h: History,
                     deliveries: int = 1) -> int:
    """Hand ``executor`` the gate's trigger of ``h`` (its ``deliveries``-th delivery); return
    how often the facts were asked for."""
    trigger = await store_with_trigger(ports, h)
    asked = len(ports.adapters.asked_for("facts"))
    with contextlib.suppress(AttemptDue):
        await executor.ready(trigger, deliveries)
    return len(ports.adapters.asked_for("facts")) - asked


async def test_a_lock_taken_on_an_old_view_of_an_intent_that_ended_is_freed(ports: MemoryPorts) -> None:
    """The trigger comes back at its attempt's deadline, long after the effect completed
    and its lock was freed, to a replica whose views are behind the leader: one shows the
    intent allowed (so the gate takes the lock and authorizes), the one after the conflict
    shows it sent. The lock is this intent's to keep only if the leader says so; it does not."""
    h = serialized(completed=True)
    await gate_again(ports, on_old_views(ports, [3, 5]), h)
    assert await ports.locks.holder(LOCK) is None
    stored = await stored_types(ports, h)
    assert stored.count("ExecutionAuthorized") == 1 and stored[-1] == "EffectCompleted"


async def test_a_trigger_handed_again_is_decided_on_the_leaders_record(ports: MemoryPorts) -> None:
    """The timer comes back to a replica whose view shows the intent allowed; the effect
    completed long ago. Decided on the leader's record, the gate takes no lock and asks
    no adapter for facts."""
    h = serialized(completed=True)
    assert await gate_again(ports, on_old_views(ports, [3]), h, deliveries=2) == 0
    assert await ports.locks.holder(LOCK) is None


async def test_a_lock_another_delivery_holds_for_the_same_attempt_is_kept(ports: MemoryPorts) -> None:
    """The same old views, but the leader has the attempt in flight: its lock stays."""
    h = serialized(completed=False)
    await ports.locks.take(LOCK, h.intent_id.encode())
    await gate_again(ports, on_old_views(ports, [3, 5]), h)
    assert await ports.locks.holder(LOCK) == h.intent_id.encode()


async def test_a_trigger_handed_again_frees_a_lock_left_with_an_intent_that_ended(
    ports: MemoryPorts,
) -> None:
    """A delivery took the lock on an old view and died (or failed) before letting go; the
    effect had settled. The trigger handed again finds the intent ended and frees the lock."""
    h = serialized(completed=True)
    await ports.locks.take(LOCK, h.intent_id.encode())
    await gate_again(ports, executor_handlers(ports), h)
    assert await ports.locks.holder(LOCK) is None


async def test_a_report_without_a_valid_token_is_refused_on_the_record(ports: MemoryPorts) -> None:
    h = authorized_history()
    h.add(AttemptSent, attempt_id="a1")
    await store_history(ports, h)
    await deliver(executor_handlers(ports), AttemptReport(
        tenant="tenant-a", intent_id=h.intent_id, attempt_id="a1", stage=ReportStage.COMPLETED,
        token="forged"))
    intent = await ports.intents.load("tenant-a", h.intent_id)
    assert intent is not None and intent.state is State.SENT
    assert (await stored_types(ports, h))[-1] == "ReportRefused"
