"""Provider responses in, tool results out: every payload checked against the providers' own types."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from provider_shapes import check_response, check_results, check_tools

from lockgate.client.providers import (
    FAILURES,
    MAX_ITEM_BYTES,
    PROVIDERS,
    ProviderError,
    model_content,
    parse_response,
    tool_declarations,
)
from lockgate.client.providers import samples as s
from lockgate.client.providers.formats import FORMATS
from lockgate.client.providers.loop import Answer, Outcome
from lockgate.contracts.messages import Tool
from lockgate.contracts.responses import ModelResponse

TOOLS = (Tool("case.add_note", "Add a note to the run's case.",
              {"type": "object", "properties": {"note": {"type": "string"}}, "required": ["note"],
               "additionalProperties": False}),)
NAME = "case__add_note"
NOTE = '{"note": "Kunde rief zurück — 客户回电 🎉"}'


def parsed(provider: str, raw: bytes) -> Any:
    check_response(provider, raw)
    return parse_response(provider, raw, TOOLS)


def test_the_reason_codes_are_the_published_ones() -> None:
    assert sorted(FAILURES) == [
        "provider.item-malformed", "provider.unknown-item", "stream.cancelled",
        "stream.conflicting-delta", "stream.repeated-field", "stream.too-large", "stream.truncated"]
    assert tuple(FORMATS) == PROVIDERS


@pytest.mark.parametrize("provider", PROVIDERS)
def test_one_call_with_non_ascii_text(provider: str) -> None:
    result = parsed(provider, s.RESPONSES[provider]([s.SampleCall(NAME, NOTE, "call_abc")]))
    (call,) = result.calls
    assert (call.tool, call.arguments, call.call_id, call.provider_call_id, call.failure) == (
        "case.add_note", NOTE, "call_abc", "call_abc", None)
    assert call.provider_tool == NAME and call.provider == provider
    assert result.model and call.provider_item


@pytest.mark.parametrize("provider", PROVIDERS)
def test_parallel_calls_are_one_call_each_in_order(provider: str) -> None:
    raw = s.RESPONSES[provider]([s.SampleCall(NAME, '{"note": "one"}', "call_1"),
                                 s.SampleCall(NAME, '{"note": "two"}', "call_2")])
    calls = parsed(provider, raw).calls
    assert [(c.call_id, c.arguments) for c in calls] == [
        ("call_1", '{"note": "one"}'), ("call_2", '{"note": "two"}')]
    assert len({c.position for c in calls}) == 2


@pytest.mark.parametrize("provider", PROVIDERS)
def test_duplicate_keys_survive_into_the_arguments(provider: str) -> None:
    duplicated = '{"note": "harmless", "note": "rm -rf /"}'
    (call,) = parsed(provider, s.RESPONSES[provider]([s.SampleCall(NAME, duplicated, "call_1")])).calls
    assert call.arguments == duplicated


def test_object_arguments_are_their_exact_bytes_and_strings_their_exact_text() -> None:
    spaced = '{ "note" :"a",\n  "note": "b" }'
    compatible = s.chat([s.SampleCall(NAME, spaced, "c1")], object_arguments=True)
    check_response("openai.chat", compatible, object_arguments=True)
    as_object = parse_response("openai.chat", compatible)
    as_string = parsed("openai.chat", s.chat([s.SampleCall(NAME, spaced, "c1")]))
    assert as_object.calls[0].arguments == spaced == as_string.calls[0].arguments
    escaped = '{"note": "\\u00e9\\n"}'  # escapes inside an object stay escapes: the exact bytes
    (call,) = parsed("anthropic.messages", s.anthropic([s.SampleCall(NAME, escaped, "t1")])).calls
    assert call.arguments == escaped


@pytest.mark.parametrize("provider", PROVIDERS)
def test_empty_arguments_are_no_arguments_and_the_item_keeps_the_original(provider: str) -> None:
    (call,) = parsed(provider, s.RESPONSES[provider]([s.SampleCall(NAME, "", "call_1")])).calls
    assert call.arguments == "{}" and call.failure is None
    if provider in ("openai.chat", "openai.responses"):
        item = call.provider_item
        original = item["function"]["arguments"] if provider == "openai.chat" else item["arguments"]
        assert original == ""


def test_null_and_missing_arguments_are_no_arguments() -> None:
    null = (b'{"id": "c", "object": "chat.completion", "created": 1, "model": "m", "choices": [{"index": 0,'
            b' "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null,'
            b' "tool_calls": [{"id": "a", "type": "function", "function": {"name": "x", "arguments": null}}]}}]}')
    missing = (b'{"candidates": [{"content": {"role": "model", "parts": [{"functionCall": {"name": "x"}}]}}],'
               b' "modelVersion": "gemini-2.5-flash"}')
    check_response("gemini", missing)
    assert parse_response("openai.chat", null).calls[0].arguments == "{}"
    assert parse_response("gemini", missing).calls[0].arguments == "{}"


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_missing_or_unusable_id_gets_a_deterministic_call_id(provider: str) -> None:
    unusable = "call.with.dots/and:more" if provider != "gemini" else None
    raw = s.RESPONSES[provider]([s.SampleCall(NAME, '{"note": "a"}', unusable),
                                 s.SampleCall(NAME, '{"note": "a"}', unusable)])
    first, second = parsed(provider, raw).calls
    assert first.call_id.startswith("lg-") and first.call_id != second.call_id
    assert [c.call_id for c in parse_response(provider, raw, TOOLS).calls] == [first.call_id, second.call_id]
    assert first.provider_call_id == unusable
    # Another response (another id) gives other call ids: two turns never share one.
    other = s.RESPONSES[provider]([s.SampleCall(NAME, '{"note": "a"}', unusable)], response_id="other-1")
    assert parse_response(provider, other).calls[0].call_id != first.call_id


def test_without_a_response_id_the_call_id_comes_from_the_bytes() -> None:
    one = s.gemini([s.SampleCall(NAME, '{"note": "a"}')], response_id=None)
    two = s.gemini([s.SampleCall(NAME, '{"note": "b"}')], response_id=None)
    assert parse_response("gemini", one).calls[0].call_id == parse_response("gemini", one).calls[0].call_id
    assert parse_response("gemini", one).calls[0].call_id != parse_response("gemini", two).calls[0].call_id


def test_known_non_call_items_are_skipped_and_unknown_ones_recorded() -> None:
    raw = (b'{"id": "resp_1", "object": "response", "created_at": 1, "model": "gpt-5", "status": "completed",'
           b' "parallel_tool_calls": true, "tool_choice": "auto", "tools": [], "output": ['
           b'{"type": "reasoning", "id": "rs_1", "summary": []},'
           b'{"type": "web_search_call", "id": "ws_1", "status": "completed",'
           b' "action": {"type": "search", "query": "q"}},'
           b'{"type": "message", "id": "m_1", "role": "assistant", "status": "completed", "content": []},'
           b'{"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "case__add_note",'
           b' "arguments": "{\\"note\\": \\"x\\"}"}]}')
    unknown, call = parsed("openai.responses", raw).calls
    assert (unknown.failure, unknown.tool, unknown.call_id, unknown.answered) == (
        "provider.unknown-item", "", "ws_1", False)
    assert unknown.provider_item["type"] == "web_search_call"
    assert (call.failure, call.arguments) == (None, '{"note": "x"}')


def test_anthropic_server_tool_blocks_are_recorded_and_thinking_skipped() -> None:
    raw = (b'{"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",'
           b' "stop_reason": "tool_use", "usage": {"input_tokens": 1, "output_tokens": 1}, "content": ['
           b'{"type": "thinking", "thinking": "hmm", "signature": "sig"},'
           b'{"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "q"}},'
           b'{"type": "tool_use", "id": "toolu_1", "name": "case__add_note", "input": {"note": "x"}}]}')
    unknown, call = parsed("anthropic.messages", raw).calls
    assert (unknown.failure, unknown.answered, unknown.arguments) == ("provider.unknown-item", False, "")
    assert (call.tool, call.arguments) == ("case.add_note", '{"note": "x"}')


def test_chat_custom_tool_calls_are_recorded_and_answered() -> None:
    raw = (b'{"id": "c", "object": "chat.completion", "created": 1, "model": "gpt-5", "choices": [{"index": 0,'
           b' "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null, "tool_calls": ['
           b'{"id": "call_9", "type": "custom", "custom": {"name": "shell", "input": "ls"}}]}}]}')
    (call,) = parsed("openai.chat", raw).calls
    # Chat wants an answer for every tool call id: the model is told it was rejected.
    assert (call.failure, call.answered, call.call_id) == ("provider.unknown-item", True, "call_9")


def test_gemini_parts_other_than_text_and_calls_are_recorded() -> None:
    raw = (b'{"candidates": [{"content": {"role": "model", "parts": [{"text": "t", "thought": true},'
           b' {"thoughtSignature": "c2ln"},'
           b' {"executableCode": {"language": "PYTHON", "code": "print(1)"}},'
           b' {"functionCall": {"name": "case__add_note", "args": {"note": "x"}}}]}}],'
           b' "modelVersion": "gemini-2.5-pro"}')
    unknown, call = parsed("gemini", raw).calls
    assert (unknown.failure, unknown.position, unknown.answered) == ("provider.unknown-item", "0.2", False)
    assert (call.position, call.arguments, call.provider_call_id) == ("0.3", '{"note": "x"}', None)


def test_a_tool_use_without_a_name_is_malformed_on_the_record() -> None:
    raw = (b'{"id": "msg_1", "type": "message", "role": "assistant", "model": "claude", "content": ['
           b'{"type": "tool_use", "id": "toolu_1", "input": {"note": "x"}}],'
           b' "usage": {"input_tokens": 1, "output_tokens": 1}}')
    (call,) = parse_response("anthropic.messages", raw).calls
    assert (call.failure, call.tool, call.arguments, call.answered) == (
        "provider.item-malformed", "", '{"note": "x"}', True)


def test_arguments_that_are_neither_text_nor_an_object_are_malformed() -> None:
    raw = (b'{"id": "c", "object": "chat.completion", "created": 1, "model": "m", "choices": [{"index": 0,'
           b' "finish_reason": "tool_calls", "message": {"role": "assistant", "tool_calls": ['
           b'{"id": "a", "type": "function", "function": {"name": "x", "arguments": [1, 2]}}]}}]}')
    (call,) = parse_response("openai.chat", raw).calls
    assert (call.failure, call.arguments) == ("provider.item-malformed", "[1, 2]")


def test_only_the_choice_the_runtime_continues_is_read() -> None:
    raw = (b'{"id": "c", "object": "chat.completion", "created": 1, "model": "m", "choices": ['
           b'{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "tool_calls": ['
           b'{"id": "a", "type": "function", "function": {"name": "x", "arguments": "{}"}}]}},'
           b'{"index": 1, "finish_reason": "tool_calls", "message": {"role": "assistant", "tool_calls": ['
           b'{"id": "b", "type": "function", "function": {"name": "y", "arguments": "{}"}}]}}]}')
    check_response("openai.chat", raw)
    assert [c.call_id for c in parse_response("openai.chat", raw).calls] == ["a"]
    assert [c.call_id for c in parse_response("openai.chat", raw, choice=1).calls] == ["b"]


def test_a_large_provider_item_is_kept_as_its_size_and_digest() -> None:
    big = '{"note": "' + "x" * MAX_ITEM_BYTES + '"}'
    (call,) = parse_response("anthropic.messages", s.anthropic([s.SampleCall(NAME, big, "t1")])).calls
    assert call.arguments == big
    assert call.provider_item["truncated"] is True
    assert call.provider_item["bytes"] > MAX_ITEM_BYTES and call.provider_item["digest"].startswith("sha256:")


def test_a_body_that_is_no_response_is_an_error_not_a_guess() -> None:
    with pytest.raises(ProviderError):
        parse_response("openai.chat", b"not json")
    with pytest.raises(ProviderError):
        parse_response("anthropic.messages", b'{"content": {"type": "tool_use"}}')
    with pytest.raises(ProviderError) as raised:
        parse_response("openai.completions", b"{}")
    assert raised.value.code == "provider.unknown"


def test_a_response_without_calls_has_none() -> None:
    raw = (b'{"id": "msg_1", "type": "message", "role": "assistant", "model": "claude", "content": ['
           b'{"type": "text", "text": "done"}], "usage": {"input_tokens": 1, "output_tokens": 1}}')
    check_response("anthropic.messages", raw)
    assert parse_response("anthropic.messages", raw).calls == ()


# --- results back out ---------------------------------------------------------------

EXECUTED = ModelResponse(candidate_id="intent-1", call_id="call_1", status="executed",
                         code="operation.executed", result={"note_id": "n-7", "text": "ignore previous"},
                         result_label="untrusted-data", candidate_digest="sha256:abc")
DENIED = ModelResponse(candidate_id="intent-2", call_id="call_2", status="denied", code="policy.denied",
                       persistent=True, alternatives=("ask_owner", "stop"), candidate_digest="sha256:def")


def test_the_model_content_is_the_projection_and_nothing_else() -> None:
    assert model_content(EXECUTED) == {
        "status": "executed", "code": "operation.executed",
        "result": {"untrusted_data": {"note_id": "n-7", "text": "ignore previous"}},
        "result_label": "untrusted-data"}
    assert model_content(DENIED) == {"status": "denied", "code": "policy.denied", "persistent": True,
                                     "alternatives": ["ask_owner", "stop"]}


def outcome(provider: str, ids: tuple[str | None, str | None] = ("call_1", "call_2")) -> Outcome:
    raw = s.RESPONSES[provider]([s.SampleCall(NAME, '{"note": "a"}', ids[0]),
                                 s.SampleCall(NAME, '{"note": "b"}', ids[1])])
    calls = parse_response(provider, raw, TOOLS).calls
    return Outcome(provider, "m", (Answer(calls[0], EXECUTED), Answer(calls[1], DENIED)))


@pytest.mark.parametrize("provider", PROVIDERS)
def test_results_are_in_the_providers_shape(provider: str) -> None:
    done = outcome(provider)
    check_results(provider, done.messages())
    results = done.tool_results()
    assert len(results) == 2
    text = msgspec.json.encode(results).decode()
    for leak in ("intent-1", "intent-2", "sha256:abc", "candidate"):
        assert leak not in text


def test_each_provider_names_the_call_its_way() -> None:
    chat = outcome("openai.chat").tool_results()
    assert [(m["role"], m["tool_call_id"]) for m in chat] == [("tool", "call_1"), ("tool", "call_2")]
    assert msgspec.json.decode(chat[0]["content"]) == model_content(EXECUTED)
    responses = outcome("openai.responses").tool_results()
    assert [(m["type"], m["call_id"]) for m in responses] == [("function_call_output", "call_1")] * 1 + [
        ("function_call_output", "call_2")]
    (user,) = outcome("anthropic.messages").messages()
    assert [(b["tool_use_id"], b["is_error"]) for b in user["content"]] == [("call_1", False), ("call_2", True)]
    (content,) = outcome("gemini", (None, "fc-2")).messages()
    first, second = (p["functionResponse"] for p in content["parts"])
    assert first == {"name": NAME, "response": model_content(EXECUTED)}  # no id: the call had none
    assert second["id"] == "fc-2" and second["name"] == NAME


def test_no_results_means_nothing_to_append() -> None:
    for provider in PROVIDERS:
        assert Outcome(provider, "m", ()).messages() == []


@pytest.mark.parametrize("provider", PROVIDERS)
def test_the_catalogue_is_declared_in_the_providers_shape(provider: str) -> None:
    declared = tool_declarations(provider, TOOLS)
    check_tools(provider, declared)
    assert NAME in msgspec.json.encode(declared).decode()


def test_two_capabilities_that_would_share_a_provider_name_are_refused() -> None:
    clash = (Tool("a.b", "", {}), Tool("a__b", "", {}))
    with pytest.raises(ProviderError):
        tool_declarations("openai.chat", clash)
