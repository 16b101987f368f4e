"""Every candidate gets a recorded, typed answer, whatever its bytes; intake keeps serving.

Each case was once never answered: redelivered forever, or (a tool name longer than the
server's control line) taking intake off the broker. Each test sends the candidate to a
real intake, reads what was recorded, checks the model-facing answer and that the adapter
never ran, then proves intake still serves an ordinary note.
"""

from __future__ import annotations

import asyncio
import json

import msgspec
import nats
import pytest

from lockgate.client.sdk import CandidateTooLarge, Gateway, InvalidCandidate, Turn
from lockgate.contracts.responses import ModelResponse
from lockgate.contracts.subjects import INVALID_RUN, UNROUTABLE_TENANT, response_subject
from lockgate.core.ids import intent_id_for, random_id, reused_call_id_intent
from lockgate.eventstore.jetstream import JetStreamEventStore
from lockgate.intake.domain import stand_in
from lockgate.intent.aggregate import Event
from lockgate.intent.codec import decode_event
from lockgate.intent.events import CandidateReceived, CandidateRejected
from lockgate.runtime.topology import RESPONSES
from lockgate.testing.system import System
from lockgate.worlds.casenotes.world import World

TENANT = "tenant-a"
#: How long a test waits for something to be recorded or answered.
WAIT_S = 20.0


async def turn_on(gw: Gateway, case: str = "case-123") -> Turn:
    run = await gw.open_run(tenant=TENANT, actor="user-42", context={"case_id": case})
    return await run.open_turn()


async def recorded(system: System, tenant: str, intent_id: str) -> list[Event]:
    """The intent's stored events, once there are any (polled with a deadline)."""
    nc = await system.connect()
    try:
        store = JetStreamEventStore(nc)
        deadline = asyncio.get_running_loop().time() + WAIT_S
        while True:
            history = await store.load(tenant, intent_id)
            if history.events:
                return [decode_event(e) for e in history.events]
            assert asyncio.get_running_loop().time() < deadline, f"nothing recorded on {intent_id}"
            await asyncio.sleep(0.1)
    finally:
        await nc.close()


async def answer(system: System, tenant: str, run_id: str, intent_id: str) -> ModelResponse:
    """The model-facing response stored for an intent (polled with a deadline)."""
    nc = await system.connect()
    js = nc.jetstream()
    try:
        deadline = asyncio.get_running_loop().time() + WAIT_S
        while True:
            try:
                msg = await js.get_last_msg(RESPONSES, response_subject(tenant, run_id, intent_id))
                return msgspec.json.decode(msg.data or b"", type=ModelResponse)
            except nats.js.errors.NotFoundError:
                assert asyncio.get_running_loop().time() < deadline, f"no answer for {intent_id}"
                await asyncio.sleep(0.1)
    finally:
        await nc.close()


def rejection(events: list[Event]) -> CandidateRejected:
    first = events[0]
    assert isinstance(first, CandidateRejected), first
    return first


async def still_serving(system: System, gw: Gateway, world: World) -> None:
    """Intake is alive and an ordinary note goes all the way through."""
    assert system.processes["intake"].poll() is None, "intake exited"
    turn = await turn_on(gw)
    done = await turn.propose(tool="case.add_note", arguments='{"note": "still here"}', timeout_s=30)
    assert done.status == "executed"


async def test_argument_text_with_a_lone_surrogate_is_rejected(
    system: System, gw: Gateway, world: World
) -> None:
    invocations = world.invocations
    turn = await turn_on(gw)
    response = await turn.propose(tool="case.add_note", arguments='{"note": "\\ud800"}')
    assert (response.status, response.code) == ("rejected", "proposal.invalid")
    events = await recorded(system, TENANT, response.candidate_id)
    assert rejection(events).reason == "tool.arguments.malformed"
    assert world.invocations == invocations
    await still_serving(system, gw, world)


@pytest.mark.parametrize("tool", ["case add_note", "case.add_note.", "caśe.add_note", "a" * 5000,
                                  "case.>", "case.*", ".case.add_note"],
                         ids=["space", "trailing-dot", "non-ascii", "5000-chars", "gt", "star",
                              "leading-dot"])
async def test_a_tool_name_that_is_no_key_or_subject_is_rejected(
    tool: str, system: System, gw: Gateway, world: World
) -> None:
    invocations = world.invocations
    turn = await turn_on(gw)
    response = await turn.propose(tool=tool, arguments='{"note": "x"}')
    assert (response.status, response.code) == ("rejected", "proposal.invalid")
    event = rejection(await recorded(system, TENANT, response.candidate_id))
    assert event.reason == "tool.name-invalid"
    assert len(event.tool) <= 200
    assert world.invocations == invocations
    await still_serving(system, gw, world)


async def publish_raw(system: System, subject: str, body: bytes, msg_id: str) -> None:
    """Publish as a user the broker lets write any candidate subject (the services' account).

    An agent runtime may publish only ``lg.propose.<its tenant>.<one token>``; intake must
    still answer whatever reaches the stream, from anyone who can write it.
    """
    nc = await system.connect()
    try:
        await nc.jetstream().publish(subject, body, headers={"Nats-Msg-Id": msg_id})
    finally:
        await nc.close()


