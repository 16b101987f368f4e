"""Intake's handlers on in-memory ports: runs, turns, candidates, run ends and responses,
without a broker.

Each test opens what it needs through the handlers (as the trusted host and the agent
runtime would), hands intake a candidate as its durable would, and reads back the stored
events, the runs port, the leases port and the stored responses.
"""

from __future__ import annotations

from datetime import timedelta

import msgspec
import pytest

from lockgate.contracts import subjects
from lockgate.contracts.messages import (
    Candidate,
    CloseRun,
    Describe,
    OpenRun,
    Refusal,
    RunClosed,
    RunOpened,
    TurnOpened,
)
from lockgate.contracts.responses import ModelResponse
from lockgate.core.ids import call_digest, intent_id_for, reused_call_id_intent
from lockgate.eventstore.base import RecordedEvent
from lockgate.intake.handlers import IntakeHandlers
from lockgate.intake.leases import RunEnds
from lockgate.intent.aggregate import State
from lockgate.intent.codec import decode_event, encode_event
from lockgate.intent.events import (
    AttemptSent,
    CandidateReceived,
    CandidateRejected,
    EffectCompleted,
    Event,
    ExecutionAuthorized,
)
from lockgate.runtime.context import MemoryPorts
from lockgate.runtime.ports.leases import MARKER_HEADER
from lockgate.runtime.settings import Settings
from lockgate.runtime.settlement import Abandonment
from lockgate.testing.intents import T0, History
from lockgate.worlds.casenotes.adapter import CONTRACT
from lockgate.worlds.items.adapter import PUBLISH_CONTRACT

SETTINGS = Settings()
#: Intake's clock: two seconds after the adapters' last heartbeat.
NOW = T0 + timedelta(seconds=2)


@pytest.fixture
def ports() -> MemoryPorts:
    """case.add_note registered by an adapter alive at T0."""
    ports = MemoryPorts.create(clock_s=lambda: 0.0)
    ports.registry.register(Describe(CONTRACT, "casenotes", alive_at=T0))
    return ports


@pytest.fixture
def intake(ports: MemoryPorts) -> IntakeHandlers:
    return IntakeHandlers(ports, SETTINGS, lambda: NOW)


async def open_run(intake: IntakeHandlers, **fields: object) -> str:
    """Open a run for user-42 (as the trusted host would); its id."""
    body = msgspec.json.encode(OpenRun(tenant="tenant-a", actor="user-42", **fields))  # type: ignore[arg-type]
    return msgspec.json.decode(await intake.open_run("tenant-a", body), type=RunOpened).run_id


async def open_turn(intake: IntakeHandlers, run_id: str, turn_id: str = "turn-1") -> TurnOpened:
    body = msgspec.json.encode({"turn_id": turn_id})
    return msgspec.json.decode(await intake.open_turn("tenant-a", run_id, body), type=TurnOpened)


def refusal(reply: bytes) -> str:
    return msgspec.json.decode(reply, type=Refusal).error


async def propose(intake: IntakeHandlers, run_id: str, *, call_id: str = "call-1",
                  arguments: str = '{"note": "hello"}', turn_id: str = "turn-1",
                  tool: str = "case.add_note", message_id: str = "") -> str:
    """Hand intake a candidate as its durable would; the intent it belongs to."""
    data = msgspec.json.encode(Candidate(run_id=run_id, turn_id=turn_id, call_id=call_id, tool=tool,
                                         arguments=arguments))
    await intake.candidate(subjects.propose_subject("tenant-a", run_id), data,
                           message_id or f"{run_id}.{call_id}")
    return intent_id_for("tenant-a", run_id, call_id)


async def stored(ports: MemoryPorts, intent_id: str) -> list[Event]:
    return [decode_event(e) for e in (await ports.store.load("tenant-a", intent_id)).events]


def all_events(ports: MemoryPorts) -> list[RecordedEvent]:
    """Every event stored, in order."""
    return ports.intents.store.all_events()


async def rejection(ports: MemoryPorts, intent_id: str) -> tuple[str, str | None]:
    """The one event on ``intent_id``, a rejection: its reason and field."""
    (event,) = await stored(ports, intent_id)
    assert isinstance(event, CandidateRejected), event
    return event.reason, event.field


# -- runs and turns ------------------------------------------------------------------------------


