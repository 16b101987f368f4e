"""Service handlers where the broker itself is what is checked: held JetStream triggers
acknowledged, the SDK's request/reply, bucket round trips and stored responses' order.

Each test builds a history in the JetStream store, runs one handler as its consumer
would, and reads back what was appended. What a handler decides is tested on in-memory
ports (tests/unit/test_*_handlers.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator
from datetime import timedelta

import msgspec
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig
from nats.js.errors import NotFoundError
from nats.js.kv import KeyValue

from lockgate.authz.source import BundleSource
from lockgate.client.sdk import Gateway, OutcomeSettled
from lockgate.contracts import subjects
from lockgate.contracts.messages import (
    AttemptReport,
    Describe,
    ResolveOutcome,
)
from lockgate.core.ids import derived_id, random_id
from lockgate.eventstore.base import RecordedEvent
from lockgate.eventstore.jetstream import JetStreamEventStore
from lockgate.eventstore.jetstream import recorded_event as stored
from lockgate.executor.domain import report_token
from lockgate.executor.handlers import AttemptDue, ExecutorHandlers
from lockgate.intake.handlers import IntakeHandlers
from lockgate.intent.aggregate import Stamp, State
from lockgate.intent.codec import encode_event
from lockgate.intent.events import (
    AttemptSent,
    EffectCompleted,
    ExecutionAuthorized,
    OutcomeUnknown,
    Withdrawn,
)
from lockgate.reconciler.handlers import ReconcilerHandlers
from lockgate.runtime.consumer import Delivery
from lockgate.runtime.context import Ports, ports_for
from lockgate.runtime.ports.intents import load_intent
from lockgate.runtime.ports.runs import KvRuns
from lockgate.runtime.service import settle
from lockgate.runtime.settings import Settings
from lockgate.runtime.topology import CAPABILITIES_BUCKET, RUNS_BUCKET
from lockgate.testing.intents import T0, History
from lockgate.worlds.casenotes.adapter import CONTRACT

SETTINGS = Settings(adapter_timeout_s=0.3, manage_topology=True)
BUNDLES = BundleSource(SETTINGS.policy_dir)
#: The executor's report-token key in these tests.
KEY = b"k" * 32


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


def unknown_history() -> History:
    h = History().normalized().decided("allow")
    h.add(ExecutionAuthorized, attempt_id="a1", intent_key="k1", digest="sha256:d1",
          policy_revision="p", contract_revision="rev-1", gate_facts={}, deadline_at=T0)
    h.add(AttemptSent, attempt_id="a1")
    return h.add(OutcomeUnknown, attempt_id="a1", evidence="silence")


async def register(ports: Ports) -> None:
    kv = await ports.js.key_value(CAPABILITIES_BUCKET)
    await kv.put(CONTRACT.name, msgspec.json.encode(Describe(contract=CONTRACT, adapter="absent")))


def authorized_on_its_trigger(attempt_id: str = "a1", *, call_id: str = "call-1") -> History:
    """Policy allowed, and the gate authorized ``attempt_id`` on that decision (its trigger)."""
    h = History(call_id=call_id).normalized().decided("allow")
    trigger = h.events[-1].event_id
    return h.extend([ExecutionAuthorized.next(
        h.intent, Stamp(now=T0, event_id=derived_id("gate", trigger), causation_id=trigger),
        attempt_id=attempt_id, intent_key="k1", digest="sha256:d1", policy_revision="p",
        contract_revision="rev-1", gate_facts={}, deadline_at=T0 + timedelta(seconds=30))])


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
    h.add(ExecutionAuthorized, attempt_id="a1", intent_key="k1", digest="sha256:d1",
          policy_revision="p", contract_revision="rev-1", gate_facts={},
          deadline_at=T0 + timedelta(seconds=30))
    h.add(AttemptSent, attempt_id="a1")
    return h.add(EffectCompleted, attempt_id="a1", receipt={}, result={}, provenance={})


async def test_a_response_from_an_earlier_version_never_stands_over_a_later_one(ports: Ports) -> None:
    """Two replicas answer consecutive events of one intent, the later first: the model's
    answer (the last stored response) is the later one, whichever is stored last."""
    run_id = f"run-{random_id()[:8]}"
    h = History(run_id=run_id).normalized().decided("allow")
    earlier = h.intent
    h.add(ExecutionAuthorized, attempt_id="a1", intent_key="k1", digest="sha256:d1",
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
    h2.add(Withdrawn, by="r", why="")
    second = h2.intent
    subject = subjects.response_subject("tenant-a", run_id, h2.intent_id)
    await other._store_response(first, b'{"status": "first"}', "m-first")
    await one._store_response(second, b'{"status": "second"}', "m-second")
    await one._store_response(second, b'{"status": "second"}', "m-second")  # redelivered
    last = await ports.js.get_last_msg("LG_RESPONSES", subject)
    assert last.data == b'{"status": "second"}'
    assert (last.headers or {})["Lockgate-Intent-Version"] == str(second.version)
