"""Provider responses and streams that call tools, in each provider's published shape.

For examples and tests: a runtime's loop is shown (and tested) against these instead of
a provider's API. Argument text is written into the bytes exactly as given (an object
field verbatim, duplicate keys and all), as a provider would send it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import msgspec

_encode = msgspec.json.encode


@dataclass(frozen=True)
class SampleCall:
    """A tool call for a sample: provider-facing name, argument text, the provider's id (or none)."""

    name: str
    arguments: str
    id: str | None = None


def _s(value: str) -> str:
    return _encode(value).decode("utf-8")


def _object_text(arguments: str) -> str:
    # An object-valued field holds the text verbatim; "no arguments" is an empty object.
    return arguments if arguments.strip() else "{}"


def chat(calls: Sequence[SampleCall], *, response_id: str = "chatcmpl-sample-1",
         model: str = "gpt-4.1-2025-04-14", object_arguments: bool = False) -> bytes:
    """A Chat Completion whose one choice calls ``calls`` (arguments as a string, or an object)."""
    tool_calls = []
    for c in calls:
        arguments = _object_text(c.arguments) if object_arguments else _s(c.arguments)
        # OpenAI's type requires an id; a server that has none sends an empty one.
        head = f'"id": {_s(c.id or "")}, '
        tool_calls.append(f'{{{head}"type": "function", "function": {{"name": {_s(c.name)}, '
                          f'"arguments": {arguments}}}}}')
    return (f'{{"id": {_s(response_id)}, "object": "chat.completion", "created": 1764600000, '
            f'"model": {_s(model)}, "choices": [{{"index": 0, "message": {{"role": "assistant", '
            f'"content": null, "refusal": null, "tool_calls": [{", ".join(tool_calls)}]}}, '
            f'"logprobs": null, "finish_reason": "tool_calls"}}], '
            f'"usage": {{"prompt_tokens": 80, "completion_tokens": 20, "total_tokens": 100}}}}').encode()


def responses(calls: Sequence[SampleCall], *, response_id: str = "resp_sample1",
              model: str = "gpt-5-2025-08-07") -> bytes:
    """A Responses API response: a reasoning item, then one ``function_call`` item per call."""
    items = ['{"type": "reasoning", "id": "rs_sample1", "summary": []}']
    for i, c in enumerate(calls):
        call_id = f'"call_id": {_s(c.id)}, ' if c.id is not None else '"call_id": "", '
        items.append(f'{{"type": "function_call", "id": "fc_sample{i}", {call_id}"name": {_s(c.name)}, '
                     f'"arguments": {_s(c.arguments)}, "status": "completed"}}')
    return (f'{{"id": {_s(response_id)}, "object": "response", "created_at": 1764600000, '
            f'"status": "completed", "model": {_s(model)}, "output": [{", ".join(items)}], '
            f'"parallel_tool_calls": true, "tool_choice": "auto", "tools": []}}').encode()


def anthropic(calls: Sequence[SampleCall], *, response_id: str = "msg_sample1",
              model: str = "claude-sonnet-4-5-20250929") -> bytes:
    """An Anthropic message: a text block, then one ``tool_use`` block per call (``input`` verbatim)."""
    blocks = ['{"type": "text", "text": "I will add the note."}']
    for i, c in enumerate(calls):
        blocks.append(f'{{"type": "tool_use", "id": {_s(c.id or f"toolu_sample{i}")}, '
                      f'"name": {_s(c.name)}, "input": {_object_text(c.arguments)}}}')
    return (f'{{"id": {_s(response_id)}, "type": "message", "role": "assistant", '
            f'"model": {_s(model)}, "content": [{", ".join(blocks)}], "stop_reason": "tool_use", '
            f'"stop_sequence": null, "usage": {{"input_tokens": 80, "output_tokens": 20}}}}').encode()


def gemini(calls: Sequence[SampleCall], *, response_id: str | None = "sample-gemini-1",
           model: str = "gemini-2.5-flash") -> bytes:
    """A Gemini response: one candidate whose parts are a text and one ``functionCall`` per call."""
    parts = ['{"text": "Adding the note."}']
    for c in calls:
        head = f'"id": {_s(c.id)}, ' if c.id is not None else ""
        parts.append(f'{{"functionCall": {{{head}"name": {_s(c.name)}, "args": {_object_text(c.arguments)}}}}}')
    rid = f', "responseId": {_s(response_id)}' if response_id is not None else ""
    return (f'{{"candidates": [{{"content": {{"role": "model", "parts": [{", ".join(parts)}]}}, '
            f'"finishReason": "STOP", "index": 0}}], "modelVersion": {_s(model)}{rid}}}').encode()


RESPONSES = {"openai.chat": chat, "openai.responses": responses, "anthropic.messages": anthropic,
             "gemini": gemini}


def pieces(text: str, size: int) -> list[str]:
    """``text`` in fragments of ``size`` characters, as a stream hands them over."""
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


