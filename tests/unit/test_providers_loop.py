"""Proposing a provider's calls: every one concurrently, the same ids every time, failures on the record."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from lockgate.client import providers
from lockgate.client.providers import samples as s
from lockgate.client.sdk import ResponseTimeout, Turn
from lockgate.contracts.messages import Tool
from lockgate.contracts.responses import ModelResponse

TOOLS = (Tool("case.add_note", "Add a note.", {"type": "object"}),)
NAME = "case__add_note"


@dataclass
class FakeTurn:
    """Answers like Lockgate: a failure is rejected, a call executed; counts what runs at once."""

    tools: tuple[Tool, ...] = TOOLS
    proposed: list[dict[str, Any]] = field(default_factory=list)
    at_once: int = 0
    most_at_once: int = 0
    fail_on: str | None = None

    async def propose(self, *, tool: str, arguments: str, call_id: str | None = None,
                      timeout_s: float = 30.0, provider_item: dict[str, Any] | None = None,
                      provider: str = "", model: str = "", follows: str | None = None,
                      assembly_failure: str | None = None) -> ModelResponse:
        self.proposed.append(dict(tool=tool, arguments=arguments, call_id=call_id, provider=provider,
                                  model=model, provider_item=provider_item,
                                  assembly_failure=assembly_failure))
        self.at_once += 1
        self.most_at_once = max(self.most_at_once, self.at_once)
        await asyncio.sleep(0.01)
        self.at_once -= 1
        if call_id == self.fail_on:
            raise ResponseTimeout("no response", code="response.timeout")
        assert call_id is not None
        if assembly_failure is not None:
            return ModelResponse(candidate_id="i-" + call_id, call_id=call_id, status="rejected",
                                 code="proposal.invalid")
        return ModelResponse(candidate_id="i-" + call_id, call_id=call_id, status="executed",
                             code="operation.executed", result={"note_id": "n-1"},
                             result_label="untrusted-data")


def test_a_real_turn_is_a_proposer() -> None:
    def takes(turn: providers.Proposer) -> None: ...
    takes(Turn(run=None, id="t", catalogue_digest="", tools=TOOLS))  # type: ignore[arg-type]


@pytest.mark.parametrize("provider", providers.PROVIDERS)
async def test_every_call_is_proposed_concurrently_with_its_evidence(provider: str) -> None:
    turn = FakeTurn()
    raw = s.RESPONSES[provider]([s.SampleCall(NAME, '{"note": "a"}', "call_1"),
                                 s.SampleCall(NAME, '{"note": "b"}', "call_2")])
    outcome = await providers.propose_response(turn, provider, raw)
    assert turn.most_at_once == 2
    assert [p["call_id"] for p in turn.proposed] == ["call_1", "call_2"]
    first = turn.proposed[0]
    assert (first["tool"], first["arguments"], first["provider"]) == ("case.add_note", '{"note": "a"}', provider)
    assert first["model"] and first["provider_item"] and first["assembly_failure"] is None
    assert len(outcome.tool_results()) == 2


async def test_the_same_response_proposes_the_same_candidates() -> None:
    turn = FakeTurn()
    raw = s.gemini([s.SampleCall(NAME, '{"note": "a"}'), s.SampleCall(NAME, '{"note": "a"}')])
    await providers.propose_response(turn, "gemini", raw)
    await providers.propose_response(turn, "gemini", raw)
    first, second = turn.proposed[:2], turn.proposed[2:]
    assert first == second and first[0]["call_id"] != first[1]["call_id"]


async def test_failures_are_proposed_as_rejected_candidates_with_their_cause() -> None:
    turn = FakeTurn()
    raw = (b'{"id": "msg_1", "type": "message", "role": "assistant", "model": "claude", "content": ['
           b'{"type": "tool_use", "id": "toolu_1", "input": {"note": "x"}},'
           b'{"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}],'
           b' "usage": {"input_tokens": 1, "output_tokens": 1}}')
    outcome = await providers.propose_response(turn, "anthropic.messages", raw)
    assert [(p["tool"], p["assembly_failure"]) for p in turn.proposed] == [
        ("", "provider.item-malformed"), ("", "provider.unknown-item")]
    (user,) = outcome.messages()  # the tool_use is answered (rejected); the server's block is not
    assert [(b["tool_use_id"], b["is_error"]) for b in user["content"]] == [("toolu_1", True)]


async def test_one_failed_proposal_is_raised_after_the_others_finished() -> None:
    turn = FakeTurn(fail_on="call_1")
    raw = s.chat([s.SampleCall(NAME, "{}", "call_1"), s.SampleCall(NAME, "{}", "call_2")])
    with pytest.raises(ResponseTimeout):
        await providers.propose_response(turn, "openai.chat", raw)
    assert [p["call_id"] for p in turn.proposed] == ["call_1", "call_2"]


async def events(items: list[bytes], gate: asyncio.Event | None = None) -> AsyncIterator[bytes]:
    for n, item in enumerate(items):
        if gate is not None and n == len(items) - 1:
            await gate.wait()  # the provider stalls mid-argument
        yield item


@pytest.mark.parametrize("provider", tuple(s.STREAMED))
async def test_a_stream_is_proposed_once_it_ended(provider: str) -> None:
    turn = FakeTurn()
    streamed = s.STREAMED[provider]([s.SampleCall(NAME, '{"note": "a"}', "call_1")])
    outcome = await providers.propose_stream(turn, provider, events(streamed))
    assert [(a.call.call_id, a.response.status) for a in outcome.answers] == [("call_1", "executed")]


async def test_a_cancelled_stream_task_records_what_was_open_and_is_still_cancelled() -> None:
    turn = FakeTurn()
    streamed = s.anthropic_events([s.SampleCall(NAME, '{"note": "abcdefghijklmn"}', "toolu_1")], finish=False)
    task = asyncio.create_task(providers.propose_stream(turn, "anthropic.messages",
                                                        events(streamed, asyncio.Event())))
    await asyncio.sleep(0.05)  # the stream is stalled mid-argument
    assert turn.proposed == []
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(50):
        if turn.proposed:
            break
        await asyncio.sleep(0.01)
    assert [(p["call_id"], p["assembly_failure"]) for p in turn.proposed] == [("toolu_1", "stream.cancelled")]


async def test_a_runtime_can_propose_calls_as_they_finish() -> None:
    turn = FakeTurn()
    assembly = providers.stream("openai.responses", TOOLS)
    finished = []
    for event in s.responses_events([s.SampleCall(NAME, "{}", "call_1"), s.SampleCall(NAME, "{}", "call_2")]):
        finished.extend(assembly.feed(event))
    outcome = await providers.propose_calls(turn, "openai.responses", assembly.model, finished)
    assert [a.call.call_id for a in outcome.answers] == ["call_1", "call_2"]


async def test_a_stream_that_breaks_records_what_arrived_then_raises() -> None:
    turn = FakeTurn()
    streamed = s.chat_chunks([s.SampleCall(NAME, '{"note": "abcdefghijklmn"}', "call_1")], finish=False)

    async def dropped() -> AsyncIterator[bytes]:
        for item in streamed:
            yield item
        raise ConnectionResetError("the provider went away")

    with pytest.raises(ConnectionResetError):
        await providers.propose_stream(turn, "openai.chat", dropped())
    assert [(p["call_id"], p["assembly_failure"]) for p in turn.proposed] == [("call_1", "stream.truncated")]
