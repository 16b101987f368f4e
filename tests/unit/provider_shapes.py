"""The providers' published SDK types, as checks: every payload a provider test reads or writes passes them.

Their response models ignore fields they do not know (a provider adds fields), so a
payload read is checked for what the type requires. Their request params are
TypedDicts, which pydantic also lets extra keys through: a shape written back is
checked for that too, so a field this code invents (or a misspelt one) fails.
"""

from __future__ import annotations

from typing import Any, cast

import msgspec
from anthropic.types import (
    Message,
    MessageParam,
    RawMessageStreamEvent,
    ToolParam,
    ToolResultBlockParam,
    UserMessageParam,
)
from google.genai import types as genai
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionFunctionToolParam,
    ChatCompletionToolMessageParam,
)
from openai.types.responses import FunctionToolParam, Response, ResponseStreamEvent
from openai.types.responses.response_input_param import FunctionCallOutput
from pydantic import TypeAdapter
from typing_extensions import is_typeddict

_stream_events: dict[str, TypeAdapter[Any]] = {
    "openai.chat": TypeAdapter(ChatCompletionChunk),
    "openai.responses": TypeAdapter(ResponseStreamEvent),
    "anthropic.messages": TypeAdapter(RawMessageStreamEvent),
}


def _arguments_as_text(raw: bytes) -> bytes:
    body = msgspec.json.decode(raw)
    for choice in body.get("choices", []):
        for call in choice.get("message", {}).get("tool_calls") or []:
            arguments = call.get("function", {}).get("arguments")
            if isinstance(arguments, dict):
                call["function"]["arguments"] = msgspec.json.encode(arguments).decode()
    return msgspec.json.encode(body)


def check_response(provider: str, raw: bytes, *, object_arguments: bool = False) -> None:
    """The response body is of the provider's published response type.

    ``object_arguments``: a Chat response from a compatible server that sends
    ``function.arguments`` as an object, the one deviation from OpenAI's type; the rest
    of it must still be of that type.
    """
    if provider == "openai.chat":
        ChatCompletion.model_validate_json(_arguments_as_text(raw) if object_arguments else raw)
    elif provider == "openai.responses":
        Response.model_validate_json(raw)
    elif provider == "anthropic.messages":
        Message.model_validate_json(raw)
    elif provider == "gemini":
        genai.GenerateContentResponse.model_validate(msgspec.json.decode(raw))
    else:
        raise AssertionError(f"no published type for {provider}")


def check_event(provider: str, raw: bytes | dict[str, Any]) -> None:
    """One stream event is of the provider's published stream event type."""
    adapter = _stream_events[provider]
    if isinstance(raw, dict):
        adapter.validate_python(raw)
    else:
        adapter.validate_json(raw)


def exact(kind: Any, value: dict[str, Any]) -> None:
    """``value`` is a ``kind`` (a TypedDict) and holds no key ``kind`` does not declare."""
    TypeAdapter(kind).validate_python(value)
    assert is_typeddict(kind)
    declared = set(kind.__required_keys__) | set(kind.__optional_keys__)
    assert set(value) <= declared, f"{sorted(set(value) - declared)} not in {kind.__name__}"


def check_results(provider: str, messages: list[dict[str, Any]]) -> None:
    """What ``Outcome.messages()`` returns is what the provider's request types accept."""
    for message in messages:
        if provider == "openai.chat":
            exact(ChatCompletionToolMessageParam, message)
        elif provider == "openai.responses":
            exact(FunctionCallOutput, message)
        elif provider == "anthropic.messages":
            TypeAdapter(MessageParam).validate_python(message)
            exact(UserMessageParam, message)
            assert message["role"] == "user"
            for block in cast(list[dict[str, Any]], message["content"]):
                exact(ToolResultBlockParam, block)
        elif provider == "gemini":
            content = genai.Content.model_validate(message)  # extra fields are forbidden
            assert content.role == "user" and content.parts
            for part in content.parts:
                assert part.function_response is not None
                assert part.model_dump(exclude_none=True).keys() == {"function_response"}
        else:
            raise AssertionError(f"no published type for {provider}")


def check_tools(provider: str, tools: list[dict[str, Any]]) -> None:
    """Tool declarations are what the provider's request types accept."""
    for tool in tools:
        if provider == "openai.chat":
            exact(ChatCompletionFunctionToolParam, tool)
        elif provider == "openai.responses":
            exact(FunctionToolParam, tool)
        elif provider == "anthropic.messages":
            exact(ToolParam, tool)
        elif provider == "gemini":
            genai.Tool.model_validate(tool)
        else:
            raise AssertionError(f"no published type for {provider}")
