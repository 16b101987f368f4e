"""Fuzz: whatever a runtime sends, every candidate is answered and nothing that is refused runs.

Seeded (derandomized) property tests drive arbitrary candidates through the real
system, one example at a time: raw bytes published straight to
``lg.propose.<tenant>.<run>`` (any bytes, and JSON envelopes whose every field is
arbitrary), and proposals through the SDK (any tool name, argument text, provider item,
call ids reused with other bytes). For each: an answer arrives (a stored model-facing
response on the intent the protocol names, or for the SDK a typed error before anything
is sent), and a refusal never reaches the adapter. Afterwards every stored event decodes,
the invariants (docs/design.md) hold over the whole store and the world's ledger, and every service
still answers.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from nats.aio.client import Client
from nats.js.errors import NotFoundError

from lockgate.client.sdk import CandidateTooLarge, Gateway, InvalidCandidate, Turn
from lockgate.contracts.responses import ModelResponse
from lockgate.contracts.subjects import propose_subject, response_subject
from lockgate.core.ids import intent_id_for, random_id, reused_call_id_intent
from lockgate.eventstore.jetstream import JetStreamEventStore
from lockgate.intake.domain import read_candidate
from lockgate.intent.codec import decode_event
from lockgate.intent.events import Event
from lockgate.operations.status import CHILDREN, check_status
from lockgate.runtime.topology import RESPONSES
from lockgate.testing.invariants import by_intent, violations
from lockgate.testing.system import System
from lockgate.worlds.casenotes.world import World

TENANT, ACTOR = "tenant-a", "user-42"
#: Examples per property (a fixed seed: CI sees the same ones every run).
RAW_EXAMPLES = 120
SDK_EXAMPLES = 80
#: Longest wait for one answer.
ANSWER_S = 30.0
REFUSED = ("rejected", "denied")
#: What the runs counted, for the module's last test (and whoever reads the output).
SEEN: Counter[str] = Counter()


@dataclass
class Harness:
    """A connection on a loop of the module's own (hypothesis drives sync functions)."""

    loop: asyncio.AbstractEventLoop
    gw: Gateway
    turn: Turn
    world: World
    #: Reads the record and publishes raw candidates: a user of the services' account, which
    #: may write any candidate subject (an agent runtime may write only its tenant's).
    admin: Client

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)


@pytest.fixture(scope="module")
def harness(system: System) -> Iterator[Harness]:
    loop = asyncio.new_event_loop()
    gw = loop.run_until_complete(system.gateway(TENANT, timeout_s=10.0))
    admin = loop.run_until_complete(system.connect())

    async def open_turn() -> Turn:
        run = await gw.open_run(tenant=TENANT, actor=ACTOR, context={"case_id": "case-123"})
        return await run.open_turn()

    try:
        yield Harness(loop, gw, loop.run_until_complete(open_turn()), World(system.world_dir), admin)
    finally:
        loop.run_until_complete(gw.close())
        loop.run_until_complete(admin.close())
        loop.close()


async def stored_answer(nc: Client, tenant: str, run_id: str, intent_id: str) -> ModelResponse | None:
    try:
        msg = await nc.jetstream().get_last_msg(RESPONSES, response_subject(tenant, run_id, intent_id),
                                                   direct=True)
    except NotFoundError:
        return None
    return msgspec.json.decode(msg.data or b"", type=ModelResponse)


async def until_stored(nc: Client, run_id: str, intent_id: str) -> bool:
    deadline = asyncio.get_running_loop().time() + ANSWER_S
    while await stored_answer(nc, TENANT, run_id, intent_id) is None:
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


async def first_event(nc: Client, tenant: str, intent_id: str) -> Event | None:
    history = await JetStreamEventStore(nc).load(tenant, intent_id)
    return decode_event(history.events[0]) if history.events else None


