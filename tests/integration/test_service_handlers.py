"""Service handlers against a real broker and store, with scripted adapters.

Each test builds a history in the JetStream store, runs one handler as its consumer
would, and reads back what was appended.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import datetime, timedelta

import msgspec
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig
from nats.js.errors import KeyNotFoundError, NoKeysError, NotFoundError
from nats.js.kv import KeyValue

from lockgate.adapters.client import AdapterUnavailable
from lockgate.approval.handlers import ApprovalHandlers
from lockgate.authz.source import BundleSource
from lockgate.client.sdk import Gateway, OutcomeSettled
from lockgate.contracts import subjects
from lockgate.contracts.messages import (
    AttemptReport,
    Claim,
    ClaimAnswer,
    Describe,
    ExecutionOrder,
    NotResolved,
    OpenRun,
    QueryResult,
    Recorded,
    ResolveOutcome,
    RunOpened,
    TurnOpened,
    Withdraw,
)
from lockgate.contracts.responses import ModelResponse
from lockgate.core.ids import derived_id, random_id
from lockgate.eventstore.base import AggregateHistory, EventStore, NewEvent, RecordedEvent
from lockgate.eventstore.jetstream import JetStreamEventStore
from lockgate.eventstore.jetstream import recorded_event as stored
from lockgate.executor.domain import order_for, report_token
from lockgate.executor.handlers import AttemptDue, ExecutorHandlers
from lockgate.intake.handlers import IntakeHandlers
from lockgate.intent.aggregate import EffectIntent, Stamp, State
from lockgate.intent.codec import encode_event
from lockgate.normalization.handlers import GIVE_UP_AFTER, NormalizationHandlers
from lockgate.policy.handlers import (
    CARRIED_FACTS_FRESH_S,
    CLOCK_SKEW_S,
    PAUSE_AFTER,
    PolicyHandlers,
)
from lockgate.reconciler.handlers import ReconcilerHandlers
from lockgate.runtime.consumer import Delivery
from lockgate.runtime.context import Ports, ports_for
from lockgate.runtime.intents import load_intent
from lockgate.runtime.ports.intents import StoredIntents
from lockgate.runtime.ports.runs import KvRuns
from lockgate.runtime.service import Retry, settle
from lockgate.runtime.settings import Settings
from lockgate.runtime.specs import ENDS_HOLD_BY_TRIGGER, ENDS_HOLD_ELSEWHERE
from lockgate.runtime.topology import CAPABILITIES_BUCKET, LOCKS_BUCKET, RUNS_BUCKET
from lockgate.testing.intents import T0, History
from lockgate.worlds.casenotes.adapter import CONTRACT
from lockgate.worlds.items.adapter import PUBLISH_CONTRACT

SETTINGS = Settings(adapter_timeout_s=0.3, manage_topology=True)
BUNDLES = BundleSource(SETTINGS.policy_dir)
#: The executor's report-token key in these tests.
KEY = b"k" * 32
#: The case-notes world's facts about an open case the actor may write to.
OPEN_FACTS: dict[str, str | int | bool] = {
    "exists": True, "tenant": "tenant-a", "status": "open", "writes_suspended": False,
    "actor_may_add_note": True, "sensitive": False, "version": 4}


def executor_handlers(ports: Ports) -> ExecutorHandlers:
    return ExecutorHandlers(ports, BUNDLES, lambda: T0, report_key=KEY)


def signed(report: AttemptReport) -> AttemptReport:
    """``report`` with the token its order carried (as the adapter SDK echoes it)."""
    return msgspec.structs.replace(report, token=report_token(
        KEY, report.tenant, report.intent_id, report.attempt_id, "case.add_note"))


async def deliver(executor: ExecutorHandlers, report: AttemptReport,
                  subject: str | None = None) -> None:
    """Hand ``report`` to the executor as its report consumer would."""
    await executor.report(msgspec.json.encode(report),
                          subject or f"lg.report.case.add_note.{report.intent_id}", 1)


@pytest.fixture
async def ports(nc: Client) -> AsyncIterator[Ports]:
    js = nc.jetstream()
    with contextlib.suppress(NotFoundError):
        await js.delete_stream("LG_EVENTS")  # every test starts from an empty store
    made = await ports_for(nc, SETTINGS)
    # Most tests use History()'s one intent id. On a loaded machine the deleted stream was
    # seen still answering a direct get of it after the new one was made (the last test's
    # events loaded, then the append conflicted with the empty stream): wait until the
    # store reads the new stream (asked by a store of its own: a store keeps what it loaded).
    probe = JetStreamEventStore(nc, partitions=SETTINGS.partitions)
    for _ in range(200):
        if not (await probe.load("tenant-a", History().intent_id)).events:
            break
        await asyncio.sleep(0.05)
    else:
        pytest.fail("the deleted events stream still answers")
    yield made


async def bucket(ports: Ports, name: str) -> KeyValue:
    """A bucket itself, as another process (or a test) sees it."""
    return await ports.js.key_value(name)


async def store_history(ports: Ports, h: History) -> RecordedEvent:
    """Append ``h`` and return its last event as stored (what a consumer is handed)."""
    history = await ports.store.load("tenant-a", h.intent_id)
    history = await ports.store.append(history, [encode_event(e) for e in h.events])
    return history.events[-1]


async def answering(nc: Client, verb: str, answer: Callable[[bytes], Awaitable[object]]) -> object:
    async def reply(msg: Msg) -> None:
        await msg.respond(msgspec.json.encode(await answer(msg.data)))

    return await nc.subscribe(f"lg.adapter.case.add_note.{verb}", cb=reply)


def unknown_history() -> History:
    h = History().normalized().decided("allow")
    h.add(EffectIntent.ExecutionAuthorized, attempt_id="a1", intent_key="k1", digest="sha256:d1",
          policy_revision="p", contract_revision="rev-1", gate_facts={}, deadline_at=T0)
    h.add(EffectIntent.AttemptSent, attempt_id="a1")
    return h.add(EffectIntent.OutcomeUnknown, attempt_id="a1", evidence="silence")


async def register(ports: Ports) -> None:
    kv = await ports.js.key_value(CAPABILITIES_BUCKET)
    await kv.put(CONTRACT.name, msgspec.json.encode(Describe(contract=CONTRACT, adapter="absent")))


# case.add_note's recovery allows the same intent again once its note is proven absent.
@pytest.mark.parametrize(("finding", "state"), [("found", State.COMPLETED), ("absent", State.ALLOWED)])
async def test_reconciler_records_what_the_query_found(ports: Ports, nc: Client, finding: str,
                                                       state: State) -> None:
    await register(ports)
    last = await store_history(ports, unknown_history())
    queries: list[bytes] = []

    async def answer(data: bytes) -> QueryResult:
        queries.append(data)
        return QueryResult(finding=finding, receipt={"note_id": "n1"} if finding == "found" else {})

    sub = await answering(nc, "query", answer)
    try:
        await ReconcilerHandlers(ports, lambda: T0).unknown(last, deliveries=1)
    finally:
        await sub.unsubscribe()  # type: ignore[attr-defined]
    intent = await load_intent(ports.store, "tenant-a", last.intent_id)
    assert intent is not None and intent.state is state
    assert b'"intent_key":"k1"' in queries[0]  # asked by the intent's identity


async def test_reconciler_waits_when_nobody_answers(ports: Ports) -> None:
    last = await store_history(ports, unknown_history())
    with pytest.raises(Retry):
        await ReconcilerHandlers(ports, lambda: T0).unknown(last, deliveries=3)
    intent = await load_intent(ports.store, "tenant-a", last.intent_id)
    assert intent is not None and intent.state is State.UNKNOWN


async def test_normalization_retries_then_gives_up_as_unavailable(ports: Ports) -> None:
    await register(ports)
    h = History(contract_revision=CONTRACT.revision)
    last = await store_history(ports, h)
    handlers = NormalizationHandlers(ports, lambda: T0)
    with pytest.raises(AdapterUnavailable):  # no adapter answers: nak and try again
        await handlers.received(last, deliveries=1)
    assert (await load_intent(ports.store, "tenant-a", h.intent_id)).state is State.PROPOSED  # type: ignore[union-attr]
    await handlers.received(last, deliveries=GIVE_UP_AFTER)
    intent = await load_intent(ports.store, "tenant-a", h.intent_id)
    assert intent is not None and intent.state is State.REJECTED
    assert intent.reason == "capability.unavailable"


async def test_normalization_records_the_facts_answered_with_it(ports: Ports, nc: Client) -> None:
    await register(ports)
    h = History(contract_revision=CONTRACT.revision)
    last = await store_history(ports, h)
    asked: list[dict[str, object]] = []

    async def normalize(data: bytes) -> object:
        asked.append(msgspec.json.decode(data))
        return {"arguments": {"case_id": "case-123", "note": "hello"},
                "resource": {"type": "case", "id": "case-123", "tenant": "tenant-a"},
                "destination": "case-notes:tenant-a/case-123",
                "facts": {"facts": OPEN_FACTS, "revision": "4"}}

    sub = await answering(nc, "normalize", normalize)
    try:
        await NormalizationHandlers(ports, lambda: T0).received(last, deliveries=1)
    finally:
        await sub.unsubscribe()  # type: ignore[attr-defined]
    assert [a["with_facts"] for a in asked] == [True]
    intent = await load_intent(ports.store, "tenant-a", h.intent_id)
    assert intent is not None and intent.state is State.NORMALIZED
    assert intent.normalized_facts == OPEN_FACTS


async def test_policy_decides_on_the_facts_answered_with_the_normalization(ports: Ports) -> None:
    # No adapter answers facts here: a policy that asked would be told it is unavailable.
    h = History().normalized(facts=OPEN_FACTS)
    last = await store_history(ports, h)
    await PolicyHandlers(ports, BUNDLES, lambda: T0 + timedelta(seconds=2)).normalized(last, deliveries=1)
    intent = await load_intent(ports.store, "tenant-a", h.intent_id)
    assert intent is not None and intent.state is State.ALLOWED and intent.facts == OPEN_FACTS


# Normalized at T0 + 1 s: long before policy's clock, or stamped ahead of it (skew).
@pytest.mark.parametrize("policy_at", [
    T0 + timedelta(seconds=1 + CARRIED_FACTS_FRESH_S + 1),
    T0 + timedelta(seconds=1) - timedelta(seconds=CLOCK_SKEW_S + 1),
], ids=["old", "ahead"])
async def test_policy_asks_again_for_facts_it_cannot_date(ports: Ports, nc: Client,
                                                          policy_at: datetime) -> None:
    h = History().normalized(facts={**OPEN_FACTS, "version": 3})
    last = await store_history(ports, h)
    asked: list[bytes] = []

    async def facts(data: bytes) -> object:
        asked.append(data)
        return {"facts": OPEN_FACTS, "revision": "4"}

    sub = await answering(nc, "facts", facts)
    try:
        await PolicyHandlers(ports, BUNDLES, lambda: policy_at).normalized(last, deliveries=1)
    finally:
        await sub.unsubscribe()  # type: ignore[attr-defined]
    intent = await load_intent(ports.store, "tenant-a", h.intent_id)
    assert len(asked) == 1
    assert intent is not None and intent.state is State.ALLOWED and intent.facts["version"] == 4


async def test_policy_pauses_when_facts_never_come(ports: Ports) -> None:
    await register(ports)  # offered, and its adapter silent
    h = History().normalized()
    last = await store_history(ports, h)
    handlers = PolicyHandlers(ports, BUNDLES, lambda: T0)
    with pytest.raises(AdapterUnavailable):
        await handlers.normalized(last, deliveries=1)
    assert (await load_intent(ports.store, "tenant-a", h.intent_id)).state is State.NORMALIZED  # type: ignore[union-attr]
    await handlers.normalized(last, deliveries=PAUSE_AFTER)
    intent = await load_intent(ports.store, "tenant-a", h.intent_id)
    assert intent is not None and intent.state is State.PAUSED and intent.reason == "facts.unavailable"


async def test_review_expires_at_its_deadline_not_before(ports: Ports) -> None:
    h = History().normalized().decided("require_approval")
    h.add(EffectIntent.ReviewRequested, review_id="r1", digest="sha256:d1", policy_revision="p",
          contract_revision="rev-1", summary="s", expires_at=T0 + timedelta(seconds=60))
    last = await store_history(ports, h)
    early = ApprovalHandlers(ports, lambda: T0 + timedelta(seconds=30), review_ttl_s=60)
    with pytest.raises(Retry) as timer:
        await early.review_opened(last)
    assert 29 < timer.value.delay_s < 31
    late = ApprovalHandlers(ports, lambda: T0 + timedelta(seconds=61), review_ttl_s=60)
    await late.review_opened(last)
    intent = await load_intent(ports.store, "tenant-a", h.intent_id)
    assert intent is not None and intent.state is State.DENIED and intent.reason == "review.expired"


async def paused_history(ports: Ports) -> tuple[History, RecordedEvent]:
    await register(ports)  # the capability is still offered: only the evidence is missing
    h = History().normalized()
    await store_history(ports, h)
    handlers = PolicyHandlers(ports, BUNDLES, lambda: T0)
    last = (await ports.store.load("tenant-a", h.intent_id)).events[-1]
    await handlers.normalized(last, deliveries=PAUSE_AFTER)
    paused = (await ports.store.load("tenant-a", h.intent_id)).events[-1]
    assert paused.event_type == "PolicyDecided"
    return h, paused


async def test_a_pause_is_decided_again_when_the_evidence_arrives(ports: Ports, nc: Client) -> None:
    h, paused = await paused_history(ports)
    handlers = PolicyHandlers(ports, BUNDLES, lambda: T0 + timedelta(seconds=5))
    with pytest.raises(Retry):  # still no facts: wait and ask again
        await handlers.paused(paused)

    async def facts(_: bytes) -> object:
        return {"facts": OPEN_FACTS, "revision": "4"}

    sub = await answering(nc, "facts", facts)
    try:
        await handlers.paused(paused)
    finally:
        await sub.unsubscribe()  # type: ignore[attr-defined]
    intent = await load_intent(ports.store, "tenant-a", h.intent_id)
    assert intent is not None and intent.state is State.ALLOWED and intent.decision == "allow"


async def test_a_pause_without_evidence_times_out_into_a_denial(ports: Ports) -> None:
    h, paused = await paused_history(ports)
    timeout_s = BUNDLES.current().config.pause.timeout_s
    late = PolicyHandlers(ports, BUNDLES, lambda: T0 + timedelta(seconds=timeout_s + 1))
    await late.paused(paused)
    intent = await load_intent(ports.store, "tenant-a", h.intent_id)
    assert intent is not None and intent.state is State.DENIED and intent.reason == "policy.pause-expired"


async def test_a_turn_offers_only_capabilities_whose_adapter_is_alive(ports: Ports) -> None:
    kv = await ports.js.key_value(CAPABILITIES_BUCKET)
    with contextlib.suppress(NoKeysError):
        for key in await kv.keys():
            await kv.delete(key)
    stale = T0 - timedelta(seconds=60)
    await kv.put("case.add_note", msgspec.json.encode(Describe(CONTRACT, "casenotes", alive_at=T0)))
    await kv.put("item.publish", msgspec.json.encode(Describe(PUBLISH_CONTRACT, "items", alive_at=stale)))
    intake = IntakeHandlers(ports, SETTINGS, lambda: T0 + timedelta(seconds=2))
    opened = msgspec.json.decode(
        await intake.open_run("tenant-a", msgspec.json.encode(OpenRun(tenant="tenant-a", actor="user-42"))),
        type=RunOpened)
    turn = msgspec.json.decode(await intake.open_turn("tenant-a", opened.run_id, b"{}"), type=TurnOpened)
    assert [t.name for t in turn.tools] == ["case.add_note"]  # the items adapter went quiet


async def test_a_turn_opened_again_under_its_id_answers_with_its_first_snapshot(ports: Ports) -> None:
    """A turn is one snapshot: opening it again (a retry whose answer was lost, another
    intake) answers with the catalogue it was opened with, so intake may keep it."""
    kv = await ports.js.key_value(CAPABILITIES_BUCKET)
    with contextlib.suppress(NoKeysError):
        for key in await kv.keys():
            await kv.delete(key)
    await kv.put("case.add_note", msgspec.json.encode(Describe(CONTRACT, "casenotes", alive_at=T0)))
    intake = IntakeHandlers(ports, SETTINGS, lambda: T0 + timedelta(seconds=2))
    opened = msgspec.json.decode(
        await intake.open_run("tenant-a", msgspec.json.encode(OpenRun(tenant="tenant-a", actor="user-42"))),
        type=RunOpened)
    first = msgspec.json.decode(
        await intake.open_turn("tenant-a", opened.run_id, b'{"turn_id": "turn-7"}'), type=TurnOpened)
    await kv.put("item.publish", msgspec.json.encode(Describe(PUBLISH_CONTRACT, "items", alive_at=T0)))
    other = IntakeHandlers(ports, SETTINGS, lambda: T0 + timedelta(seconds=2))  # a replica
    again = msgspec.json.decode(
        await other.open_turn("tenant-a", opened.run_id, b'{"turn_id": "turn-7"}'), type=TurnOpened)
    assert again == first and [t.name for t in again.tools] == ["case.add_note"]
    fresh = msgspec.json.decode(await other.open_turn("tenant-a", opened.run_id, b"{}"), type=TurnOpened)
    assert sorted(t.name for t in fresh.tools) == ["case.add_note", "item.publish"]


async def test_withdrawing_a_sent_attempt_asks_its_adapter_to_stop(ports: Ports, nc: Client) -> None:
    h = History().normalized().decided("allow")
    h.add(EffectIntent.ExecutionAuthorized, attempt_id="a1", intent_key="k1", digest="sha256:d1",
          policy_revision="p", contract_revision="rev-1", gate_facts={}, deadline_at=T0)
    h.add(EffectIntent.AttemptSent, attempt_id="a1")
    await store_history(ports, h)
    heard = await nc.subscribe("lg.interrupt.case.add_note")
    executor = executor_handlers(ports)
    subject = subjects.withdraw("tenant-a", h.intent.run_id, h.intent_id, "agent-tenant-a")
    reply = await executor.withdraw(subject, msgspec.json.encode(Withdraw(why="the user stopped")))
    view = msgspec.json.decode(reply, type=ModelResponse)
    assert view.status == "interruption_requested"
    msg = await heard.next_msg(timeout=2)
    assert msgspec.json.decode(msg.data) == {"intent_id": h.intent_id, "attempt_id": "a1"}
    await heard.unsubscribe()


def authorized_history() -> History:
    h = History().normalized().decided("allow")
    return h.add(EffectIntent.ExecutionAuthorized, attempt_id="a1", intent_key="k1",
                 digest="sha256:d1", policy_revision="p", contract_revision="rev-1",
                 gate_facts={}, deadline_at=T0 + timedelta(seconds=30))


async def test_withdrawing_a_dispatched_attempt_is_a_request_until_the_adapter_refuses(
    ports: Ports,
) -> None:
    h = authorized_history()
    await store_history(ports, h)
    executor = executor_handlers(ports)
    withdraw = msgspec.json.encode(Withdraw(why="changed my mind"))
    subject = subjects.withdraw("tenant-a", h.intent.run_id, h.intent_id, "agent-tenant-a")

    first = msgspec.json.decode(await executor.withdraw(subject, withdraw),
                                type=ModelResponse)
    assert (first.status, first.code) == ("withdrawal_requested", "operation.withdrawal-requested")
    again = msgspec.json.decode(await executor.withdraw(subject, withdraw),
                                type=ModelResponse)
    assert again.status == "withdrawal_requested"  # recorded once

    refused = AttemptReport(tenant="tenant-a", intent_id=h.intent_id, attempt_id="a1",
                            stage="withdrawn", reason="order.withdrawn")
    await deliver(executor, signed(refused))
    intent = await load_intent(ports.store, "tenant-a", h.intent_id)
    assert intent is not None and intent.state is State.WITHDRAWN
    final = msgspec.json.decode(await executor.withdraw(subject, withdraw),
                                type=ModelResponse)
    assert (final.status, final.code) == ("withdrawn", "proposal.withdrawn")
    stored = [e.event_type for e in (await ports.store.load("tenant-a", h.intent_id)).events]
    assert stored[-2:] == ["WithdrawalRequested", "Withdrawn"]


def order_of(h: History) -> ExecutionOrder:
    """The order the executor dispatched for ``h``'s authorized attempt."""
    intent = h.intent
    authorized = next(e for e in h.events if isinstance(e, EffectIntent.ExecutionAuthorized))
    order = order_for(intent, authorized, key=KEY)
    assert order is not None
    return order


