"""The foundation's behaviour table, through every service, against the real broker.

Each row: what the model sees, how often the adapter executed, what the world's
ledger gained, and the precise reason kept in the event store.
"""

from __future__ import annotations

import asyncio

import msgspec
import pytest
from nats.aio.msg import Msg

from lockgate.client.demo import SCENARIOS, Scenario
from lockgate.client.sdk import Gateway
from lockgate.contracts.reasons import MODEL_CODES, REASONS
from lockgate.contracts.responses import ModelResponse
from lockgate.core.ids import random_id
from lockgate.eventstore.jetstream import JetStreamEventStore
from lockgate.intent.codec import decode_event
from lockgate.testing.invariants import by_intent, violations
from lockgate.testing.system import System
from lockgate.worlds.casenotes.world import DEMO_CREDENTIAL, World

REASON_FIELDS = ("reason",)


async def reasons_recorded(system: System, tenant: str, intent_id: str) -> list[str]:
    nc = await system.connect()
    try:
        history = await JetStreamEventStore(nc).load(tenant, intent_id)
    finally:
        await nc.close()
    out: list[str] = []
    for recorded in history.events:
        event = decode_event(recorded)
        out.extend(str(getattr(event, f)) for f in REASON_FIELDS if getattr(event, f, None))
        out.extend(getattr(event, "reasons", []) or [])
    return out


@pytest.mark.parametrize("s", SCENARIOS, ids=[s.name for s in SCENARIOS])
async def test_row(s: Scenario, system: System, gw: Gateway, world: World) -> None:
    invocations, writes = world.invocations, len(world.ledger())
    run = await gw.open_run(tenant=s.tenant, actor=s.actor, context={"case_id": s.case})
    turn = await run.open_turn()
    call_id = random_id()
    response = await turn.propose(tool=s.tool, arguments=s.arguments, call_id=call_id)
    if s.repeat:
        again = await turn.propose(tool=s.tool, arguments=s.arguments, call_id=call_id)
        assert again == response
    recorded = await reasons_recorded(system, s.tenant, response.candidate_id)
    tools = [t.name for t in turn.tools]
    assert (response.status, response.code, response.field) == (s.status, s.code, s.field), (
        f"recorded reasons {recorded}, tools offered {tools}")
    assert world.invocations - invocations == s.invocations
    assert len(world.ledger()) - writes == s.ledger
    if s.reason is not None:
        assert s.reason in recorded
    if s.status == "executed":
        assert response.result_label == "untrusted-data"
        entry = world.ledger()[-1]
        assert entry["intent_id"] == response.candidate_id


async def response_bytes(system: System) -> list[bytes]:
    """Every model-facing response published so far, as stored."""
    nc = await system.connect()
    js = nc.jetstream()
    try:
        info = await js.stream_info("LG_RESPONSES")
        return [
            (await js.get_msg("LG_RESPONSES", seq)).data or b""
            for seq in range(info.state.first_seq, info.state.last_seq + 1)
        ]
    finally:
        await nc.close()


async def all_responses(system: System) -> list[ModelResponse]:
    return [msgspec.json.decode(r, type=ModelResponse) for r in await response_bytes(system)]


async def test_model_never_sees_internal_reasons(system: System, gw: Gateway) -> None:
    run = await gw.open_run(tenant="tenant-a", actor="user-42", context={"case_id": "case-closed"})
    turn = await run.open_turn()
    await turn.propose(tool="case.add_note", arguments='{"note": "x"}')
    responses = await all_responses(system)
    assert len(responses) >= len(SCENARIOS)
    internal = set(REASONS) - {code for _, code in MODEL_CODES}
    for response in responses:
        assert (response.status, response.code) in MODEL_CODES, response
        text = msgspec.json.encode(response).decode()
        assert not [code for code in internal if code in text], response
        if response.field is not None:
            assert response.field == "note"  # the only argument the model controls


async def test_unknown_run_is_refused_on_the_record(system: System, gw: Gateway) -> None:
    run = await gw.open_run(tenant="tenant-a", actor="user-42", context={"case_id": "case-123"})
    turn = await run.open_turn()
    turn.run.id = "no-such-run"  # a runtime that invents a run id
    response = await turn.propose(tool="case.add_note", arguments='{"note": "x"}')
    assert (response.status, response.code) == ("rejected", "proposal.invalid")
    assert "run.unknown" in await reasons_recorded(system, "tenant-a", response.candidate_id)


async def test_invariants_hold_over_every_stored_event(system: System, world: World) -> None:
    nc = await system.connect()
    try:
        recorded = [e async for e in JetStreamEventStore(nc).scan()]
    finally:
        await nc.close()
    assert recorded, "the table above must have stored events"
    histories = by_intent(recorded)
    assert violations(histories, world.ledger()) == []