def chat_chunks(calls: Sequence[SampleCall], *, fragments: Sequence[Sequence[str]] | None = None,
                response_id: str = "chatcmpl-stream-1", model: str = "gpt-4.1-2025-04-14",
                finish: bool = True) -> list[bytes]:
    """Chat Completion chunks: each call's id and name first, then its argument fragments."""
    def chunk(delta: str, finish_reason: str | None = None) -> bytes:
        reason = _s(finish_reason) if finish_reason else "null"
        return (f'{{"id": {_s(response_id)}, "object": "chat.completion.chunk", "created": 1764600000, '
                f'"model": {_s(model)}, "choices": [{{"index": 0, "delta": {delta}, '
                f'"finish_reason": {reason}}}]}}').encode()

    out = [chunk('{"role": "assistant", "content": null}')]
    for i, c in enumerate(calls):
        head = f'"id": {_s(c.id)}, ' if c.id is not None else ""
        out.append(chunk(f'{{"tool_calls": [{{"index": {i}, {head}"type": "function", '
                         f'"function": {{"name": {_s(c.name)}, "arguments": ""}}}}]}}'))
        for piece in (fragments[i] if fragments else pieces(c.arguments, 7)):
            out.append(chunk(f'{{"tool_calls": [{{"index": {i}, "function": {{"arguments": {_s(piece)}}}}}]}}'))
    if finish:
        out.append(chunk("{}", "tool_calls"))
    return out


def responses_events(calls: Sequence[SampleCall], *, fragments: Sequence[Sequence[str]] | None = None,
                     response_id: str = "resp_stream1", model: str = "gpt-5-2025-08-07",
                     finish: bool = True) -> list[bytes]:
    """Responses stream events: each item added, its argument deltas, done, item done, completed."""
    seq = iter(range(1, 10_000))

    def response(status: str) -> str:
        return (f'{{"id": {_s(response_id)}, "object": "response", "created_at": 1764600000, '
                f'"status": {_s(status)}, "model": {_s(model)}, "output": [], '
                f'"parallel_tool_calls": true, "tool_choice": "auto", "tools": []}}')

    out = [f'{{"type": "response.created", "sequence_number": 0, "response": {response("in_progress")}}}']
    for i, c in enumerate(calls):
        item = (f'"id": "fc_stream{i}", "call_id": {_s(c.id or f"call_stream{i}")}, "name": {_s(c.name)}')
        out.append(f'{{"type": "response.output_item.added", "sequence_number": {next(seq)}, '
                   f'"output_index": {i}, "item": {{"type": "function_call", {item}, "arguments": "", '
                   f'"status": "in_progress"}}}}')
        for piece in (fragments[i] if fragments else pieces(c.arguments, 7)):
            out.append(f'{{"type": "response.function_call_arguments.delta", "sequence_number": {next(seq)}, '
                       f'"item_id": "fc_stream{i}", "output_index": {i}, "delta": {_s(piece)}}}')
        if finish:
            out.append(f'{{"type": "response.function_call_arguments.done", "sequence_number": {next(seq)}, '
                       f'"item_id": "fc_stream{i}", "output_index": {i}, "name": {_s(c.name)}, '
                       f'"arguments": {_s(c.arguments)}}}')
            out.append(f'{{"type": "response.output_item.done", "sequence_number": {next(seq)}, '
                       f'"output_index": {i}, "item": {{"type": "function_call", {item}, '
                       f'"arguments": {_s(c.arguments)}, "status": "completed"}}}}')
    if finish:
        out.append(f'{{"type": "response.completed", "sequence_number": {next(seq)}, '
                   f'"response": {response("completed")}}}')
    return [e.encode() for e in out]


def anthropic_events(calls: Sequence[SampleCall], *, fragments: Sequence[Sequence[str]] | None = None,
                     response_id: str = "msg_stream1", model: str = "claude-sonnet-4-5-20250929",
                     finish: bool = True) -> list[bytes]:
    """Anthropic stream events: message_start, a text block, then each tool_use block's start, deltas, stop."""
    out = [f'{{"type": "message_start", "message": {{"id": {_s(response_id)}, "type": "message", '
           f'"role": "assistant", "model": {_s(model)}, "content": [], "stop_reason": null, '
           f'"stop_sequence": null, "usage": {{"input_tokens": 80, "output_tokens": 1}}}}}}',
           '{"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}',
           '{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Adding it."}}',
           '{"type": "content_block_stop", "index": 0}']
    for n, c in enumerate(calls):
        i = n + 1
        out.append(f'{{"type": "content_block_start", "index": {i}, "content_block": {{"type": "tool_use", '
                   f'"id": {_s(c.id or f"toolu_stream{n}")}, "name": {_s(c.name)}, "input": {{}}}}}}')
        for piece in (fragments[n] if fragments else pieces(c.arguments, 7)):
            out.append(f'{{"type": "content_block_delta", "index": {i}, "delta": '
                       f'{{"type": "input_json_delta", "partial_json": {_s(piece)}}}}}')
        if finish:
            out.append(f'{{"type": "content_block_stop", "index": {i}}}')
    if finish:
        out.append('{"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, '
                   '"usage": {"output_tokens": 20}}')
        out.append('{"type": "message_stop"}')
    return [e.encode() for e in out]


STREAMED = {"openai.chat": chat_chunks, "openai.responses": responses_events,
            "anthropic.messages": anthropic_events}