async def test_a_claim_after_a_withdrawal_request_is_refused_and_the_intent_withdrawn(
    ports: Ports,
) -> None:
    h = authorized_history()
    order = order_of(h)
    h.add(EffectIntent.WithdrawalRequested, attempt_id="a1", by="runtime", why="")
    await store_history(ports, h)
    await (await bucket(ports, LOCKS_BUCKET)).put(LOCK, h.intent_id.encode())
    executor = executor_handlers(ports)
    answer = msgspec.json.decode(await executor.claim(
        "lg.claim.case.add_note", msgspec.json.encode(Claim(order=order, claimant="w1"))),
        type=ClaimAnswer)
    assert (answer.verdict, answer.reason) == ("refused", "order.withdrawn")
    intent = await load_intent(ports.store, "tenant-a", h.intent_id)
    assert intent is not None and intent.state is State.WITHDRAWN
    with pytest.raises(KeyNotFoundError):  # the withdrawal ended the hold: the lock is free
        await (await bucket(ports, LOCKS_BUCKET)).get(LOCK)


async def test_a_claim_the_executor_grants_is_on_the_record_before_the_answer(ports: Ports) -> None:
    await register(ports)
    h = authorized_history()
    await store_history(ports, h)
    executor = executor_handlers(ports)
    body = msgspec.json.encode(Claim(order=order_of(h), claimant="w1"))
    answer = msgspec.json.decode(await executor.claim("lg.claim.case.add_note", body), type=ClaimAnswer)
    assert answer.verdict == "crossed"
    intent = await load_intent(ports.store, "tenant-a", h.intent_id)
    assert intent is not None and intent.state is State.SENT
    assert intent.attempt("a1").claimant == "w1"
    rival = msgspec.json.encode(Claim(order=order_of(h), claimant="w2"))
    refused = msgspec.json.decode(await executor.claim("lg.claim.case.add_note", rival), type=ClaimAnswer)
    # case.add_note's remote deduplicates by the intent key: a second writer changes nothing
    assert CONTRACT.idempotency is not None and refused.verdict == "crossed"