async def test_credentials_never_reach_events_or_responses(system: System) -> None:
    nc = await system.connect()
    try:
        recorded = [e async for e in JetStreamEventStore(nc).scan()]
    finally:
        await nc.close()
    responses = await response_bytes(system)
    secret = DEMO_CREDENTIAL.encode()
    assert recorded and responses
    assert not any(secret in e.data for e in recorded)
    assert not any(secret in r for r in responses)


async def test_a_run_that_keeps_proposing_a_denied_note_is_told_to_stop(
    system: System, gw: Gateway, world: World
) -> None:
    run = await gw.open_run(tenant="tenant-a", actor="user-42", context={"case_id": "case-closed"})
    turn = await run.open_turn()
    answers = [await turn.propose(tool="case.add_note", arguments='{"note": "please"}') for _ in range(4)]
    first, *_, last = answers
    assert (first.status, first.code, first.persistent) == ("unavailable", "operation.unavailable", True)
    assert first.alternatives == ("ask_owner", "stop")
    assert [a.code for a in answers[:3]] == ["operation.unavailable"] * 3
    assert (last.status, last.code, last.persistent, last.alternatives) == (
        "denied", "run.progress-stalled", True, ("stop",))
    # Another spelling right after, in the same turn, follows the refused calls (a probe):
    # the lineage is as long as the bundle allows, so it is stopped too.
    probe = await turn.propose(tool="case.add_note", arguments='{"note": "something else"}')
    assert probe.code == "run.progress-stalled"
    # Another consequence in a new turn follows nothing: it is judged on its own.
    fresh = await run.open_turn()
    other = await fresh.propose(tool="case.add_note", arguments='{"note": "something new"}')
    assert other.code == "operation.unavailable"


async def test_the_run_the_host_opened_decides_not_the_model(system: System, gw: Gateway) -> None:
    # The stage and the roles come from the trusted host's run; the model cannot name them.
    lead = await gw.open_run(tenant="tenant-a", actor="user-42", roles=("case-lead",),
                             context={"case_id": "case-sensitive"})
    done = await (await lead.open_turn()).propose(tool="case.add_note", arguments='{"note": "lead"}')
    assert done.status == "executed"  # a case lead needs no reviewer on a sensitive case
    read_only = await gw.open_run(tenant="tenant-a", actor="user-42", stage="read-only",
                                  context={"case_id": "case-123"})
    turn = await read_only.open_turn()
    refused = await turn.propose(
        tool="case.add_note", arguments='{"note": "stage: default, roles: [case-lead]"}')
    assert refused.status == "unavailable"
    assert "run.read-only-stage" in await reasons_recorded(system, "tenant-a", refused.candidate_id)


async def test_an_executed_note_asks_its_adapter_two_questions(system: System, gw: Gateway) -> None:
    """Normalization's answer carries policy's facts; the final gate asks for its own under
    the lock. Counted on the wire, as an administrator watching the adapter's subjects."""
    nc = await system.connect()
    asked: list[str] = []

    async def seen(msg: Msg) -> None:
        asked.append(msg.subject.rsplit(".", 1)[-1])

    sub = await nc.subscribe("lg.adapter.case.add_note.*", cb=seen)
    try:
        run = await gw.open_run(tenant="tenant-a", actor="user-42", context={"case_id": "case-123"})
        turn = await run.open_turn()
        await nc.flush()
        asked.clear()  # opening a turn may ask describe
        response = await turn.propose(tool="case.add_note", arguments='{"note": "two questions"}')
        await nc.flush()
    finally:
        await sub.unsubscribe()
        await nc.close()
    assert response.status == "executed"
    assert sorted(asked) == ["facts", "normalize"]


async def test_an_executed_notes_attempt_leaves_no_timer_behind(system: System, gw: Gateway) -> None:
    """The gate's trigger times its attempt; the executor that records the note's completion
    acknowledges it then, so nothing waits to be handed back at the deadline. Read off the
    gate's durable, as an administrator: no trigger left unacknowledged once the model is
    told, where one per effect used to wait out its 30 s."""
    nc = await system.connect()
    try:
        run = await gw.open_run(tenant="tenant-a", actor="user-42", context={"case_id": "case-123"})
        turn = await run.open_turn()
        for n in range(3):
            response = await turn.propose(tool="case.add_note", arguments=f'{{"note": "timer {n}"}}')
            assert response.status == "executed"
        js = nc.jetstream()
        deadline = 5.0
        while (pending := (await js.consumer_info("LG_EVENTS", "executor-gate")).num_ack_pending) \
                and deadline > 0:
            await asyncio.sleep(0.1)  # the acknowledgement is a publish after the report's append
            deadline -= 0.1
        assert pending == 0
    finally:
        await nc.close()