async def answer_to_raw(nc: Client, subject: str, body: bytes, msg_id: str) -> ModelResponse:
    """Where the protocol says the answer to these bytes is, once it is there."""
    read = read_candidate(subject, body, msg_id)
    c = read.candidate
    own = intent_id_for(read.tenant, c.run_id, c.call_id)
    reuse = reused_call_id_intent(read.tenant, c.run_id, c.call_id, read.candidate_digest)
    deadline = asyncio.get_running_loop().time() + ANSWER_S
    while asyncio.get_running_loop().time() < deadline:
        first = await first_event(nc, read.tenant, own)
        target = own
        if read.problem is None and first is not None and getattr(first, "candidate_digest", "") not in (
                "", read.candidate_digest):
            target = reuse  # the call id was someone else's bytes first
        if first is not None:
            answer = await stored_answer(nc, read.tenant, c.run_id, target)
            if answer is not None and answer.status != "pending_approval":
                return answer
        await asyncio.sleep(0.05)
    raise AssertionError(f"no answer to {body[:120]!r} on {subject}")


# -- strategies -------------------------------------------------------------------------------

any_text = st.text(max_size=80)
json_leaf = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | any_text
json_value = st.recursive(json_leaf, lambda inner: st.lists(inner, max_size=4)
                          | st.dictionaries(any_text, inner, max_size=4), max_leaves=25)
call_ids = st.sampled_from(["c1", "c2", "fuzz-call"]) | st.text(max_size=70)
tools = st.one_of(
    st.just("case.add_note"),
    st.sampled_from(["case.export_all_notes", "case add_note", "case.add_note.", "caśe.add_note",
                     "a" * 5000, "", "case.>"]),
    any_text,
)
#: Arguments a note could be (some valid, some empty or too long after normalization).
notes = any_text.map(lambda t: json.dumps({"note": t}))
arguments = st.one_of(
    notes,
    st.sampled_from(['{"note": "\\ud800"}', '{"note":"a","note":"b"}', "[" * 3000, '{"note": 1e999}',
                     "{}", '{"note": "x", "caseId": "c"}', '{"note": ' + "[" * 40 + "]" * 40 + "}"]),
    any_text,
    json_value.map(json.dumps),
)


def envelope(run_id: str, turn_id: str) -> st.SearchStrategy[bytes]:
    fields = st.fixed_dictionaries(
        {},
        optional={
            "run_id": st.just(run_id) | any_text,
            "turn_id": st.just(turn_id) | any_text,
            "call_id": call_ids,
            "tool": tools,
            "arguments": arguments,
            "provider_item": json_value,
            "extra": json_value,
        },
    )
    shaped = fields.map(lambda d: json.dumps(d).encode())
    # Well-formed envelopes whose call id, tool, arguments and provider item are fuzzed.
    proper = st.builds(
        lambda call_id, tool, args, item: json.dumps(
            {"run_id": run_id, "turn_id": turn_id, "call_id": call_id, "tool": tool, "arguments": args,
             "provider_item": item}).encode(),
        st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True), tools, arguments,
        st.none() | st.dictionaries(any_text, json_value, max_size=3))
    return st.one_of(proper, shaped, st.binary(max_size=300), json_value.map(lambda v: json.dumps(v).encode()))


@pytest.fixture(scope="module")
def ids(harness: Harness) -> tuple[str, str]:
    return harness.turn.run.id, harness.turn.id


# -- the properties ---------------------------------------------------------------------------


def check_raw(harness: Harness, body: bytes) -> None:
    run_id = harness.turn.run.id
    subject = propose_subject(TENANT, run_id)
    msg_id = f"fuzz-{random_id()}"
    before = harness.world.invocations

    async def go() -> ModelResponse:
        await harness.admin.jetstream().publish(subject, body, headers={"Nats-Msg-Id": msg_id})
        return await answer_to_raw(harness.admin, subject, body, msg_id)

    answer = harness.run(go())
    SEEN[f"raw {answer.status}"] += 1
    if answer.status in REFUSED:
        assert harness.world.invocations == before, (body[:200], answer)