def authorized_on_its_trigger(attempt_id: str = "a1", *, call_id: str = "call-1") -> History:
    """Policy allowed, and the gate authorized ``attempt_id`` on that decision (its trigger)."""
    h = History(call_id=call_id).normalized().decided("allow")
    trigger = h.events[-1].event_id
    return h.extend([EffectIntent.ExecutionAuthorized.next(
        h.intent, Stamp(now=T0, event_id=derived_id("gate", trigger), causation_id=trigger),
        attempt_id=attempt_id, intent_key="k1", digest="sha256:d1", policy_revision="p",
        contract_revision="rev-1", gate_facts={}, deadline_at=T0 + timedelta(seconds=30))])


async def store_with_trigger(ports: Ports, h: History) -> RecordedEvent:
    """Store ``h``; return its ``PolicyDecided`` as stored (what the gate's durable is handed)."""
    await store_history(ports, h)
    stored = await ports.store.load("tenant-a", h.intent_id)
    return next(e for e in stored.events if e.event_type == "PolicyDecided")


async def test_the_trigger_of_an_open_attempt_comes_back_at_its_deadline(ports: Ports) -> None:
    """The gate's trigger is its attempt's timer: asked for again until the deadline, where
    the attempt still open becomes OutcomeUnknown; after that it is settled for good."""
    h = authorized_on_its_trigger(f"a-{random_id()[:8]}", call_id=f"call-{random_id()[:8]}")
    trigger = await store_with_trigger(ports, h)
    now = [T0]
    executor = ExecutorHandlers(ports, BUNDLES, lambda: now[0], report_key=KEY)
    executor._sent[h.intent.attempts[0].attempt_id] = None  # its order went out
    with pytest.raises(AttemptDue) as due:
        await executor.ready(trigger)
    assert 29.9 < due.value.delay_s <= 30.1
    now[0] = T0 + timedelta(seconds=31)
    await executor.ready(trigger)  # due: silence is an unknown outcome
    intent = await load_intent(ports.store, "tenant-a", h.intent_id)
    assert intent is not None and intent.state is State.UNKNOWN
    await executor.ready(trigger)  # once
    stored = [e.event_type for e in (await ports.store.load("tenant-a", h.intent_id)).events]
    assert stored.count("OutcomeUnknown") == 1


