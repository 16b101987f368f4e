"""The four provider formats: their tool calls in, Lockgate's answers back out in their shapes.

Responses are read from their bytes with ``msgspec.Raw`` spans, so an object-valued
argument field reaches Lockgate as the exact text the provider sent (duplicate keys
included: intake refuses them, and must see them to).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from lockgate.client.providers.calls import (
    NO_ARGUMENTS,
    ParsedResponse,
    ProviderCall,
    ProviderError,
    bounded_item,
    call_id_for,
    capability_name,
    response_key,
    utf8_prefix,
)
from lockgate.contracts.responses import ModelResponse

_fields = msgspec.json.Decoder(dict[str, msgspec.Raw])
_items = msgspec.json.Decoder(list[msgspec.Raw])
_value = msgspec.json.Decoder()
_text = msgspec.json.Decoder(str)

#: What a model is told it is reading in a result: data from the world, never instructions.
RESULT_LABEL = "untrusted-data"


def _fields_of(raw: msgspec.Raw | None) -> dict[str, msgspec.Raw] | None:
    if raw is None or not bytes(raw).startswith(b"{"):
        return None
    return _fields.decode(raw)


def _items_of(raw: msgspec.Raw | None) -> list[msgspec.Raw] | None:
    if raw is None or bytes(raw) == b"null":
        return []
    if not bytes(raw).startswith(b"["):
        return None
    return _items.decode(raw)


def _text_of(raw: msgspec.Raw | None) -> str | None:
    if raw is None or not bytes(raw).startswith(b'"'):
        return None
    return _text.decode(raw)


def arguments_text(raw: msgspec.Raw | None) -> str | None:
    """The exact argument text of a field, ``{}`` for the providers' "no arguments", or None.

    A string is the text it holds, decoded exactly; an object is its own bytes as sent;
    missing, ``null`` and ``""`` are how providers spell "no arguments". Anything else
    (a number, an array) is no argument text at all: the item is malformed.
    """
    if raw is None:
        return NO_ARGUMENTS
    data = bytes(raw)
    if data == b"null":
        return NO_ARGUMENTS
    if data.startswith(b'"'):
        return _text.decode(data) or NO_ARGUMENTS
    if data.startswith(b"{"):
        return data.decode("utf-8")
    return None


class _Reader:
    """Turns the items of one response into calls and failures, with deterministic ids."""

    def __init__(self, provider: str, raw: bytes, names: Mapping[str, str]) -> None:
        self.provider = provider
        self.raw = raw
        self.names = names
        self.key = ""
        self.out: list[ProviderCall] = []

    def item(self, raw: msgspec.Raw) -> dict[str, Any]:
        value = _value.decode(raw)
        return bounded_item(value if isinstance(value, dict) else {"value": value}, bytes(raw))

    def call(self, position: str, item_raw: msgspec.Raw, *, provider_id: str | None,
             name: str | None, arguments: msgspec.Raw | None) -> None:
        text = arguments_text(arguments)
        if not name:
            self.fail(position, item_raw, "provider.item-malformed", provider_id=provider_id,
                      name="", arguments=arguments, detail="the call names no tool")
            return
        if text is None:
            self.fail(position, item_raw, "provider.item-malformed", provider_id=provider_id,
                      name=name, arguments=arguments, detail="the arguments are neither text nor an object")
            return
        self.out.append(ProviderCall(
            provider=self.provider, position=position, tool=capability_name(name, self.names),
            arguments=text, call_id=call_id_for(self.provider, self.key, position, provider_id),
            provider_call_id=provider_id, provider_item=self.item(item_raw), provider_tool=name))

    def fail(self, position: str, item_raw: msgspec.Raw, code: str, *, provider_id: str | None,
             name: str = "", arguments: msgspec.Raw | None = None, answered: bool = True,
             detail: str = "") -> None:
        text = "" if arguments is None else bytes(arguments).decode("utf-8", "replace")
        self.out.append(ProviderCall(
            provider=self.provider, position=position, tool=capability_name(name, self.names),
            arguments=utf8_prefix(text), call_id=call_id_for(self.provider, self.key, position, provider_id),
            provider_call_id=provider_id, provider_item=self.item(item_raw), provider_tool=name,
            failure=code, answered=answered and provider_id is not None, detail=detail))

    def top(self) -> dict[str, msgspec.Raw]:
        try:
            top = _fields.decode(self.raw)
        except msgspec.MsgspecError as exc:
            raise ProviderError(f"not a {self.provider} response: {exc}",
                                code="provider.response-malformed") from None
        self.key = response_key(_text_of(top.get("id") or top.get("responseId")), self.raw)
        return top

    def list_field(self, fields: Mapping[str, msgspec.Raw], name: str) -> list[msgspec.Raw]:
        found = _items_of(fields.get(name))
        if found is None:
            raise ProviderError(f"{self.provider}: {name} is not a list", code="provider.response-malformed")
        return found

    def parsed(self, model: str | None) -> ParsedResponse:
        rid = self.key[3:] if self.key.startswith("id:") else ""
        return ParsedResponse(provider=self.provider, model=model or "", response_id=rid,
                              calls=tuple(self.out))


def _choice(reader: _Reader, top: Mapping[str, msgspec.Raw], name: str, choice: int) -> dict[str, msgspec.Raw]:
    choices = reader.list_field(top, name)
    if choice >= len(choices):
        return {}
    return _fields_of(choices[choice]) or {}


def parse_chat(raw: bytes, names: Mapping[str, str], choice: int = 0) -> ParsedResponse:
    """OpenAI Chat Completions: ``choices[choice].message.tool_calls[]``."""
    reader = _Reader("openai.chat", raw, names)
    top = reader.top()
    message = _fields_of(_choice(reader, top, "choices", choice).get("message")) or {}
    for i, item_raw in enumerate(reader.list_field(message, "tool_calls")):
        position = f"{choice}.{i}"
        item = _fields_of(item_raw)
        if item is None:
            reader.fail(position, item_raw, "provider.item-malformed", provider_id=None,
                        detail="the tool call is not an object")
            continue
        provider_id = _text_of(item.get("id"))
        kind = _text_of(item.get("type"))
        function = _fields_of(item.get("function"))
        # Some compatible servers leave out "type"; a "function" object says what it is.
        if kind not in ("function", None) or (kind is None and function is None):
            reader.fail(position, item_raw, "provider.unknown-item", provider_id=provider_id,
                        detail=f"tool call of type {kind!r}")
        elif function is None:
            reader.fail(position, item_raw, "provider.item-malformed", provider_id=provider_id,
                        detail="the tool call has no function")
        else:
            reader.call(position, item_raw, provider_id=provider_id,
                        name=_text_of(function.get("name")), arguments=function.get("arguments"))
    return reader.parsed(_text_of(top.get("model")))


#: Output items of the Responses API that are not calls: the model's text and reasoning.
_RESPONSES_NOT_CALLS = frozenset({"message", "reasoning"})


def parse_responses(raw: bytes, names: Mapping[str, str], choice: int = 0) -> ParsedResponse:
    """OpenAI Responses: ``output[]`` items of type ``function_call``."""
    reader = _Reader("openai.responses", raw, names)
    top = reader.top()
    for i, item_raw in enumerate(reader.list_field(top, "output")):
        position = str(i)
        item = _fields_of(item_raw)
        if item is None:
            reader.fail(position, item_raw, "provider.item-malformed", provider_id=None,
                        detail="the output item is not an object")
            continue
        kind = _text_of(item.get("type"))
        provider_id = _text_of(item.get("call_id"))
        if kind in _RESPONSES_NOT_CALLS:
            continue
        if kind == "function_call":
            reader.call(position, item_raw, provider_id=provider_id, name=_text_of(item.get("name")),
                        arguments=item.get("arguments"))
        else:
            # A hosted tool's call (web search, …) or a kind added later: on the record,
            # and no result is sent back for it (its output shape is not a function's).
            reader.fail(position, item_raw, "provider.unknown-item", answered=False,
                        provider_id=provider_id or _text_of(item.get("id")),
                        detail=f"output item of type {kind!r}")
    return reader.parsed(_text_of(top.get("model")))


_ANTHROPIC_NOT_CALLS = frozenset({"text", "thinking", "redacted_thinking"})


def parse_anthropic(raw: bytes, names: Mapping[str, str], choice: int = 0) -> ParsedResponse:
    """Anthropic Messages: ``content[]`` blocks of type ``tool_use``."""
    reader = _Reader("anthropic.messages", raw, names)
    top = reader.top()
    for i, block_raw in enumerate(reader.list_field(top, "content")):
        position = str(i)
        block = _fields_of(block_raw)
        if block is None:
            reader.fail(position, block_raw, "provider.item-malformed", provider_id=None,
                        detail="the content block is not an object")
            continue
        kind = _text_of(block.get("type"))
        provider_id = _text_of(block.get("id"))
        if kind in _ANTHROPIC_NOT_CALLS:
            continue
        if kind == "tool_use":
            reader.call(position, block_raw, provider_id=provider_id, name=_text_of(block.get("name")),
                        arguments=block.get("input"))
        else:
            reader.fail(position, block_raw, "provider.unknown-item", provider_id=provider_id,
                        answered=False, detail=f"content block of type {kind!r}")
    return reader.parsed(_text_of(top.get("model")))


#: Fields of a Gemini part that qualify its data rather than being it.
_GEMINI_PART_METADATA = frozenset({"thought", "thoughtSignature", "videoMetadata", "partMetadata",
                                   "mediaResolution"})


def parse_gemini(raw: bytes, names: Mapping[str, str], choice: int = 0) -> ParsedResponse:
    """Google Gemini: ``candidates[choice].content.parts[].functionCall``."""
    reader = _Reader("gemini", raw, names)
    top = reader.top()
    content = _fields_of(_choice(reader, top, "candidates", choice).get("content")) or {}
    for i, part_raw in enumerate(reader.list_field(content, "parts")):
        position = f"{choice}.{i}"
        part = _fields_of(part_raw)
        if part is None:
            reader.fail(position, part_raw, "provider.item-malformed", provider_id=None,
                        detail="the part is not an object")
            continue
        data = set(part) - _GEMINI_PART_METADATA
        if "functionCall" in data:
            call = _fields_of(part["functionCall"])
            if call is None:
                reader.fail(position, part_raw, "provider.item-malformed", provider_id=None,
                            detail="functionCall is not an object")
                continue
            provider_id = _text_of(call.get("id"))
            reader.call(position, part_raw, provider_id=provider_id, name=_text_of(call.get("name")),
                        arguments=call.get("args"))
        elif data and data != {"text"}:
            reader.fail(position, part_raw, "provider.unknown-item", provider_id=None, answered=False,
                        detail=f"part with {sorted(data)}")
    return reader.parsed(_text_of(top.get("modelVersion")))


# --- results back out -----------------------------------------------------------


def model_content(response: ModelResponse) -> dict[str, Any]:
    """What the model may read of a response: the model-facing projection, nothing else.

    A result is nested under a key that says it is untrusted data, and labelled so: it
    came from the world, and a model must not take instructions from it. The candidate
    and call ids and the digest stay out: the provider's own call id already pairs the
    result with its call.
    """
    content: dict[str, Any] = {"status": response.status, "code": response.code}
    if response.field is not None:
        content["field"] = response.field
    if response.persistent is not None:
        content["persistent"] = response.persistent
    if response.alternatives is not None:
        content["alternatives"] = list(response.alternatives)
    if response.retry_after_s is not None:
        content["retry_after_s"] = response.retry_after_s
    if response.result is not None:
        content["result"] = {"untrusted_data": response.result}
        content["result_label"] = response.result_label or RESULT_LABEL
    return content


def _content_text(response: ModelResponse) -> str:
    return msgspec.json.encode(model_content(response)).decode("utf-8")


def _answer_id(call: ProviderCall) -> str:
    return call.provider_call_id if call.provider_call_id is not None else call.call_id


def chat_result(call: ProviderCall, response: ModelResponse) -> dict[str, Any]:
    """A ``tool`` message (``ChatCompletionToolMessageParam``)."""
    return {"role": "tool", "tool_call_id": _answer_id(call), "content": _content_text(response)}


def responses_result(call: ProviderCall, response: ModelResponse) -> dict[str, Any]:
    """A ``function_call_output`` input item."""
    return {"type": "function_call_output", "call_id": _answer_id(call), "output": _content_text(response)}


def anthropic_result(call: ProviderCall, response: ModelResponse) -> dict[str, Any]:
    """A ``tool_result`` block; anything but ``executed`` is an error for the model."""
    return {"type": "tool_result", "tool_use_id": _answer_id(call), "content": _content_text(response),
            "is_error": response.status != "executed"}


def gemini_result(call: ProviderCall, response: ModelResponse) -> dict[str, Any]:
    """A ``functionResponse`` part, naming the function as the model did (and its id, if it gave one)."""
    answer: dict[str, Any] = {"name": call.provider_tool or call.tool}
    if call.provider_call_id is not None:
        answer["id"] = call.provider_call_id
    answer["response"] = model_content(response)
    return {"functionResponse": answer}


def _as_is(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return results


def _anthropic_turn(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": results}] if results else []


def _gemini_turn(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"role": "user", "parts": results}] if results else []


def _tool(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description,
                                             "parameters": parameters}}


def _responses_tool(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    # Strict mode rewrites the schema's rules (every property required); Lockgate's
    # intake checks the offered schema itself.
    return {"type": "function", "name": name, "description": description, "parameters": parameters,
            "strict": False}


def _anthropic_tool(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "description": description, "input_schema": parameters}


def _gemini_tool(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    # ``parametersJsonSchema`` takes JSON Schema as is; ``parameters`` is an OpenAPI subset.
    return {"name": name, "description": description, "parametersJsonSchema": parameters}


@dataclass(frozen=True)
class Format:
    """One provider's format, declared once: how calls are read and answers written."""

    name: str
    parse: Callable[[bytes, Mapping[str, str], int], ParsedResponse]
    result: Callable[[ProviderCall, ModelResponse], dict[str, Any]]
    turn: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]
    tool: Callable[[str, str, dict[str, Any]], dict[str, Any]]


FORMATS: dict[str, Format] = {
    f.name: f for f in (
        Format("openai.chat", parse_chat, chat_result, _as_is, _tool),
        Format("openai.responses", parse_responses, responses_result, _as_is, _responses_tool),
        Format("anthropic.messages", parse_anthropic, anthropic_result, _anthropic_turn, _anthropic_tool),
        Format("gemini", parse_gemini, gemini_result, _gemini_turn, _gemini_tool),
    )
}


def format_of(provider: str) -> Format:
    """The format named ``provider``.

    Raises:
        ProviderError: not one of ``PROVIDERS``.
    """
    try:
        return FORMATS[provider]
    except KeyError:
        raise ProviderError(f"unknown provider format {provider!r}; one of {sorted(FORMATS)}",
                            code="provider.unknown") from None