DEEP = ('{"run_id": "%s", "turn_id": "%s", "call_id": "deep", "tool": "case.add_note", '
        '"arguments": "{}", "provider_item": ' + '{"a": ' * 10_000 + "1" + "}" * 10_000 + "}")


def test_any_bytes_published_as_a_candidate_are_answered(harness: Harness, ids: tuple[str, str]) -> None:
    run_id, turn_id = ids

    @settings(max_examples=RAW_EXAMPLES, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(envelope(run_id, turn_id))
    @example((DEEP % (run_id, turn_id)).encode())
    @example(json.dumps({"run_id": run_id, "turn_id": turn_id, "call_id": "c1", "tool": "case.add_note",
                         "arguments": '{"note": "first bytes"}'}).encode())
    @example(json.dumps({"run_id": run_id, "turn_id": turn_id, "call_id": "c1", "tool": "case.add_note",
                         "arguments": '{"note": "other bytes"}'}).encode())
    @example(b"\xff\xfe\x00")
    def prop(body: bytes) -> None:
        check_raw(harness, body)

    prop()


def check_sdk(harness: Harness, tool: str, args: str, call_id: str, item: Any) -> None:
    before = harness.world.invocations
    provider_item = item if isinstance(item, dict) else None

    async def go() -> ModelResponse | str:
        try:
            return await harness.turn.propose(tool=tool, arguments=args, call_id=call_id,
                                              provider_item=provider_item, timeout_s=ANSWER_S)
        except (CandidateTooLarge, InvalidCandidate) as exc:
            return exc.code  # refused by the SDK before anything was sent: a typed answer

    answer = harness.run(go())
    if isinstance(answer, str):
        SEEN[f"sdk {answer}"] += 1
        assert harness.world.invocations == before
        return
    SEEN[f"sdk {answer.status}"] += 1
    assert answer.call_id == call_id
    # Stored too (the SDK may hear it before the stream has it: poll with a deadline).
    assert harness.run(until_stored(harness.admin, harness.turn.run.id, answer.candidate_id))
    if answer.status in REFUSED:
        assert harness.world.invocations == before, (tool[:80], args[:80], answer)


def test_any_proposal_through_the_sdk_is_answered(harness: Harness) -> None:
    surrogates = st.text(alphabet=st.characters(codec=None, categories=("Cs", "Ll")), max_size=5)

    fresh = st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True)
    reused_ids = st.sampled_from(["s1", "s2", "s3"])  # the same call ids again, other bytes mostly

    @settings(max_examples=SDK_EXAMPLES, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(tools, st.one_of(arguments, arguments, surrogates), st.one_of(fresh, fresh, reused_ids),
           json_value)
    @example("case.add_note", '{"note": "' + "x" * 3_000_000 + '"}', "huge", None)
    @example("case.add_note", '{"note": "\ud800"}', "lone", None)
    @example("case.add_note", '{"note": "same call"}', "s1", None)
    @example("case.add_note", '{"note": "same call, other bytes"}', "s1", None)
    def prop(tool: str, args: str, call_id: str, item: Any) -> None:
        check_sdk(harness, tool, args, call_id, item)

    prop()


async def test_the_store_is_whole_and_every_service_still_answers(system: System, gw: Gateway) -> None:
    print(f"fuzz examples by answer: {dict(sorted(SEEN.items()))}")
    assert sum(SEEN.values()) >= RAW_EXAMPLES + SDK_EXAMPLES
    nc = await system.connect()
    try:
        recorded = [e async for e in JetStreamEventStore(nc).scan()]
        histories = by_intent(recorded)  # every stored event decodes
        assert violations(histories, World(system.world_dir).ledger()) == []
        answers = await check_status(nc, [name for name, _ in CHILDREN], timeout_s=2.0)
        assert all(answers.values()), answers
    finally:
        await nc.close()
    run = await gw.open_run(tenant=TENANT, actor=ACTOR, context={"case_id": "case-123"})
    done = await (await run.open_turn()).propose(tool="case.add_note", arguments='{"note": "after the fuzz"}')
    assert done.status == "executed"