async def timer_of(ports: Ports, nc: Client, h: History, durable: str) -> Msg:
    """The trigger of ``h``'s attempt, handed by a durable of the test's own, as the gate's is."""
    await store_history(ports, h)
    await ports.js.add_consumer("LG_EVENTS", ConsumerConfig(
        durable_name=durable, ack_policy=AckPolicy.EXPLICIT, ack_wait=60,
        filter_subject=f"lg.evt.tenant-a.{h.intent_id}.*.PolicyDecided.*"))
    sub = await ports.js.pull_subscribe_bind(durable, "LG_EVENTS")
    (msg,) = await sub.fetch(1, timeout=5)
    return msg


async def test_the_attempts_timer_is_acknowledged_when_its_report_ends_the_intent_here(
    ports: Ports, nc: Client,
) -> None:
    """The process that holds an attempt's timer records its completion: the timer is
    acknowledged then, not handed back at the deadline to find nothing to do."""
    attempt = f"a-{random_id()[:8]}"
    h = authorized_on_its_trigger(attempt, call_id=f"call-{attempt}")
    durable = f"gate-{random_id()[:8]}"
    msg = await timer_of(ports, nc, h, durable)
    executor = executor_handlers(ports)
    executor._sent[attempt] = None  # its order went out
    outcome = await settle(Delivery(msg), executor.ready(stored(msg.subject, msg.headers or {}, msg.data,
                           int(msg.metadata.sequence.stream)), timer=msg.reply), logging.getLogger("t"))
    assert outcome == "timer"
    assert (await ports.js.consumer_info("LG_EVENTS", durable)).num_ack_pending == 1
    await deliver(executor, signed(AttemptReport(tenant="tenant-a", intent_id=h.intent_id,
                                                 attempt_id=attempt, stage="completed")))
    intent = await load_intent(ports.store, "tenant-a", h.intent_id)
    assert intent is not None and intent.state is State.COMPLETED
    await nc.flush()
    assert (await ports.js.consumer_info("LG_EVENTS", durable)).num_ack_pending == 0


