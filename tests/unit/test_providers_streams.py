"""Streamed tool calls: a call exists only once its item is done; every other ending is a typed failure.

Every event these tests feed is checked against the provider's published stream event
type first: the failures come from sequences of valid events, as a real stream's would.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from provider_shapes import check_event

from lockgate.client.providers import MAX_FAILURE_TEXT_BYTES, ProviderError, stream
from lockgate.client.providers import samples as s
from lockgate.client.providers.calls import ProviderCall
from lockgate.client.providers.streams import StreamAssembly
from lockgate.contracts.messages import Tool

TOOLS = (Tool("case.add_note", "Add a note.", {"type": "object"}),)
NAME = "case__add_note"
NOTE = '{"note": "Kunde rief zurück 🎉", "note": "dup"}'
STREAMED = tuple(s.STREAMED)


def fed(provider: str, events: Sequence[bytes | dict[str, Any]], **options: Any) -> StreamAssembly:
    assembly = stream(provider, TOOLS, **options)
    for event in events:
        check_event(provider, event)
        assembly.feed(event)
    return assembly


def only(assembly: StreamAssembly) -> ProviderCall:
    (item,) = assembly.items()
    return item


def events(provider: str, calls: Sequence[s.SampleCall], **kw: Any) -> list[bytes]:
    return s.STREAMED[provider](calls, **kw)


@pytest.mark.parametrize("provider", STREAMED)
def test_a_streamed_call_is_assembled_exactly(provider: str) -> None:
    assembly = fed(provider, events(provider, [s.SampleCall(NAME, NOTE, "call_1")]))
    assembly.end()
    call = only(assembly)
    assert (call.tool, call.arguments, call.call_id, call.failure) == ("case.add_note", NOTE, "call_1", None)
    assert assembly.model and call.provider == provider


@pytest.mark.parametrize("provider", STREAMED)
def test_parallel_streamed_calls_and_empty_arguments(provider: str) -> None:
    assembly = fed(provider, events(provider, [s.SampleCall(NAME, '{"note": "a"}', "call_1"),
                                               s.SampleCall(NAME, "", "call_2")]))
    assembly.end()
    assert [(c.call_id, c.arguments, c.failure) for c in assembly.items()] == [
        ("call_1", '{"note": "a"}', None), ("call_2", "{}", None)]


@pytest.mark.parametrize("provider", STREAMED)
def test_nothing_is_a_call_before_its_boundary(provider: str) -> None:
    assembly = stream(provider, TOOLS)
    all_events = events(provider, [s.SampleCall(NAME, NOTE, "call_1")])
    finished: list[ProviderCall] = []
    for event in all_events:
        finished.extend(assembly.feed(event))
        if not finished:
            assert assembly.items() == ()
    drafts_seen = stream(provider, TOOLS)
    sizes = []
    for event in events(provider, [s.SampleCall(NAME, NOTE, "call_1")], finish=False):
        drafts_seen.feed(event)
        sizes.extend(d.size_bytes for d in drafts_seen.drafting())
    assert sizes and sizes == sorted(sizes)
    assert {d.tool for d in drafts_seen.drafting()} == {"case.add_note"}
    assert drafts_seen.items() == ()


@pytest.mark.parametrize("provider", STREAMED)
def test_the_same_stream_gives_the_same_call_ids(provider: str) -> None:
    calls = [s.SampleCall(NAME, '{"note": "a"}', None), s.SampleCall(NAME, '{"note": "a"}', None)]
    one, two = (fed(provider, events(provider, calls)) for _ in range(2))
    ids = [c.call_id for c in one.items()]
    assert ids == [c.call_id for c in two.items()] and len(set(ids)) == 2


@pytest.mark.parametrize("provider", STREAMED)
def test_a_stream_that_ends_mid_argument_is_truncated(provider: str) -> None:
    cut = events(provider, [s.SampleCall(NAME, NOTE, "call_1")], finish=False)[:-1]
    assembly = fed(provider, cut)
    assert assembly.items() == ()
    (failure,) = assembly.end()
    assert (failure.failure, failure.tool, failure.call_id) == ("stream.truncated", "case.add_note", "call_1")
    assert NOTE.startswith(failure.arguments) and failure.arguments != NOTE
    assert failure.answered  # the model did emit the call: it is told it was rejected


@pytest.mark.parametrize("provider", STREAMED)
def test_a_cancelled_stream_records_every_open_item(provider: str) -> None:
    calls = [s.SampleCall(NAME, '{"note": "a"}', "call_1"), s.SampleCall(NAME, NOTE, "call_2")]
    cut = events(provider, calls, finish=False)[:-1]
    assembly = fed(provider, cut)
    cancelled = assembly.cancel()
    assert [c.failure for c in cancelled] == ["stream.cancelled"] * len(cancelled) and cancelled
    assert all(not c.answered for c in cancelled)  # nothing to tell the model
    assert [c.call_id for c in assembly.items()][-1] == "call_2"
    assert assembly.feed(events(provider, calls)[-1]) == ()  # nothing after a cancellation


def test_chat_arguments_that_are_not_json_at_the_finish_are_truncated() -> None:
    chunks = events("openai.chat", [s.SampleCall(NAME, '{"note": "a"', "call_1")])
    (failure,) = fed("openai.chat", chunks).items()
    assert (failure.failure, failure.arguments) == ("stream.truncated", '{"note": "a"')


def test_anthropic_block_stop_with_incomplete_json_is_truncated() -> None:
    blocks = events("anthropic.messages", [s.SampleCall(NAME, '{"note": ', "toolu_1")])
    assert only(fed("anthropic.messages", blocks)).failure == "stream.truncated"


def chat_delta(index: int, **fields: Any) -> bytes:
    return msgspec.json.encode({"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1,
                                "model": "gpt-4.1", "choices": [{"index": 0, "delta": {"tool_calls": [
                                    {"index": index, **fields}]}, "finish_reason": None}]})


def chat_finish() -> bytes:
    return msgspec.json.encode({"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1,
                                "model": "gpt-4.1", "choices": [{"index": 0, "delta": {},
                                                                 "finish_reason": "tool_calls"}]})


def test_a_second_id_for_one_chat_index_conflicts() -> None:
    assembly = fed("openai.chat", [
        chat_delta(0, id="call_1", type="function", function={"name": NAME, "arguments": '{"note"'}),
        chat_delta(0, id="call_2", function={"arguments": ': "x"}'}), chat_finish()])
    failure = only(assembly)
    assert (failure.failure, failure.arguments, failure.call_id) == (
        "stream.conflicting-delta", '{"note"', "call_1")


def test_a_second_name_for_one_chat_index_conflicts_but_a_repeat_does_not() -> None:
    conflicting = fed("openai.chat", [
        chat_delta(0, id="call_1", type="function", function={"name": NAME, "arguments": ""}),
        chat_delta(0, function={"name": "item__publish", "arguments": "{}"}), chat_finish()])
    assert only(conflicting).failure == "stream.conflicting-delta"
    repeated = fed("openai.chat", [
        chat_delta(0, id="call_1", type="function", function={"name": NAME, "arguments": "{"}),
        chat_delta(0, id="call_1", function={"name": NAME, "arguments": "}"}), chat_finish()])
    assert (only(repeated).failure, only(repeated).arguments) == (None, "{}")


def test_a_chat_delta_after_the_finish_turns_the_call_into_a_conflict() -> None:
    assembly = stream("openai.chat", TOOLS)
    first = [chat_delta(0, id="call_1", type="function", function={"name": NAME, "arguments": '{"note": "a"}'}),
             chat_finish()]
    for event in first:
        check_event("openai.chat", event)
        assembly.feed(event)
    assert only(assembly).failure is None
    late = chat_delta(0, function={"arguments": "x"})
    check_event("openai.chat", late)
    (failure,) = assembly.feed(late)
    assert (failure.failure, failure.call_id) == ("stream.conflicting-delta", "call_1")
    assert only(assembly).failure == "stream.conflicting-delta"


def test_a_new_chat_index_after_the_finish_conflicts() -> None:
    assembly = fed("openai.chat", [
        chat_delta(0, id="call_1", type="function", function={"name": NAME, "arguments": "{}"}),
        chat_finish(), chat_delta(1, id="call_2", type="function", function={"name": NAME, "arguments": "{}"})])
    assert [(c.call_id, c.failure) for c in assembly.items()] == [
        ("call_1", None), ("call_2", "stream.conflicting-delta")]


def anthropic_event(**fields: Any) -> bytes:
    return msgspec.json.encode(fields)


def test_two_content_block_starts_for_one_index_repeat_a_field() -> None:
    start = anthropic_event(type="content_block_start", index=1,
                            content_block={"type": "tool_use", "id": "toolu_1", "name": NAME, "input": {}})
    assembly = fed("anthropic.messages", [
        start, anthropic_event(type="content_block_delta", index=1,
                               delta={"type": "input_json_delta", "partial_json": '{"note": "a"}'}),
        start, anthropic_event(type="content_block_stop", index=1)])
    failure = only(assembly)
    assert (failure.failure, failure.arguments) == ("stream.repeated-field", '{"note": "a"}')


def test_an_anthropic_delta_after_the_block_stopped_conflicts() -> None:
    good = events("anthropic.messages", [s.SampleCall(NAME, '{"note": "a"}', "toolu_1")], finish=False)
    assembly = fed("anthropic.messages", [
        *good, anthropic_event(type="content_block_stop", index=1),
        anthropic_event(type="content_block_delta", index=1,
                        delta={"type": "input_json_delta", "partial_json": " "})])
    assert only(assembly).failure == "stream.conflicting-delta"


def test_an_anthropic_server_tool_block_is_recorded_not_assembled() -> None:
    assembly = fed("anthropic.messages", [
        anthropic_event(type="content_block_start", index=0, content_block={
            "type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}),
        anthropic_event(type="content_block_delta", index=0,
                        delta={"type": "input_json_delta", "partial_json": '{"query": "q"}'}),
        anthropic_event(type="content_block_stop", index=0)])
    item = only(assembly)
    assert (item.failure, item.answered) == ("provider.unknown-item", False)


def responses_event(**fields: Any) -> bytes:
    return msgspec.json.encode({"sequence_number": 1, **fields})


FC = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": NAME, "arguments": ""}


def test_responses_done_arguments_that_differ_from_the_deltas_conflict() -> None:
    assembly = fed("openai.responses", [
        responses_event(type="response.output_item.added", output_index=0, item=FC),
        responses_event(type="response.function_call_arguments.delta", item_id="fc_1", output_index=0,
                        delta='{"note": "a"}'),
        responses_event(type="response.function_call_arguments.done", item_id="fc_1", output_index=0,
                        name=NAME, arguments='{"note": "b"}')])
    assert only(assembly).failure == "stream.conflicting-delta"


def test_a_second_arguments_done_repeats_a_field() -> None:
    done = responses_event(type="response.function_call_arguments.done", item_id="fc_1", output_index=0,
                           name=NAME, arguments="{}")
    assembly = fed("openai.responses", [
        responses_event(type="response.output_item.added", output_index=0, item=FC), done, done])
    assert only(assembly).failure == "stream.repeated-field"


def test_a_responses_delta_for_an_item_never_added_conflicts() -> None:
    assembly = fed("openai.responses", [
        responses_event(type="response.function_call_arguments.delta", item_id="fc_9", output_index=3,
                        delta="{}")])
    assert (only(assembly).failure, only(assembly).position) == ("stream.conflicting-delta", "3")


def test_a_responses_done_item_with_another_call_id_conflicts() -> None:
    assembly = fed("openai.responses", [
        responses_event(type="response.output_item.added", output_index=0, item=FC),
        responses_event(type="response.output_item.done", output_index=0,
                        item={**FC, "call_id": "call_other", "arguments": "{}", "status": "completed"})])
    assert only(assembly).failure == "stream.conflicting-delta"


def test_a_responses_item_done_without_deltas_is_taken_whole() -> None:
    assembly = fed("openai.responses", [
        responses_event(type="response.output_item.done", output_index=0,
                        item={**FC, "arguments": '{"note": "whole"}', "status": "completed"})])
    assert (only(assembly).failure, only(assembly).arguments) == (None, '{"note": "whole"}')


@pytest.mark.parametrize("provider", STREAMED)
def test_arguments_past_the_limit_stop_at_once(provider: str) -> None:
    text = '{"note": "' + "é" * 5000 + '"}'
    assembly = stream(provider, TOOLS, max_arguments_bytes=2048)
    finished = []
    for event in events(provider, [s.SampleCall(NAME, text, "call_1")], fragments=[s.pieces(text, 100)]):
        check_event(provider, event)
        finished.extend(assembly.feed(event))
    (failure,) = assembly.items()
    assert failure.failure == "stream.too-large" and finished[0] == failure
    assert len(failure.arguments.encode()) <= MAX_FAILURE_TEXT_BYTES and text.startswith(failure.arguments)
    assert assembly.drafting() == ()


def test_failure_text_is_cut_on_a_character_boundary() -> None:
    text = '{"note": "' + "🎉" * 3000
    chunks = events("openai.chat", [s.SampleCall(NAME, text, "call_1")])
    failure = only(fed("openai.chat", chunks))
    assert failure.failure == "stream.truncated"
    assert len(failure.arguments.encode()) <= MAX_FAILURE_TEXT_BYTES
    assert text.startswith(failure.arguments)


def test_an_event_that_is_not_json_is_an_error() -> None:
    with pytest.raises(ProviderError):
        stream("anthropic.messages").feed(b"{not json")
    with pytest.raises(ProviderError):
        stream("openai.chat").feed(b"[1]")
    with pytest.raises(ProviderError):
        stream("gemini")


def test_decoded_events_are_read_like_their_bytes() -> None:
    raw = events("anthropic.messages", [s.SampleCall(NAME, NOTE, "toolu_1")])
    as_dicts = fed("anthropic.messages", [msgspec.json.decode(e) for e in raw])
    as_text = stream("anthropic.messages", TOOLS)
    for event in raw:
        as_text.feed(event.decode())
    assert only(as_dicts) == only(as_text) == only(fed("anthropic.messages", raw))


def test_chat_done_sentinel_ends_the_stream() -> None:
    cut = events("openai.chat", [s.SampleCall(NAME, NOTE, "call_1")], finish=False)
    assembly = fed("openai.chat", cut)
    assembly.feed(b"[DONE]")
    assert assembly.ended and only(assembly).failure == "stream.truncated"


# --- properties ---------------------------------------------------------------------

ARGUMENT_TEXT = st.dictionaries(st.text(min_size=1, max_size=8), st.text(max_size=20), max_size=4).map(
    lambda d: msgspec.json.encode(d).decode())


def split(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts})
    bounds = [0, *points, len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False) if text[a:b]] or [""]


@settings(max_examples=60, deadline=None, derandomize=True)
@given(provider=st.sampled_from(STREAMED), text=ARGUMENT_TEXT, cuts=st.lists(st.integers(0, 500), max_size=12))
def test_any_split_of_the_arguments_reassembles_to_the_same_text(provider: str, text: str,
                                                                 cuts: list[int]) -> None:
    assembly = stream(provider, TOOLS)
    for event in events(provider, [s.SampleCall(NAME, text, "call_1")], fragments=[split(text, cuts)]):
        assembly.feed(event)
    call = only(assembly)
    assert (call.failure, call.arguments) == (None, text)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(provider=st.sampled_from(STREAMED), text=ARGUMENT_TEXT, cuts=st.lists(st.integers(0, 500), max_size=6),
       keep=st.integers(0, 10_000), cancel=st.booleans())
def test_any_truncation_is_a_typed_failure_never_a_call(provider: str, text: str, cuts: list[int],
                                                        keep: int, cancel: bool) -> None:
    every = events(provider, [s.SampleCall(NAME, text, "call_1")], fragments=[split(text, cuts)], finish=False)
    assembly = stream(provider, TOOLS)
    for event in every[:keep % (len(every) + 1)]:
        assembly.feed(event)
    assembly.cancel() if cancel else assembly.end()
    assert all(c.failure in ("stream.truncated", "stream.cancelled") for c in assembly.items())