async def test_a_provider_item_nested_ten_thousand_deep_is_rejected(
    system: System, gw: Gateway, world: World
) -> None:
    turn = await turn_on(gw)
    run_id = turn.run.id
    body = (json.dumps({"run_id": run_id, "turn_id": turn.id, "call_id": "deep-1",
                        "tool": "case.add_note", "arguments": '{"note": "x"}'})[:-1]
            + ', "provider_item": ' + '{"a": ' * 10_000 + "1" + "}" * 10_000 + "}").encode()
    msg_id = f"deep-{random_id()}"
    await publish_raw(system, f"lg.propose.{TENANT}.{run_id}", body, msg_id)
    c = stand_in(run_id, msg_id)
    intent_id = intent_id_for(TENANT, run_id, c.call_id)
    event = rejection(await recorded(system, TENANT, intent_id))
    assert event.reason == "candidate.malformed" and "deeper" in event.detail
    response = await answer(system, TENANT, run_id, intent_id)
    assert (response.status, response.code) == ("rejected", "proposal.invalid")
    await still_serving(system, gw, world)


@pytest.mark.parametrize("subject", ["lg.propose.tenant-a.{run}.extra", "lg.propose.ténant.{run}",
                                     "lg.propose.tenant-a", "lg.propose._unroutable.{run}"])
async def test_a_candidate_on_a_subject_naming_no_run_is_recorded(
    subject: str, system: System, gw: Gateway, world: World
) -> None:
    turn = await turn_on(gw)
    subject = subject.format(run=turn.run.id)
    body = json.dumps({"run_id": turn.run.id, "turn_id": turn.id, "call_id": "c1",
                       "tool": "case.add_note", "arguments": '{"note": "x"}'}).encode()
    msg_id = f"unroutable-{random_id()}"
    await publish_raw(system, subject, body, msg_id)
    tenant = TENANT if subject.split(".")[2] == TENANT else UNROUTABLE_TENANT
    c = stand_in(INVALID_RUN, msg_id)
    event = rejection(await recorded(system, tenant, intent_id_for(tenant, INVALID_RUN, c.call_id)))
    assert event.reason == "candidate.malformed"
    await still_serving(system, gw, world)


async def test_an_oversize_candidate_fails_at_once_in_the_sdk(
    system: System, gw: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    turn = await turn_on(gw)
    publishes = 0
    publish = gw._js.publish

    async def counted(*args: object, **kwargs: object) -> object:
        nonlocal publishes
        publishes += 1
        return await publish(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(gw._js, "publish", counted)
    with pytest.raises(CandidateTooLarge) as caught:
        await turn.propose(tool="case.add_note", arguments='{"note": "' + "x" * 3_000_000 + '"}')
    assert caught.value.code == "candidate.too-large" and not caught.value.retryable
    assert publishes == 0  # known before publishing: the stream's limit is Lockgate's own
    # Should the SDK believe a larger limit, the stream's refusal (JetStream 10054) is
    # permanent: one publish, the same typed error, no retries.
    monkeypatch.setattr("lockgate.client.sdk.gateway.MAX_CANDIDATE_MESSAGE_BYTES", 8 * 1024 * 1024)
    with pytest.raises(CandidateTooLarge):
        await turn.propose(tool="case.add_note", arguments='{"note": "' + "x" * 3_000_000 + '"}')
    assert publishes == 1


async def test_a_candidate_the_sdk_cannot_encode_fails_at_once(gw: Gateway) -> None:
    turn = await turn_on(gw)
    with pytest.raises(InvalidCandidate) as lone:
        await turn.propose(tool="case.add_note", arguments='{"note": "\ud800"}')
    assert lone.value.code == "candidate.malformed"
    deep: dict[str, object] = {}
    for _ in range(10_000):
        deep = {"a": deep}
    with pytest.raises(InvalidCandidate):
        await turn.propose(tool="case.add_note", arguments='{"note": "x"}', provider_item=deep)


async def test_a_call_id_reused_with_other_bytes_is_refused_on_its_own_record(
    system: System, gw: Gateway, world: World
) -> None:
    turn = await turn_on(gw)
    writes = len(world.ledger())
    first = await turn.propose(tool="case.add_note", arguments='{"note": "first"}', call_id="same")
    assert first.status == "executed"
    other = await turn.propose(tool="case.add_note", arguments='{"note": "second"}', call_id="same")
    assert (other.status, other.code, other.call_id) == ("rejected", "proposal.invalid", "same")
    assert other.candidate_id != first.candidate_id
    assert other.candidate_id == reused_call_id_intent(TENANT, turn.run.id, "same", other.candidate_digest or "")
    event = rejection(await recorded(system, TENANT, other.candidate_id))
    assert event.reason == "proposal.call-id-reused" and event.call_id == "same"
    # The same bytes again are the same call: the first answer, not a second effect.
    again = await turn.propose(tool="case.add_note", arguments='{"note": "first"}', call_id="same")
    assert again == first
    # And the reused bytes again: the same refusal.
    assert await turn.propose(tool="case.add_note", arguments='{"note": "second"}', call_id="same") == other
    assert len(world.ledger()) - writes == 1
    own = await recorded(system, TENANT, first.candidate_id)
    assert isinstance(own[0], CandidateReceived)
    assert own[0].candidate_digest == first.candidate_digest