async def test_a_report_the_timer_holder_did_not_record_leaves_the_timer_to_run_out(
    ports: Ports, nc: Client,
) -> None:
    """Another replica recorded the completion: the timer comes back at its deadline as before
    (and finds nothing to do)."""
    attempt = f"a-{random_id()[:8]}"
    h = authorized_on_its_trigger(attempt, call_id=f"call-{attempt}")
    durable = f"gate-{random_id()[:8]}"
    msg = await timer_of(ports, nc, h, durable)
    holder, other = executor_handlers(ports), executor_handlers(ports)
    holder._sent[attempt] = None
    with pytest.raises(AttemptDue):
        await holder.ready(stored(msg.subject, msg.headers or {}, msg.data, int(msg.metadata.sequence.stream)),
                           timer=msg.reply)
    await msg.nak(delay=30)
    await deliver(other, signed(AttemptReport(tenant="tenant-a", intent_id=h.intent_id,
                                              attempt_id=attempt, stage="completed")))
    await nc.flush()
    assert (await ports.js.consumer_info("LG_EVENTS", durable)).num_ack_pending == 1


async def test_a_report_recorded_before_the_gate_finished_leaves_nothing_to_time(ports: Ports) -> None:
    """The adapter answered so fast that its report was recorded here while the gate was
    still finishing: the trigger is not kept as a timer at all."""
    attempt = f"a-{random_id()[:8]}"
    h = authorized_on_its_trigger(attempt, call_id=f"call-{attempt}")
    trigger = await store_with_trigger(ports, h)
    executor = executor_handlers(ports)
    executor._sent[attempt] = None
    executor._ended[attempt] = None  # what the report handler notes
    await executor._time(trigger, h.intent, timer="$JS.ACK.x")  # no AttemptDue


async def test_a_trigger_handed_again_sends_no_order_once_a_withdrawal_was_requested(
    ports: Ports,
) -> None:
    h = authorized_on_its_trigger()
    trigger = await store_with_trigger(ports, h)
    stored = await ports.store.load("tenant-a", h.intent_id)
    await ports.store.append(stored, [encode_event(EffectIntent.WithdrawalRequested.next(
        h.intent, Stamp(now=T0, event_id="w1", causation_id="w"), attempt_id="a1", by="runtime",
        why=""))])
    await ports.js.purge_stream("LG_EXEC", subject="lg.exec.case.add_note")
    with pytest.raises(AttemptDue):  # the deadline is still ahead
        await executor_handlers(ports).ready(trigger)
    with pytest.raises(NotFoundError):
        await ports.js.get_last_msg("LG_EXEC", "lg.exec.case.add_note")


async def test_an_order_not_sent_after_its_authorization_is_sent_when_its_trigger_comes_again(
    ports: Ports,
) -> None:
    """The executor appended ``ExecutionAuthorized`` and died before publishing the order:
    the next one, handed the gate's trigger again, sends it, once."""
    attempt = f"a-{random_id()[:8]}"  # an order id the broker has not seen in its window
    h = authorized_on_its_trigger(attempt, call_id=f"call-{attempt}")
    trigger = await store_with_trigger(ports, h)
    await ports.js.purge_stream("LG_EXEC", subject="lg.exec.case.add_note")
    executor = executor_handlers(ports)
    for _ in range(2):  # the timer comes back; the order is not sent again
        with pytest.raises(AttemptDue):
            await executor.ready(trigger)
    info = await ports.js.stream_info("LG_EXEC", subjects_filter="lg.exec.case.add_note")
    assert info.state.subjects == {"lg.exec.case.add_note": 1}
    order = msgspec.json.decode(
        (await ports.js.get_last_msg("LG_EXEC", "lg.exec.case.add_note")).data, type=ExecutionOrder)
    assert (order.intent_id, order.attempt_id) == (h.intent_id, attempt)


# -- locks released from the record ---------------------------------------------------------


LOCK = "tenant-a.case.case-123"


def ended_by(name: str, call_id: str = "call-1") -> History:
    """A history that took the resource lock and ended its hold with ``name``."""
    h = authorized_history()
    if name == "GateRefused":
        return History(call_id=call_id).normalized().decided("allow").add(
            EffectIntent.GateRefused, reason="gate.policy-changed", gate_facts={})
    if name == "Withdrawn":
        return History().normalized().decided("allow").add(EffectIntent.Withdrawn, by="r", why="")
    if name == "ProcessingAbandoned":  # the gate gave up on an allowed intent it had locked
        return History().normalized().decided("allow").add(
            EffectIntent.ProcessingAbandoned, durable="executor-gate", trigger="t", cause="boom",
            deliveries=5)
    h.add(EffectIntent.AttemptSent, attempt_id="a1")
    if name == "EffectCompleted":
        return h.add(EffectIntent.EffectCompleted, attempt_id="a1", receipt={}, result={},
                     provenance={})
    if name == "AttemptRejected":
        return h.add(EffectIntent.AttemptRejected, attempt_id="a1", reason="case.closed", detail="")
    if name == "AttemptInterrupted":
        h.add(EffectIntent.InterruptionRequested, attempt_id="a1", by="r", why="")
        return h.add(EffectIntent.AttemptInterrupted, attempt_id="a1", detail="")
    h.add(EffectIntent.OutcomeUnknown, attempt_id="a1", evidence="silence")
    return h.add(EffectIntent.Reconciled, attempt_id="a1", finding="confirmed", receipt={},
                 by="reconciler", why="found", resolution="completed")