async def test_an_opened_run_is_stored_with_its_lease(intake: IntakeHandlers, ports: MemoryPorts) -> None:
    run_id = await open_run(intake, lease_s=60.0, context={"case_id": "case-123"})
    run = await ports.runs.get("tenant-a", run_id)
    assert run is not None and (run.actor, run.context, run.opened_at) == ("user-42", {"case_id": "case-123"}, NOW)
    assert ports.leases.leases == {("tenant-a", run_id): 60.0}  # runs out 60 s after the fake's 0


@pytest.mark.parametrize(("body", "code"), [
    (b"{", "run.malformed"),
    (msgspec.json.encode(OpenRun(tenant="tenant-b", actor="user-42")), "run.tenant-mismatch"),
    (msgspec.json.encode(OpenRun(tenant="tenant-a", actor="user 42")), "run.malformed"),
    (msgspec.json.encode(OpenRun(tenant="tenant-a", actor="user-42", lease_s=0.5)), "run.malformed"),
])
async def test_a_run_that_cannot_be_opened_is_refused_and_not_stored(
    intake: IntakeHandlers, ports: MemoryPorts, body: bytes, code: str,
) -> None:
    assert refusal(await intake.open_run("tenant-a", body)) == code
    assert ports.runs.values == {} and ports.leases.leases == {}


async def test_a_turn_of_a_run_never_opened_is_refused(intake: IntakeHandlers) -> None:
    assert refusal(await intake.open_turn("tenant-a", "run-nobody-opened", b"{}")) == "run.unknown"


async def test_a_turn_offers_only_capabilities_whose_adapter_is_alive(
    intake: IntakeHandlers, ports: MemoryPorts,
) -> None:
    ports.registry.register(Describe(PUBLISH_CONTRACT, "items", alive_at=T0 - timedelta(seconds=60)))
    turn = await open_turn(intake, await open_run(intake))
    assert [t.name for t in turn.tools] == ["case.add_note"]  # the items adapter went quiet


async def test_a_turn_opened_again_under_its_id_answers_with_its_first_snapshot(
    intake: IntakeHandlers, ports: MemoryPorts,
) -> None:
    """A turn is one snapshot: opening it again (a retry whose answer was lost, another
    intake) answers with the catalogue it was opened with."""
    run_id = await open_run(intake)
    first = await open_turn(intake, run_id, "turn-7")
    ports.registry.register(Describe(PUBLISH_CONTRACT, "items", alive_at=T0))
    replica = IntakeHandlers(ports, SETTINGS, lambda: NOW)
    again = await open_turn(replica, run_id, "turn-7")
    assert again == first and [t.name for t in again.tools] == ["case.add_note"]
    fresh = await open_turn(replica, run_id, "turn-8")
    assert sorted(t.name for t in fresh.tools) == ["case.add_note", "item.publish"]


# -- candidates ----------------------------------------------------------------------------------


async def test_a_candidate_accepted_is_stored_as_received(intake: IntakeHandlers, ports: MemoryPorts) -> None:
    run_id = await open_run(intake)
    turn = await open_turn(intake, run_id)
    intent_id = await propose(intake, run_id)
    (event,) = await stored(ports, intent_id)
    assert isinstance(event, CandidateReceived)
    assert (event.tool, event.arguments, event.actor) == ("case.add_note", {"note": "hello"}, "user-42")
    assert (event.catalogue_digest, event.contract_revision) == (turn.catalogue_digest, CONTRACT.revision)


@pytest.mark.parametrize(("arguments", "reason", "field"), [
    ('{"note": 7}', "tool.arguments.invalid", "note"),
    ('{"note": "a", "note": "b"}', "tool.arguments.duplicate", None),
    ("{note", "tool.arguments.malformed", None),
])
async def test_a_candidate_with_bad_arguments_is_rejected_with_its_reason(
    intake: IntakeHandlers, ports: MemoryPorts, arguments: str, reason: str, field: str | None,
) -> None:
    run_id = await open_run(intake)
    await open_turn(intake, run_id)
    intent_id = await propose(intake, run_id, arguments=arguments)
    assert await rejection(ports, intent_id) == (reason, field)


async def test_a_message_that_is_no_candidate_is_rejected_on_a_stand_in(
    intake: IntakeHandlers, ports: MemoryPorts,
) -> None:
    run_id = await open_run(intake)
    await intake.candidate(subjects.propose_subject("tenant-a", run_id), b"not json", "m-1")
    (event,) = all_events(ports)
    assert event.intent_id != intent_id_for("tenant-a", run_id, "m-1")
    reason, _ = await rejection(ports, event.intent_id)
    assert reason == "candidate.malformed"


