"""Nothing is redelivered forever: a message that keeps failing ends on the record (invariant 7).

The poison here is a corrupt entry in the runs bucket: every service that reads the run
fails on it, permanently, on every delivery. Before, such a message was nak'd forever;
now the consumer gives it up after a bounded number of failures, records why on the
intent, acknowledges it, and the model is told.
"""

from __future__ import annotations

import asyncio
import uuid

from lockgate.adapters.sdk import report_subject
from lockgate.client.sdk import Gateway, Run, Turn
from lockgate.contracts.subjects import run_key
from lockgate.core.ids import derived_id, intent_id_for
from lockgate.eventstore.jetstream import JetStreamEventStore
from lockgate.intent.aggregate import INTENT_TOPIC, Event, State
from lockgate.intent.codec import decode_event, encode_event, fold
from lockgate.intent.events import (
    CandidateReceived,
    CandidateRejected,
    ProcessingAbandoned,
    ReportRefused,
)
from lockgate.runtime.topology import RUNS_BUCKET
from lockgate.testing.intents import T0
from lockgate.testing.invariants import by_intent, violations
from lockgate.testing.system import System
from lockgate.worlds.casenotes.adapter import CONTRACT
from lockgate.worlds.casenotes.world import World

TENANT = "tenant-a"
WAIT_S = 60.0


async def corrupt_run(system: System, run_id: str) -> None:
    """A run entry no service can read (written as the topology owner: nobody else may)."""
    nc = await system.connect()
    try:
        kv = await nc.jetstream().key_value(RUNS_BUCKET)
        await kv.put(run_key(TENANT, run_id), b'{"run_id": 7}')
    finally:
        await nc.close()


async def history_until(system: System, intent_id: str, done: type[Event]) -> list[Event]:
    nc = await system.connect()
    try:
        store = JetStreamEventStore(nc)
        deadline = asyncio.get_running_loop().time() + WAIT_S
        while True:
            events = [decode_event(e) for e in (await store.load(TENANT, intent_id)).events]
            if any(isinstance(e, done) for e in events):
                return events
            assert asyncio.get_running_loop().time() < deadline, f"{intent_id}: {events}"
            await asyncio.sleep(0.2)
    finally:
        await nc.close()


async def test_intake_gives_up_a_candidate_it_keeps_failing_on_and_says_so(
    system: System, gw: Gateway, world: World
) -> None:
    run_id = f"corrupt-{uuid.uuid4().hex[:8]}"
    await corrupt_run(system, run_id)
    turn = Turn(Run(gw, run_id, TENANT, "user-42"), "turn-1", "", ())
    response = await turn.propose(tool="case.add_note", arguments='{"note": "x"}', timeout_s=WAIT_S)
    assert (response.status, response.code) == ("rejected", "proposal.invalid")
    events = await history_until(system, response.candidate_id, CandidateRejected)
    rejected = events[0]
    assert isinstance(rejected, CandidateRejected)
    assert rejected.reason == "candidate.unprocessable"
    assert rejected.detail.startswith("intake: failed 5 times") and "ValidationError" in rejected.detail
    # Intake kept serving everyone else meanwhile.
    run = await gw.open_run(tenant=TENANT, actor="user-42", context={"case_id": "case-123"})
    done = await (await run.open_turn()).propose(tool="case.add_note", arguments='{"note": "ok"}')
    assert done.status == "executed"


async def test_a_service_gives_up_an_event_it_keeps_failing_on_and_the_model_is_told(
    system: System, gw: Gateway, world: World
) -> None:
    invocations = world.invocations
    run_id = f"corrupt-{uuid.uuid4().hex[:8]}"
    await corrupt_run(system, run_id)
    intent_id = intent_id_for(TENANT, run_id, "call-1")
    received = CandidateReceived(
        originator_id=uuid.UUID(hex=intent_id), originator_version=1, timestamp=T0,
        originator_topic=INTENT_TOPIC, event_id=derived_id("test", intent_id), correlation_id=run_id,
        causation_id="test", tenant=TENANT, run_id=run_id, turn_id="turn-1", call_id="call-1",
        actor="user-42", tool=CONTRACT.name, arguments={"note": "x"}, raw_digest="sha256:00",
        raw_size_bytes=13, catalogue_digest="sha256:01", contract_revision=CONTRACT.revision,
    )
    nc = await system.connect()  # stands in for intake, whose event it appends
    try:
        store = JetStreamEventStore(nc)
        await store.append(await store.load(TENANT, intent_id), [encode_event(received)])
    finally:
        await nc.close()

    events = await history_until(system, intent_id, ProcessingAbandoned)
    abandoned = events[-1]
    assert isinstance(abandoned, ProcessingAbandoned)
    assert abandoned.durable == "normalization" and "ValidationError" in abandoned.cause
    intent = fold(events)
    assert intent is not None and (intent.state, intent.reason) == (State.REFUSED, "candidate.unprocessable")
    response = await Run(gw, run_id, TENANT, "user-42").wait(intent_id, past="", timeout_s=WAIT_S)
    assert (response.status, response.code) == ("unavailable", "operation.unavailable")
    assert world.invocations == invocations

    nc = await system.connect()
    try:
        recorded = [e async for e in JetStreamEventStore(nc).scan()]
    finally:
        await nc.close()
    assert violations(by_intent(recorded), world.ledger()) == []


async def test_an_adapters_unreadable_reports_are_refused_on_the_intent_their_subject_names(
    system: System, gw: Gateway, world: World
) -> None:
    """Before, the executor acknowledged them and dropped them with a log line."""
    run = await gw.open_run(tenant=TENANT, actor="user-42", context={"case_id": "case-123"})
    done = await (await run.open_turn()).propose(tool="case.add_note", arguments='{"note": "ok"}')
    assert done.status == "executed"
    invocations = world.invocations
    adapter = await system.connect("adapter-casenotes")  # the adapter's own user, nothing more
    try:
        nameless = b'{"tenant": "a b", "intent_id": "x.y", "attempt_id": "", "stage": "completed"}'
        for body in (b"\xff\xfe", nameless, b"\xff\xfe"):
            await adapter.publish(report_subject(CONTRACT.name, done.candidate_id), body)
        await adapter.flush()
    finally:
        await adapter.close()
    nc = await system.connect()
    try:
        store = JetStreamEventStore(nc)
        deadline = asyncio.get_running_loop().time() + WAIT_S
        while True:
            events = [decode_event(e) for e in (await store.load(TENANT, done.candidate_id)).events]
            refused = sorted(e.reason for e in events if isinstance(e, ReportRefused))
            if len(refused) >= 2:
                break
            assert asyncio.get_running_loop().time() < deadline, events
            await asyncio.sleep(0.2)
    finally:
        await nc.close()
    assert refused == ["report.unaddressed", "report.unreadable"]
    intent = fold(events)
    assert intent is not None and intent.state is State.COMPLETED
    assert world.invocations == invocations