@pytest.mark.parametrize("name", [e.__name__ for e in ENDS_HOLD_ELSEWHERE])
async def test_a_lock_left_by_a_crash_right_after_the_append_is_released_from_the_record(
    ports: Ports, name: str
) -> None:
    """The executor died after appending ``name`` and before freeing the lock: a restarted
    one (nothing in memory) releases it when its lock durable delivers the event."""
    h = ended_by(name)
    last = await store_history(ports, h)
    assert last.event_type == name
    await (await bucket(ports, LOCKS_BUCKET)).put(LOCK, h.intent_id.encode())
    await executor_handlers(ports).settled(last)
    with pytest.raises(KeyNotFoundError):
        await (await bucket(ports, LOCKS_BUCKET)).get(LOCK)


#: The report each attempt's end was appended on (what the reports' durable hands again).
ENDED_ON: dict[str, AttemptReport] = {
    "EffectCompleted": AttemptReport(tenant="tenant-a", intent_id="", attempt_id="a1",
                                     stage="completed"),
    "AttemptRejected": AttemptReport(tenant="tenant-a", intent_id="", attempt_id="a1",
                                     stage="rejected", reason="case.closed"),
    "AttemptInterrupted": AttemptReport(tenant="tenant-a", intent_id="", attempt_id="a1",
                                        stage="interrupted"),
}


@pytest.mark.parametrize("name", [e.__name__ for e in ENDS_HOLD_BY_TRIGGER])
async def test_a_lock_left_by_a_crash_right_after_the_append_is_released_by_the_trigger_again(
    ports: Ports, name: str
) -> None:
    """The executor died after appending ``name`` and before freeing the lock, so the trigger
    it was handling was never acknowledged: a restarted one (nothing in memory), handed it
    again, finds the hold ended on the record and frees the lock."""
    h = ended_by(name, call_id=f"call-{name}")
    last = await store_history(ports, h)
    assert last.event_type == name
    await (await bucket(ports, LOCKS_BUCKET)).put(LOCK, h.intent_id.encode())
    executor = executor_handlers(ports)
    if name == "GateRefused":
        stored = await ports.store.load("tenant-a", h.intent_id)
        await executor.ready(next(e for e in stored.events if e.event_type == "PolicyDecided"))
    else:
        await deliver(executor, signed(msgspec.structs.replace(ENDED_ON[name], intent_id=h.intent_id)))
    with pytest.raises(KeyNotFoundError):
        await (await bucket(ports, LOCKS_BUCKET)).get(LOCK)


async def test_an_event_that_leaves_the_hold_in_place_keeps_the_lock(ports: Ports) -> None:
    h = unknown_history().add(EffectIntent.Reconciled, attempt_id="a1", finding="absent",
                              receipt={}, by="reconciler", why="absent", resolution="retry")
    last = await store_history(ports, h)
    await (await bucket(ports, LOCKS_BUCKET)).put(LOCK, h.intent_id.encode())
    other = await (await bucket(ports, LOCKS_BUCKET)).put("tenant-a.case.other", b"someone-else")
    executor = executor_handlers(ports)
    await executor.settled(last)  # allowed again: the same intent tries again under its lock
    assert (await (await bucket(ports, LOCKS_BUCKET)).get(LOCK)).value == h.intent_id.encode()
    done = await store_history(ports, ended_by("GateRefused", call_id="call-2"))
    await executor.settled(done)  # another intent's end never frees a lock it does not hold
    assert (await (await bucket(ports, LOCKS_BUCKET)).get("tenant-a.case.other")).revision == other
    await (await bucket(ports, LOCKS_BUCKET)).delete(LOCK)


async def test_the_gate_frees_a_lock_it_took_for_an_intent_withdrawn_meanwhile(
    ports: Ports, nc: Client
) -> None:
    """Taken, then the append lost to a Withdrawn: the lock durable may have seen that
    Withdrawn before the lock existed, so the gate itself lets go."""
    await register(ports)
    with contextlib.suppress(KeyNotFoundError):
        await (await bucket(ports, LOCKS_BUCKET)).delete(LOCK)
    h = History(contract_revision=CONTRACT.revision).normalized(
        contract_revision=CONTRACT.revision).decided("allow")
    last = await store_history(ports, h)

    async def facts(_: bytes) -> object:
        assert (await (await bucket(ports, LOCKS_BUCKET)).get(LOCK)).value == h.intent_id.encode()  # held, under the lock
        stored = await ports.store.load("tenant-a", h.intent_id)
        await ports.store.append(stored, [encode_event(EffectIntent.Withdrawn.next(
            h.intent, Stamp(now=T0, event_id="w1", causation_id="w"), by="runtime", why=""))])
        return {"facts": OPEN_FACTS, "revision": "4"}

    sub = await answering(nc, "facts", facts)
    try:
        await executor_handlers(ports).ready(last)
    finally:
        await sub.unsubscribe()  # type: ignore[attr-defined]
    intent = await load_intent(ports.store, "tenant-a", h.intent_id)
    assert intent is not None and intent.state is State.WITHDRAWN
    with pytest.raises(KeyNotFoundError):
        await (await bucket(ports, LOCKS_BUCKET)).get(LOCK)


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


def on_old_views(ports: Ports, cuts: list[int]) -> ExecutorHandlers:
    """An executor (nothing in memory) whose loads answer as ``OldViews`` does."""
    assert isinstance(ports.intents, StoredIntents)
    old = OldViews(ports.store, cuts)
    return executor_handlers(dataclasses.replace(ports, store=old,
                                                 intents=StoredIntents(old, ports.intents.cache)))