async def test_the_same_call_again_is_one_intent(intake: IntakeHandlers, ports: MemoryPorts) -> None:
    run_id = await open_run(intake)
    await open_turn(intake, run_id)
    await propose(intake, run_id)
    intent_id = await propose(intake, run_id)  # redelivered, or sent again by the runtime
    assert [type(e).__name__ for e in await stored(ports, intent_id)] == ["CandidateReceived"]
    assert len(all_events(ports)) == 1


async def test_other_bytes_under_a_used_call_id_are_recorded_apart(
    intake: IntakeHandlers, ports: MemoryPorts,
) -> None:
    run_id = await open_run(intake)
    await open_turn(intake, run_id)
    first = await propose(intake, run_id)
    await propose(intake, run_id, arguments='{"note": "other"}', message_id="m-other")
    assert [type(e).__name__ for e in await stored(ports, first)] == ["CandidateReceived"]
    other = call_digest(call_id="call-1", tool="case.add_note", arguments='{"note": "other"}',
                        assembly_failure=None)
    reuse = reused_call_id_intent("tenant-a", run_id, "call-1", other)
    assert {e.intent_id for e in all_events(ports)} == {first, reuse}
    reason, _ = await rejection(ports, reuse)
    assert reason == "proposal.call-id-reused"


async def test_a_candidate_of_a_run_never_opened_is_refused(intake: IntakeHandlers, ports: MemoryPorts) -> None:
    intent_id = await propose(intake, "run-nobody-opened")
    assert await rejection(ports, intent_id) == ("run.unknown", None)


async def test_a_candidate_of_a_turn_never_opened_is_refused(intake: IntakeHandlers, ports: MemoryPorts) -> None:
    run_id = await open_run(intake)
    intent_id = await propose(intake, run_id, turn_id="turn-never")
    assert await rejection(ports, intent_id) == ("turn.unknown", None)


async def test_a_candidate_intake_kept_failing_on_is_recorded_unprocessable(
    intake: IntakeHandlers, ports: MemoryPorts,
) -> None:
    run_id = await open_run(intake)
    data = msgspec.json.encode(Candidate(run_id=run_id, turn_id="turn-1", call_id="call-1",
                                         tool="case.add_note", arguments="{}"))
    await intake.abandon(subjects.propose_subject("tenant-a", run_id), data, "m-1",
                         Abandonment("intake-candidates", "boom", 9))
    reason, _ = await rejection(ports, intent_id_for("tenant-a", run_id, "call-1"))
    assert reason == "candidate.unprocessable"


# -- run ends ------------------------------------------------------------------------------------


async def waiting_response(ports: MemoryPorts, run_id: str, call_id: str, status: str) -> str:
    """A candidate of the run whose standing answer is ``status``; its id."""
    intent = History(run_id=run_id, call_id=call_id).intent
    await ports.responses.store(intent, msgspec.json.encode(ModelResponse(
        candidate_id=intent.intent_id, call_id=call_id, status=status, code=status)), f"r-{call_id}")
    return intent.intent_id


async def test_closing_a_run_withdraws_what_it_left_waiting_and_refuses_what_comes_after(
    intake: IntakeHandlers, ports: MemoryPorts,
) -> None:
    run_id = await open_run(intake)
    await open_turn(intake, run_id)
    waiting = await waiting_response(ports, run_id, "call-1", "pending_approval")
    await waiting_response(ports, run_id, "call-2", "completed")
    ports.leases.withdraw_answer = "withdrawn"
    reply = await intake.close_run("tenant-a", msgspec.json.encode(CloseRun(run_id=run_id, why="done")))
    assert msgspec.json.decode(reply, type=RunClosed).withdrawn == {waiting: "withdrawn"}
    assert ports.leases.withdrawals == [("tenant-a", run_id, waiting, "the run ended (closed: done)")]
    assert ports.leases.ends == {("tenant-a", run_id): "closed: done"}
    assert refusal(await intake.open_turn("tenant-a", run_id, b"{}")) == "run.ended"
    intent_id = await propose(intake, run_id, call_id="call-3")
    assert await rejection(ports, intent_id) == ("run.ended", None)


async def test_closing_a_run_never_opened_is_refused(intake: IntakeHandlers, ports: MemoryPorts) -> None:
    reply = await intake.close_run("tenant-a", msgspec.json.encode(CloseRun(run_id="run-nobody")))
    assert refusal(reply) == "run.unknown"
    assert ports.leases.ends == {}


