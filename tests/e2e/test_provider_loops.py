"""Provider responses and streams through the real system: one write per call, answers in the provider's shape.

Each test hands Lockgate what a provider would send (checked against the provider's
published types first) and reads the world's ledger and the event store, not logs.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

import msgspec
import pytest

from lockgate.client import providers
from lockgate.client.providers import examples
from lockgate.client.providers import samples as s
from lockgate.client.sdk import Gateway, Run, Turn
from lockgate.core.ids import intent_id_for, random_id
from lockgate.eventstore.jetstream import JetStreamEventStore
from lockgate.intent.events import CandidateReceived, CandidateRejected, Event
from lockgate.testing.invariants import by_intent
from lockgate.testing.system import System
from lockgate.worlds.casenotes.world import World
from tests.unit.provider_shapes import check_event, check_response, check_results, check_tools

NAME = "case__add_note"
STREAMED = tuple(s.STREAMED)
#: What a tool result may tell the model: the model-facing projection, nothing more.
PROJECTION = {"status", "code", "field", "persistent", "alternatives", "retry_after_s", "result",
              "result_label"}


async def open_run(gw: Gateway) -> Run:
    return await gw.open_run(tenant="tenant-a", actor="user-42", context={"case_id": "case-123"})


async def new_turn(gw: Gateway) -> Turn:
    return await (await open_run(gw)).open_turn()


async def stored(system: System) -> dict[str, list[Event]]:
    nc = await system.connect()
    try:
        return by_intent([e async for e in JetStreamEventStore(nc).scan()])
    finally:
        await nc.close()


async def first_event(system: System, turn: Turn, call_id: str) -> Event:
    intent = intent_id_for("tenant-a", turn.run.id, call_id)
    deadline = asyncio.get_running_loop().time() + 10
    while True:
        history = (await stored(system)).get(intent)
        if history or asyncio.get_running_loop().time() > deadline:
            break
        await asyncio.sleep(0.1)
    assert history, f"nothing recorded for {call_id}"
    return history[0]


def contents(provider: str, outcome: providers.Outcome) -> list[dict[str, Any]]:
    """What each tool result tells the model, decoded."""
    out = []
    for result in outcome.tool_results():
        if provider == "openai.chat":
            out.append(msgspec.json.decode(result["content"]))
        elif provider == "openai.responses":
            out.append(msgspec.json.decode(result["output"]))
        elif provider == "anthropic.messages":
            out.append(msgspec.json.decode(result["content"]))
        else:
            out.append(result["functionResponse"]["response"])
    return out


def two_calls(provider: str, tag: str) -> bytes:
    ids: Sequence[str | None] = (None, None) if provider == "gemini" else ("call_a1", "call_a2")
    raw = s.RESPONSES[provider]([s.SampleCall(NAME, f'{{"note": "{tag} — erste Notiz"}}', ids[0]),
                                 s.SampleCall(NAME, f'{{"note": "{tag} — second"}}', ids[1])],
                                response_id=f"resp_{random_id()}")
    check_response(provider, raw)
    return raw


@pytest.mark.parametrize("provider", providers.PROVIDERS)
async def test_parallel_calls_write_once_each_and_again_nothing(
    provider: str, gw: Gateway, world: World
) -> None:
    turn = await new_turn(gw)
    raw = two_calls(provider, provider)
    before = len(world.ledger())
    outcome = await providers.propose_response(turn, provider, raw)
    assert [a.response.status for a in outcome.answers] == ["executed", "executed"], outcome
    written = world.ledger()[before:]
    assert sorted(w["intent_id"] for w in written) == sorted(a.response.candidate_id for a in outcome.answers)

    again = await providers.propose_response(turn, provider, raw)
    assert [a.response for a in again.answers] == [a.response for a in outcome.answers]
    assert len(world.ledger()) == before + 2

    check_results(provider, outcome.messages())
    for content in contents(provider, outcome):
        assert set(content) <= PROJECTION
        assert content["status"] == "executed" and content["result_label"] == "untrusted-data"
        assert set(content["result"]) == {"untrusted_data"}
    text = msgspec.json.encode(outcome.messages()).decode()
    assert not any(a.response.candidate_id in text for a in outcome.answers)


@pytest.mark.parametrize("provider", providers.PROVIDERS)
async def test_the_record_keeps_provider_model_and_item(provider: str, system: System, gw: Gateway) -> None:
    turn = await new_turn(gw)
    raw = two_calls(provider, "evidence")
    parsed = providers.parse_response(provider, raw, turn.tools)
    await providers.propose_response(turn, provider, raw)
    for call in parsed.calls:
        received = await first_event(system, turn, call.call_id)
        assert isinstance(received, CandidateReceived)
        assert received.provider == provider
        assert received.model == parsed.model
        assert received.provider_item == call.provider_item
        assert received.raw_arguments == call.arguments


async def test_duplicate_keys_reach_intake_and_are_refused(system: System, gw: Gateway, world: World) -> None:
    turn = await new_turn(gw)
    raw = s.anthropic([s.SampleCall(NAME, '{"note": "shown", "note": "hidden"}', "toolu_dup")],
                      response_id=f"msg_{random_id()}")
    check_response("anthropic.messages", raw)
    before = len(world.ledger())
    outcome = await providers.propose_response(turn, "anthropic.messages", raw)
    (answer,) = outcome.answers
    assert answer.response.status == "rejected"
    rejected = await first_event(system, turn, "toolu_dup")
    assert isinstance(rejected, CandidateRejected)
    assert rejected.reason == "tool.arguments.duplicate"
    assert len(world.ledger()) == before
    (user,) = outcome.messages()
    assert user["content"][0]["is_error"] is True


async def events_of(items: Sequence[bytes], provider: str) -> AsyncIterator[bytes]:
    for item in items:
        check_event(provider, item)
        yield item


@pytest.mark.parametrize("provider", STREAMED)
async def test_a_streamed_call_writes_once(provider: str, gw: Gateway, world: World) -> None:
    turn = await new_turn(gw)
    streamed = s.STREAMED[provider]([s.SampleCall(NAME, '{"note": "streamed — gestreamt"}', None)],
                                    response_id=f"r_{random_id()}")
    before = len(world.ledger())
    outcome = await providers.propose_stream(turn, provider, events_of(streamed, provider))
    assert [a.response.status for a in outcome.answers] == ["executed"]
    again = await providers.propose_stream(turn, provider, events_of(streamed, provider))
    assert again.answers[0].response == outcome.answers[0].response
    assert [w["intent_id"] for w in world.ledger()[before:]] == [outcome.answers[0].response.candidate_id]
    check_results(provider, outcome.messages())


def cut_stream(provider: str) -> list[bytes]:
    return s.STREAMED[provider]([s.SampleCall(NAME, '{"note": "cut off in the middle"}', f"call_{random_id()}")],
                                fragments=[['{"note": ', '"cut off ', 'in the middle"}']],
                                response_id=f"r_{random_id()}", finish=False)[:-1]


@pytest.mark.parametrize("provider", STREAMED)
async def test_a_stream_cut_mid_argument_writes_nothing(provider: str, system: System, gw: Gateway,
                                                         world: World) -> None:
    turn = await new_turn(gw)
    before = len(world.ledger())
    outcome = await providers.propose_stream(turn, provider, events_of(cut_stream(provider), provider))
    (answer,) = outcome.answers
    assert answer.call.failure == "stream.truncated"
    assert answer.response.status == "rejected"
    assert isinstance(await first_event(system, turn, answer.call.call_id), CandidateRejected)
    assert len(world.ledger()) == before
    check_results(provider, outcome.messages())


@pytest.mark.parametrize("provider", STREAMED)
async def test_a_cut_stream_is_recorded_with_its_cause(provider: str, system: System, gw: Gateway) -> None:
    turn = await new_turn(gw)
    outcome = await providers.propose_stream(turn, provider, events_of(cut_stream(provider), provider))
    (answer,) = outcome.answers
    rejected = await first_event(system, turn, answer.call.call_id)
    assert isinstance(rejected, CandidateRejected)
    assert rejected.reason == "stream.truncated"
    assert rejected.provider == provider
    assert rejected.raw_arguments == answer.call.arguments


async def stopped_midway(items: Sequence[bytes], stop: asyncio.Event, after: int) -> AsyncIterator[bytes]:
    for n, item in enumerate(items):
        check_event("anthropic.messages", item)
        if n == after:
            stop.set()
        yield item


def long_note_events() -> tuple[list[bytes], int]:
    text = '{"note": "a long note the user stopped"}'
    streamed = s.anthropic_events([s.SampleCall(NAME, text, f"toolu_{random_id()}")],
                                  fragments=[s.pieces(text, 5)], response_id=f"msg_{random_id()}")
    middle = next(i for i, e in enumerate(streamed) if b"input_json_delta" in e) + 2
    return streamed, middle


async def test_a_cancelled_stream_writes_nothing_and_tells_the_model_nothing(
    system: System, gw: Gateway, world: World
) -> None:
    turn = await new_turn(gw)
    streamed, middle = long_note_events()
    stop = asyncio.Event()
    before = len(world.ledger())
    outcome = await examples.anthropic_streamed_step(turn, stopped_midway(streamed, stop, middle), stop)
    (answer,) = outcome.answers
    assert answer.call.failure == "stream.cancelled"
    assert outcome.messages() == []  # the model never finished it: nothing to answer
    assert isinstance(await first_event(system, turn, answer.call.call_id), CandidateRejected)
    assert len(world.ledger()) == before


async def test_a_cancelled_stream_is_recorded_as_cancelled(system: System, gw: Gateway) -> None:
    turn = await new_turn(gw)
    streamed, middle = long_note_events()
    stop = asyncio.Event()
    outcome = await examples.anthropic_streamed_step(turn, stopped_midway(streamed, stop, middle), stop)
    rejected = await first_event(system, turn, outcome.answers[0].call.call_id)
    assert isinstance(rejected, CandidateRejected) and rejected.reason == "stream.cancelled"


def hosted_search_response() -> bytes:
    raw = (b'{"id": "resp_' + random_id().encode() + b'", "object": "response", "created_at": 1,'
           b' "model": "gpt-5", "status": "completed", "parallel_tool_calls": true, "tool_choice": "auto",'
           b' "tools": [], "output": [{"type": "web_search_call", "id": "ws_' + random_id().encode() + b'",'
           b' "status": "completed", "action": {"type": "search", "query": "q"}}]}')
    check_response("openai.responses", raw)
    return raw


async def test_an_unknown_item_is_on_the_record_and_never_runs(system: System, gw: Gateway,
                                                               world: World) -> None:
    turn = await new_turn(gw)
    before = len(world.ledger())
    outcome = await providers.propose_response(turn, "openai.responses", hosted_search_response())
    (answer,) = outcome.answers
    assert (answer.call.failure, answer.response.status) == ("provider.unknown-item", "rejected")
    assert outcome.tool_results() == []
    assert isinstance(await first_event(system, turn, answer.call.call_id), CandidateRejected)
    assert len(world.ledger()) == before


async def test_an_unknown_item_is_recorded_with_its_cause(system: System, gw: Gateway) -> None:
    turn = await new_turn(gw)
    outcome = await providers.propose_response(turn, "openai.responses", hosted_search_response())
    rejected = await first_event(system, turn, outcome.answers[0].call.call_id)
    assert isinstance(rejected, CandidateRejected)
    assert rejected.reason == "provider.unknown-item"


# --- the loops the documentation shows (docs/agent-runtimes.md), run as written --------------------------------------


def finished(provider: str) -> bytes:
    """A response in which the model calls nothing more."""
    raw = {
        "openai.chat": b'{"id": "chatcmpl-done", "object": "chat.completion", "created": 1, "model": "gpt-4.1",'
                       b' "choices": [{"index": 0, "finish_reason": "stop",'
                       b' "message": {"role": "assistant", "content": "Noted."}}]}',
        "openai.responses": b'{"id": "resp_done", "object": "response", "created_at": 1, "model": "gpt-5",'
                            b' "status": "completed", "parallel_tool_calls": true, "tool_choice": "auto",'
                            b' "tools": [], "output": [{"type": "message", "id": "msg_1", "role": "assistant",'
                            b' "status": "completed", "content": [{"type": "output_text", "text": "Noted.",'
                            b' "annotations": []}]}]}',
        "anthropic.messages": b'{"id": "msg_done", "type": "message", "role": "assistant", "model": "claude",'
                              b' "content": [{"type": "text", "text": "Noted."}], "stop_reason": "end_turn",'
                              b' "usage": {"input_tokens": 1, "output_tokens": 1}}',
        "gemini": b'{"candidates": [{"content": {"role": "model", "parts": [{"text": "Noted."}]}}],'
                  b' "modelVersion": "gemini-2.5-flash"}',
    }[provider]
    check_response(provider, raw)
    return raw


TASKS = {"openai.chat": examples.openai_chat_task, "openai.responses": examples.openai_responses_task,
         "anthropic.messages": examples.anthropic_task, "gemini": examples.gemini_task}


@pytest.mark.parametrize("provider", providers.PROVIDERS)
async def test_the_documented_loop_runs_a_task(provider: str, gw: Gateway, world: World) -> None:
    replies = [s.RESPONSES[provider](
        [s.SampleCall(NAME, '{"note": "Customer called back."}', None if provider == "gemini" else "call_doc")],
        response_id=f"r_{random_id()}"), finished(provider)]
    asked: list[list[dict[str, Any]]] = []

    async def ask(conversation: list[dict[str, Any]], tools: list[dict[str, Any]]) -> bytes:
        check_tools(provider, tools)
        assert NAME in msgspec.json.encode(tools).decode()
        asked.append(list(conversation))
        return replies[len(asked) - 1]

    before = len(world.ledger())
    conversation = await TASKS[provider](await open_run(gw), ask)
    assert len(asked) == 2 and len(world.ledger()) == before + 1
    results = answers_in(provider, conversation)
    check_results(provider, results)
    assert contents_of(provider, results) == ["executed"]


def answers_in(provider: str, conversation: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tool results the loop appended to the conversation."""
    if provider == "openai.chat":
        return [m for m in conversation if m.get("role") == "tool"]
    if provider == "openai.responses":
        return [m for m in conversation if m.get("type") == "function_call_output"]
    return conversation[-1:]


def contents_of(provider: str, results: list[dict[str, Any]]) -> list[str]:
    if provider == "anthropic.messages":
        return [msgspec.json.decode(b["content"])["status"] for b in results[0]["content"]]
    if provider == "gemini":
        return [p["functionResponse"]["response"]["status"] for p in results[0]["parts"]]
    key = "content" if provider == "openai.chat" else "output"
    return [msgspec.json.decode(r[key])["status"] for r in results]


def test_the_docs_quote_the_examples_verbatim() -> None:
    import re
    from pathlib import Path

    import lockgate.client.providers.examples as module

    readme = (Path(__file__).resolve().parents[2] / "docs" / "agent-runtimes.md").read_text()
    doc = readme.split("## Where agents plug in", 1)[1].split("\n## ", 1)[0]
    source = Path(module.__file__).read_text()
    blocks = re.findall(r"```python\n(.*?)```", doc, re.DOTALL)
    assert len(blocks) == 6
    for block in blocks:
        assert block in source, block[:80]