def serialized(*, completed: bool) -> History:
    """case.add_note as registered (its contract serializes each case), allowed, its
    attempt sent and, if ``completed``, completed."""
    h = History(contract_revision=CONTRACT.revision, call_id=f"call-{random_id()[:8]}").normalized(
        contract_revision=CONTRACT.revision).decided("allow")
    h.add(EffectIntent.ExecutionAuthorized, attempt_id="a1", intent_key="k1", digest="sha256:d1",
          policy_revision="p", contract_revision=CONTRACT.revision, gate_facts={},
          deadline_at=T0 + timedelta(seconds=30))
    h.add(EffectIntent.AttemptSent, attempt_id="a1")
    if completed:
        h.add(EffectIntent.EffectCompleted, attempt_id="a1", receipt={}, result={}, provenance={})
    return h


async def gate_again(ports: Ports, nc: Client, executor: ExecutorHandlers, h: History,
                     deliveries: int = 1) -> int:
    """Hand ``executor`` the gate's trigger of ``h`` (its ``deliveries``-th delivery), with
    the case's facts answered; return how often the facts were asked for."""
    trigger = await store_with_trigger(ports, h)
    asked = [0]

    async def facts(_: bytes) -> object:
        asked[0] += 1
        return {"facts": OPEN_FACTS, "revision": "4"}

    sub = await answering(nc, "facts", facts)
    try:
        with contextlib.suppress(AttemptDue):
            await executor.ready(trigger, deliveries)
    finally:
        await sub.unsubscribe()  # type: ignore[attr-defined]
    return asked[0]


async def free(ports: Ports) -> None:
    with contextlib.suppress(KeyNotFoundError):
        await (await bucket(ports, LOCKS_BUCKET)).delete(LOCK)


async def test_a_lock_taken_on_an_old_view_of_an_intent_that_ended_is_freed(
    ports: Ports, nc: Client
) -> None:
    """The trigger comes back at its attempt's deadline, long after the effect completed
    and its lock was freed, to a replica whose views are behind the leader: one shows the
    intent allowed (so the gate takes the lock and authorizes), the one after the conflict
    shows it sent. The lock is this intent's to keep only if the leader says so; it does not."""
    await register(ports)
    await free(ports)
    h = serialized(completed=True)
    await gate_again(ports, nc, on_old_views(ports, [3, 5]), h)
    with pytest.raises(KeyNotFoundError):
        await (await bucket(ports, LOCKS_BUCKET)).get(LOCK)
    stored = [e.event_type for e in (await ports.store.load("tenant-a", h.intent_id)).events]
    assert stored.count("ExecutionAuthorized") == 1 and stored[-1] == "EffectCompleted"


async def test_a_trigger_handed_again_is_decided_on_the_leaders_record(
    ports: Ports, nc: Client
) -> None:
    """The timer comes back to a replica whose view shows the intent allowed; the effect
    completed long ago. Decided on the leader's record, the gate takes no lock and asks
    no adapter for facts."""
    await register(ports)
    await free(ports)
    h = serialized(completed=True)
    assert await gate_again(ports, nc, on_old_views(ports, [3]), h, deliveries=2) == 0
    with pytest.raises(KeyNotFoundError):
        await (await bucket(ports, LOCKS_BUCKET)).get(LOCK)


async def test_a_lock_another_delivery_holds_for_the_same_attempt_is_kept(
    ports: Ports, nc: Client
) -> None:
    """The same old views, but the leader has the attempt in flight: its lock stays."""
    await register(ports)
    h = serialized(completed=False)
    await (await bucket(ports, LOCKS_BUCKET)).put(LOCK, h.intent_id.encode())
    await gate_again(ports, nc, on_old_views(ports, [3, 5]), h)
    assert (await (await bucket(ports, LOCKS_BUCKET)).get(LOCK)).value == h.intent_id.encode()
    await free(ports)


async def test_a_trigger_handed_again_frees_a_lock_left_with_an_intent_that_ended(
    ports: Ports, nc: Client
) -> None:
    """A delivery took the lock on an old view and died (or failed) before letting go; the
    effect had settled. The trigger handed again finds the intent ended and frees the lock."""
    await register(ports)
    h = serialized(completed=True)
    await (await bucket(ports, LOCKS_BUCKET)).put(LOCK, h.intent_id.encode())
    await gate_again(ports, nc, executor_handlers(ports), h)
    with pytest.raises(KeyNotFoundError):
        await (await bucket(ports, LOCKS_BUCKET)).get(LOCK)


# -- an operator racing the automatic reconciler ---------------------------------------------