async def test_the_server_s_marker_ends_the_run_for_every_intake(
    intake: IntakeHandlers, ports: MemoryPorts,
) -> None:
    """The run-ends durable hands one intake the marker; another intake finds the end recorded."""
    run_id = await open_run(intake, lease_s=60.0)
    waiting = await waiting_response(ports, run_id, "call-1", "paused")
    await intake.lease(subjects.lease_subject("tenant-a", run_id), {"Nats-TTL": "60s"})  # a renewal
    assert ports.leases.ends == {}
    await intake.lease(subjects.lease_subject("tenant-a", run_id), {MARKER_HEADER: "MaxAge"})
    assert ports.leases.ends == {("tenant-a", run_id): "lease ran out"}
    assert [w[2] for w in ports.leases.withdrawals] == [waiting]
    replica = IntakeHandlers(ports, SETTINGS, lambda: NOW)
    assert refusal(await replica.open_turn("tenant-a", run_id, b"{}")) == "run.ended"


async def test_a_lease_is_renewed_while_used_and_ends_the_run_when_it_runs_out(ports: MemoryPorts) -> None:
    """Renewed at most every quarter lease per process; once it ran out, the run is over."""
    leases_now, checked_at = [0.0], [0.0]
    ports.leases = type(ports.leases)(ports.responses, lambda: leases_now[0])
    intake = IntakeHandlers(ports, SETTINGS, lambda: NOW)
    intake.leases = RunEnds(ports.leases, clock=lambda: checked_at[0])
    run_id = await open_run(intake, lease_s=60.0)
    leases_now[0] = checked_at[0] = 50.0
    await open_turn(intake, run_id, "turn-1")  # renewed: now until 110
    assert ports.leases.leases[("tenant-a", run_id)] == 110.0
    leases_now[0] = checked_at[0] = 60.0
    await open_turn(intake, run_id, "turn-2")  # within a quarter lease: not asked again
    assert ports.leases.leases[("tenant-a", run_id)] == 110.0
    leases_now[0] = checked_at[0] = 200.0
    assert refusal(await intake.open_turn("tenant-a", run_id, b"{}")) == "run.ended"


# -- responses -----------------------------------------------------------------------------------


async def as_stored(ports: MemoryPorts, h: History) -> RecordedEvent:
    """Append ``h``; its last event as stored (what the responses durable is handed)."""
    history = await ports.store.load("tenant-a", h.intent_id)
    history = await ports.store.append(history, [encode_event(e) for e in h.events])
    return history.events[-1]


async def test_a_completed_call_is_answered_and_marks_its_tool_done_in_the_run(
    intake: IntakeHandlers, ports: MemoryPorts,
) -> None:
    h = History(run_id="run-1").normalized().decided("allow")
    h.add(ExecutionAuthorized, attempt_id="a1", intent_key="k1", digest="sha256:d1",
          policy_revision="p", contract_revision="rev-1", gate_facts={},
          deadline_at=T0 + timedelta(seconds=30))
    h.add(AttemptSent, attempt_id="a1")
    h.add(EffectCompleted, attempt_id="a1", receipt={}, result={}, provenance={})
    assert h.intent.state is State.COMPLETED
    await intake.respond(await as_stored(ports, h))
    answer = ports.responses.answer(h.intent)
    assert answer is not None and msgspec.json.decode(answer, type=ModelResponse).status == "executed"
    assert await ports.runs.done("tenant-a", "run-1", "case.add_note")


async def test_a_denied_call_is_answered_and_is_what_the_next_call_of_its_tool_corrects(
    intake: IntakeHandlers, ports: MemoryPorts,
) -> None:
    h = History(run_id="run-1").normalized().decided("deny", reasons=["case.closed"])
    await intake.respond(await as_stored(ports, h))
    answer = ports.responses.answer(h.intent)
    assert answer is not None and msgspec.json.decode(answer, type=ModelResponse).status == "unavailable"
    assert await ports.runs.refused("tenant-a", "run-1", "turn-1", "case.add_note") == h.intent_id
    assert not await ports.runs.done("tenant-a", "run-1", "case.add_note")


async def test_an_allowed_call_is_not_answered_yet(intake: IntakeHandlers, ports: MemoryPorts) -> None:
    h = History(run_id="run-1").normalized().decided("allow")
    await intake.respond(await as_stored(ports, h))
    assert ports.responses.standing == {}