async def test_an_operator_racing_the_reconciler_is_refused_with_the_finding_that_settled_it(
    ports: Ports, nc: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reconciler records Reconciled(confirmed) between the operator's load and append:
    the operator's command is decided again on the new history and refused, with the
    reconciler's finding and receipt, never lost and never recorded on top."""
    await register(ports)
    last = await store_history(ports, unknown_history())

    async def found(_: bytes) -> QueryResult:
        return QueryResult(finding="found", receipt={"note_id": "n7"})

    sub = await answering(nc, "query", found)
    reconciler = ReconcilerHandlers(ports, lambda: T0)
    lookup = ports.registry.get
    raced: list[bool] = []

    async def lookup_while_the_reconciler_runs(capability: str) -> object:
        if not raced:  # the operator's step, after its load: the reconciler gets there first
            raced.append(True)
            await reconciler.unknown(last, deliveries=1)
        return await lookup(capability)

    monkeypatch.setattr(ports.registry, "get", lookup_while_the_reconciler_runs)
    command = ResolveOutcome(finding="absent", why="not in the CRM")
    try:
        reply = await reconciler.resolve(subjects.resolve("tenant-a", last.intent_id, "ops-1"),
                                         msgspec.json.encode(command))
    finally:
        await sub.unsubscribe()  # type: ignore[attr-defined]
    answer = msgspec.json.decode(reply, type=NotResolved)
    assert (answer.error, answer.settled_by, answer.finding, answer.by) == (
        "reconcile.already-settled", "Reconciled", "confirmed", "reconciler")
    assert answer.receipt == {"note_id": "n7"} and answer.state == "completed"
    stored = [e.event_type for e in (await ports.store.load("tenant-a", last.intent_id)).events]
    assert stored.count("Reconciled") == 1


async def test_an_operator_resolution_is_recorded_once_and_a_repeat_says_so(ports: Ports) -> None:
    await register(ports)
    last = await store_history(ports, unknown_history())
    reconciler = ReconcilerHandlers(ports, lambda: T0)
    command = msgspec.json.encode(ResolveOutcome(finding="absent", why="checked"))
    as_ops1 = subjects.resolve("tenant-a", last.intent_id, "ops-1")
    first = msgspec.json.decode(await reconciler.resolve(as_ops1, command), type=Recorded)
    again = msgspec.json.decode(await reconciler.resolve(as_ops1, command),
                                type=Recorded)  # its reply was lost: the same answer
    assert first == again == Recorded("Reconciled")
    other = ResolveOutcome(finding="confirmed", why="saw it")
    answer = msgspec.json.decode(
        await reconciler.resolve(subjects.resolve("tenant-a", last.intent_id, "ops-2"),
                                 msgspec.json.encode(other)),
        type=NotResolved)
    assert (answer.error, answer.by, answer.finding) == (
        "reconcile.already-settled", "operator:ops-1", "absent")


async def test_the_sdk_raises_what_settled_an_outcome(ports: Ports, nc: Client) -> None:
    await register(ports)
    last = await store_history(ports, unknown_history())
    reconciler = ReconcilerHandlers(ports, lambda: T0)
    await reconciler.resolve(subjects.resolve("tenant-a", last.intent_id, "ops-1"), msgspec.json.encode(
        ResolveOutcome(finding="confirmed", why="saw it", receipt={"note_id": "n9"})))

    async def answer(msg: Msg) -> None:
        await msg.respond(await reconciler.resolve(msg.subject, msg.data))

    sub = await nc.subscribe(subjects.RESOLVE_ALL, cb=answer)
    try:
        with pytest.raises(OutcomeSettled) as settled:
            await Gateway(nc, principal="ops-2").resolve_outcome(
                tenant="tenant-a", candidate_id=last.intent_id, finding="absent", why="not there")
    finally:
        await sub.unsubscribe()
    assert settled.value.code == "reconcile.already-settled"
    assert settled.value.answer.receipt == {"note_id": "n9"}
    assert "operator:ops-1 recorded Reconciled(confirmed" in str(settled.value)


async def test_intake_marks_a_tool_done_in_a_run_once(ports: Ports) -> None:
    """The done mark (what ``Offer.after`` asks) is written when the first call of a tool
    completes; later completions in the run cost the bucket nothing."""
    trips: list[str] = []  # every round trip to the bucket: its subject

    class Counted:
        def __init__(self, js: object) -> None:
            self._js = js

        def __getattr__(self, name: str) -> object:
            attr = getattr(self._js, name)
            if name not in ("publish", "get_msg"):
                return attr

            async def counted(*args: object, **kwargs: object) -> object:
                trips.append(str(kwargs.get("subject") or args[1 if name == "get_msg" else 0]))
                return await attr(*args, **kwargs)  # type: ignore[operator]
            return counted

    kv = await bucket(ports, RUNS_BUCKET)

    def counted_runs() -> KvRuns:
        return KvRuns(ports.js, KeyValue(name=kv._name, stream=kv._stream, pre=kv._pre,
                                         js=Counted(kv._js), direct=kv._direct))  # type: ignore[arg-type]

    run_id = f"run-{random_id()[:8]}"
    intake = IntakeHandlers(dataclasses.replace(ports, runs=counted_runs()), SETTINGS,
                            lambda: T0 + timedelta(seconds=2))
    for call_id in ("call-1", "call-2", "call-3"):
        await intake.respond(await store_history(ports, completed(run_id, call_id)))
    key = subjects.done_key("tenant-a", run_id, "case.add_note")
    assert trips == [f"$KV.LG_RUNS.{key}"]
    marked = await kv.get(key)
    assert marked.value == b"1"

    # Another replica, which never wrote the mark: one refused create, nothing read, and
    # nothing more for the run's later calls.
    trips.clear()
    replica = IntakeHandlers(dataclasses.replace(ports, runs=counted_runs()), SETTINGS,
                             lambda: T0 + timedelta(seconds=2))
    for call_id in ("call-4", "call-5"):
        await replica.respond(await store_history(ports, completed(run_id, call_id)))
    assert trips == [f"$KV.LG_RUNS.{key}"]
    assert (await kv.get(key)).revision == marked.revision


def completed(run_id: str, call_id: str) -> History:
    """An executed call of ``case.add_note`` in ``run_id``."""
    h = History(run_id=run_id, call_id=call_id).normalized().decided("allow")
    h.add(EffectIntent.ExecutionAuthorized, attempt_id="a1", intent_key="k1", digest="sha256:d1",
          policy_revision="p", contract_revision="rev-1", gate_facts={},
          deadline_at=T0 + timedelta(seconds=30))
    h.add(EffectIntent.AttemptSent, attempt_id="a1")
    return h.add(EffectIntent.EffectCompleted, attempt_id="a1", receipt={}, result={}, provenance={})


async def test_a_response_from_an_earlier_version_never_stands_over_a_later_one(ports: Ports) -> None:
    """Two replicas answer consecutive events of one intent, the later first: the model's
    answer (the last stored response) is the later one, whichever is stored last."""
    run_id = f"run-{random_id()[:8]}"
    h = History(run_id=run_id).normalized().decided("allow")
    earlier = h.intent
    h.add(EffectIntent.ExecutionAuthorized, attempt_id="a1", intent_key="k1", digest="sha256:d1",
          policy_revision="p", contract_revision="rev-1", gate_facts={},
          deadline_at=T0 + timedelta(seconds=30))
    later = h.intent
    subject = subjects.response_subject("tenant-a", run_id, h.intent_id)
    one = IntakeHandlers(ports, SETTINGS, lambda: T0)
    other = IntakeHandlers(ports, SETTINGS, lambda: T0)  # a replica

    await one._store_response(later, b'{"status": "later"}', "m-later")
    await other._store_response(earlier, b'{"status": "earlier"}', "m-earlier")
    assert (await ports.js.get_last_msg("LG_RESPONSES", subject)).data == b'{"status": "later"}'

    # In order, the later one follows the earlier, once.
    run_id = f"run-{random_id()[:8]}"
    h2 = History(run_id=run_id).normalized().decided("allow")
    first = h2.intent
    h2.add(EffectIntent.Withdrawn, by="r", why="")
    second = h2.intent
    subject = subjects.response_subject("tenant-a", run_id, h2.intent_id)
    await other._store_response(first, b'{"status": "first"}', "m-first")
    await one._store_response(second, b'{"status": "second"}', "m-second")
    await one._store_response(second, b'{"status": "second"}', "m-second")  # redelivered
    last = await ports.js.get_last_msg("LG_RESPONSES", subject)
    assert last.data == b'{"status": "second"}'
    assert (last.headers or {})["Lockgate-Intent-Version"] == str(second.version)
