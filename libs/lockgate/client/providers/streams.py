"""Streamed tool calls, assembled as transport state: nothing is a call until its item is done.

A stream hands a tool call over in pieces: an id and a name, then fragments of the
argument text. Those pieces are the transport's, not Lockgate's: an item becomes a call
only when the provider's terminal boundary for it arrives (Chat: the choice's
``finish_reason``; Responses: ``response.output_item.done``; Anthropic:
``content_block_stop``) and its text is complete JSON within the size limit. Anything
else that happens to an item — the stream ends or is cancelled first, the pieces
contradict each other, a field repeats, the text grows too large — is a typed failure
that is recorded on Lockgate's record (a rejected candidate), never run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from lockgate.client.providers.calls import (
    MAX_ARGUMENTS_BYTES,
    NO_ARGUMENTS,
    Draft,
    ProviderCall,
    ProviderError,
    bounded_item,
    call_id_for,
    capability_name,
    digest,
    is_complete_json,
    joined,
    utf8_prefix,
)
from lockgate.client.providers.formats import _ANTHROPIC_NOT_CALLS, _RESPONSES_NOT_CALLS

_event = msgspec.json.Decoder()

Event = bytes | bytearray | memoryview | str | Mapping[str, Any]
Key = str


@dataclass
class _Item:
    """One streamed item while it is open: what arrived so far, bounded."""

    position: str
    start: dict[str, Any]
    provider_id: str | None = None
    name: str | None = None
    pieces: list[str] = field(default_factory=list)
    size_bytes: int = 0
    deltas: int = 0
    arguments_done: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return joined(self.pieces)


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


class StreamAssembly:
    """The tool calls of one provider stream, assembled from its events.

    Feed each SSE event's data (bytes, text or an already decoded dict) to ``feed``;
    ``drafting`` says what is being written; at the end, ``end`` (the stream ended) or
    ``cancel`` (the runtime stopped it) closes what is still open as a failure; then
    ``items`` is every call and failure, and ``lockgate.client.providers.propose_stream``
    proposes them.
    """

    provider = ""
    #: The field of the provider's own item that carries the argument text (kept in evidence).
    arguments_field = "arguments"

    def __init__(self, tools: Mapping[str, str] | None = None, *,
                 max_arguments_bytes: int = MAX_ARGUMENTS_BYTES) -> None:
        self.names = dict(tools or {})
        self.max_arguments_bytes = max_arguments_bytes
        self.model = ""
        self.response_id = ""
        self.ended = False
        self.cancelled = False
        self._open: dict[Key, _Item] = {}
        self._final: dict[Key, ProviderCall] = {}
        self._new: list[ProviderCall] = []

    # --- what a runtime calls ---------------------------------------------------

    def feed(self, data: Event) -> tuple[ProviderCall, ...]:
        """Take one event; return the items it finished (calls, or failures to record).

        Events after the end (or a cancellation) change nothing.

        Raises:
            ProviderError: the event is not a JSON object (the transport is broken).
        """
        if self.ended:
            return ()
        event = self._decode(data)
        if event is not None:
            self._event(event)
        return self._emitted()

    def drafting(self) -> tuple[Draft, ...]:
        """The items still being written: tool name and bytes so far. None of them is a call."""
        return tuple(Draft(item.position, capability_name(item.name or "", self.names), item.size_bytes)
                     for item in self._open.values())

    def end(self) -> tuple[ProviderCall, ...]:
        """The stream ended: every item still open is ``stream.truncated``."""
        return self._close_all("stream.truncated", answered=True)

    def cancel(self) -> tuple[ProviderCall, ...]:
        """The runtime cancelled the stream: every item still open is ``stream.cancelled``.

        The model is told nothing of these (it never finished them), but they are on
        the record once proposed.
        """
        self.cancelled = not self.ended
        return self._close_all("stream.cancelled", answered=False)

    def items(self) -> tuple[ProviderCall, ...]:
        """Every finished item so far, calls and failures, in the order they were finished."""
        return tuple(self._final.values())

    # --- for each format --------------------------------------------------------

    def _event(self, event: Mapping[str, Any]) -> None:
        raise NotImplementedError

    def _decode(self, data: Event) -> Mapping[str, Any] | None:
        if isinstance(data, Mapping):
            return data
        raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        if raw.strip() == b"[DONE]":  # Chat's sentinel: the stream is over
            self.end()
            return None
        try:
            event = _event.decode(raw)
        except msgspec.DecodeError as exc:
            raise ProviderError(f"{self.provider}: a stream event that is not JSON: {exc}",
                                code="provider.event-malformed") from None
        if not isinstance(event, dict):
            raise ProviderError(f"{self.provider}: a stream event that is not an object",
                                code="provider.event-malformed")
        return event

    def _open_item(self, key: Key, position: str, start: Mapping[str, Any], *,
                   provider_id: str | None, name: str | None) -> _Item:
        item = _Item(position=position, start=dict(start), provider_id=provider_id, name=name)
        self._open[key] = item
        return item

    def _identify(self, key: Key, item: _Item, *, provider_id: str | None, name: str | None) -> bool:
        """Take an id and a name; a second, different one is a conflict. False when the item failed."""
        if provider_id is not None:
            if item.provider_id not in (None, provider_id):
                self._fail(key, "stream.conflicting-delta", f"a second id {provider_id!r}")
                return False
            item.provider_id = provider_id
        if name is not None:
            if item.name not in (None, name):
                self._fail(key, "stream.conflicting-delta", f"a second name {name!r}")
                return False
            item.name = name
        return True

    def _append(self, key: Key, fragment: str) -> None:
        item = self._open[key]
        item.deltas += 1
        item.size_bytes += len(fragment.encode("utf-8", "surrogatepass"))
        item.pieces.append(fragment)
        if item.size_bytes > self.max_arguments_bytes:
            # Stop at once: keep only what a failure records, never the whole flood.
            item.pieces = [utf8_prefix(item.text)]
            self._fail(key, "stream.too-large",
                       f"more than {self.max_arguments_bytes} bytes of arguments")

    def _close(self, key: Key) -> None:
        """The item's terminal boundary: a call if its text is complete, else a failure."""
        item = self._open[key]
        text = item.text if item.pieces else ""
        if not text:
            text = NO_ARGUMENTS
        if not is_complete_json(text):
            self._fail(key, "stream.truncated", "the arguments are not complete JSON")
        elif not item.name:
            self._fail(key, "provider.item-malformed", "the call names no tool")
        else:
            del self._open[key]
            self._finish(key, item, text, failure=None)

    def _fail(self, key: Key, code: str, detail: str, *, answered: bool = True) -> None:
        item = self._open.pop(key)
        self._finish(key, item, utf8_prefix(item.text), failure=code, detail=detail, answered=answered)

    def _record(self, key: Key, position: str, start: Mapping[str, Any], code: str, detail: str,
                *, provider_id: str | None = None, name: str | None = None,
                answered: bool = True) -> None:
        """A failure for an item that never opened (an unknown kind, a delta with no item)."""
        if key in self._final:
            self._late(key, code, detail)
            return
        self._open_item(key, position, start, provider_id=provider_id, name=name)
        self._fail(key, code, detail, answered=answered)

    def _late(self, key: Key, code: str, detail: str) -> None:
        """An event for an item already finished: a call it was is a failure now.

        A runtime that proposed the call already will have its failure refused as a reuse
        of the call id with other bytes — on the record either way.
        """
        done = self._final[key]
        if done.failure is not None:
            return
        item = _Item(position=done.position, start=dict(done.provider_item),
                     provider_id=done.provider_call_id, name=done.provider_tool,
                     pieces=[done.arguments], extra={"late": True})
        self._finish(key, item, utf8_prefix(done.arguments), failure=code, detail=detail)

    def _finish(self, key: Key, item: _Item, text: str, *, failure: str | None, detail: str = "",
                answered: bool = True) -> None:
        name = item.name or ""
        stream_key = ("id:" + self.response_id if self.response_id
                      else digest(f"{name}\x1f{item.text}".encode("utf-8", "replace")))
        # The evidence keeps what arrived (an empty text stays empty), not what is proposed.
        evidence = dict(item.start) if item.extra.get("late") else self._evidence(item, item.text)
        call = ProviderCall(
            provider=self.provider, position=item.position, tool=capability_name(name, self.names),
            arguments=text, call_id=call_id_for(self.provider, stream_key, item.position, item.provider_id),
            provider_call_id=item.provider_id, provider_item=bounded_item(evidence), provider_tool=name,
            failure=failure, answered=answered and (item.provider_id is not None or failure is None),
            detail=detail)
        self._final.pop(key, None)
        self._final[key] = call
        self._new.append(call)

    def _evidence(self, item: _Item, text: str) -> dict[str, Any]:
        return {**item.start, self.arguments_field: text}

    def _close_all(self, code: str, *, answered: bool) -> tuple[ProviderCall, ...]:
        if not self.ended:
            self.ended = True
            for key in list(self._open):
                self._fail(key, code, "the stream ended with the item open", answered=answered)
        return self._emitted()

    def _emitted(self) -> tuple[ProviderCall, ...]:
        new, self._new = tuple(self._new), []
        return new


class ChatStream(StreamAssembly):
    """OpenAI Chat Completions chunks: ``choices[].delta.tool_calls[]``, keyed by ``index``.

    Only the choice the runtime continues (``choice``, 0 by default) is assembled. Some
    compatible servers repeat an id or name in every delta: the same value again is
    not a conflict, another one is.
    """

    provider = "openai.chat"

    def __init__(self, tools: Mapping[str, str] | None = None, *, choice: int = 0,
                 max_arguments_bytes: int = MAX_ARGUMENTS_BYTES) -> None:
        super().__init__(tools, max_arguments_bytes=max_arguments_bytes)
        self.choice = choice
        self._finished = False

    def _evidence(self, item: _Item, text: str) -> dict[str, Any]:
        function = {**_dict(item.start.get("function")), "name": item.name or "", "arguments": text}
        identity = {} if item.provider_id is None else {"id": item.provider_id}
        return {**item.start, **identity, "function": function}

    def _event(self, event: Mapping[str, Any]) -> None:
        self.response_id = self.response_id or (_str(event.get("id")) or "")
        self.model = self.model or (_str(event.get("model")) or "")
        for choice in event.get("choices") or ():
            choice = _dict(choice)
            if choice.get("index", 0) != self.choice:
                continue
            for delta in _dict(choice.get("delta")).get("tool_calls") or ():
                self._delta(_dict(delta))
            if choice.get("finish_reason"):
                self._finished = True
                for key in list(self._open):
                    self._close(key)

    def _delta(self, delta: dict[str, Any]) -> None:
        index = delta.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            raise ProviderError("openai.chat: a tool-call delta without an index",
                                code="provider.event-malformed")
        key = str(index)
        position = f"{self.choice}.{index}"
        function = _dict(delta.get("function"))
        provider_id, name = _str(delta.get("id")), _str(function.get("name"))
        if key in self._final:
            self._late(key, "stream.conflicting-delta", "a delta after the item closed")
            return
        if key not in self._open:
            start = {k: v for k, v in delta.items() if k != "function"}
            start["function"] = {k: v for k, v in function.items() if k != "arguments"}
            if self._finished:
                self._record(key, position, start, "stream.conflicting-delta",
                             "a new tool call after the choice finished", provider_id=provider_id, name=name)
                return
            if delta.get("type") not in (None, "function"):
                self._record(key, position, start, "provider.unknown-item",
                             f"tool call of type {delta.get('type')!r}", provider_id=provider_id, name=name)
                return
            self._open_item(key, position, start, provider_id=provider_id, name=name)
        elif not self._identify(key, self._open[key], provider_id=provider_id, name=name):
            return
        arguments = function.get("arguments")
        if isinstance(arguments, dict):  # a compatible server that sends an object
            arguments = msgspec.json.encode(arguments).decode("utf-8")
        if isinstance(arguments, str) and arguments:
            self._append(key, arguments)


class ResponsesStream(StreamAssembly):
    """OpenAI Responses events, keyed by ``output_index``; ``response.output_item.done`` is the boundary."""

    provider = "openai.responses"

    def __init__(self, tools: Mapping[str, str] | None = None, *,
                 max_arguments_bytes: int = MAX_ARGUMENTS_BYTES) -> None:
        super().__init__(tools, max_arguments_bytes=max_arguments_bytes)
        self._skip: set[Key] = set()

    def _event(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        if kind in ("response.created", "response.in_progress"):
            response = _dict(event.get("response"))
            self.response_id = self.response_id or (_str(response.get("id")) or "")
            self.model = self.model or (_str(response.get("model")) or "")
        elif kind == "response.output_item.added":
            self._added(event)
        elif kind == "response.function_call_arguments.delta":
            key = self._key(event, "an argument delta")
            if key is not None:
                delta = event.get("delta")
                if isinstance(delta, str) and delta:
                    self._append(key, delta)
        elif kind == "response.function_call_arguments.done":
            key = self._key(event, "the arguments' end")
            if key is not None:
                self._arguments_done(key, event)
        elif kind == "response.output_item.done":
            self._done(event)
        elif kind in ("response.completed", "response.incomplete", "response.failed", "error"):
            response = _dict(event.get("response"))
            self.model = self.model or (_str(response.get("model")) or "")
            self.end()

    def _added(self, event: Mapping[str, Any]) -> None:
        key = str(event.get("output_index"))
        item = _dict(event.get("item"))
        kind = item.get("type")
        if key in self._open:
            self._fail(key, "stream.repeated-field", "a second output_item.added for the index")
            return
        if key in self._final or key in self._skip:
            self._record(key, key, item, "stream.repeated-field", "a second output_item.added for the index")
            return
        if kind in _RESPONSES_NOT_CALLS:
            self._skip.add(key)
        elif kind == "function_call":
            opened = self._open_item(key, key, item, provider_id=_str(item.get("call_id")),
                                     name=_str(item.get("name")))
            opened.extra["item_id"] = item.get("id")
            if isinstance(item.get("arguments"), str) and item["arguments"]:
                self._append(key, item["arguments"])
        else:
            self._record(key, key, item, "provider.unknown-item", f"output item of type {kind!r}",
                         provider_id=_str(item.get("call_id")) or _str(item.get("id")), answered=False)

    def _key(self, event: Mapping[str, Any], what: str) -> Key | None:
        """The open item an event is about; a conflict when there is none (or another one)."""
        key = str(event.get("output_index"))
        if key in self._final:
            self._late(key, "stream.conflicting-delta", f"{what} after the item closed")
            return None
        if key not in self._open:
            self._record(key, key, {"id": event.get("item_id")}, "stream.conflicting-delta",
                         f"{what} for an item that was never added")
            return None
        item_id = event.get("item_id")
        if item_id is not None and self._open[key].extra.get("item_id") not in (None, item_id):
            self._fail(key, "stream.conflicting-delta", f"{what} of another item {item_id!r}")
            return None
        return key

    def _arguments_done(self, key: Key, event: Mapping[str, Any]) -> None:
        item = self._open[key]
        if item.arguments_done:
            self._fail(key, "stream.repeated-field", "a second function_call_arguments.done")
            return
        item.arguments_done = True
        if not self._identify(key, item, provider_id=None, name=_str(event.get("name"))):
            return
        self._settle(key, event.get("arguments"))

    def _settle(self, key: Key, final: object) -> None:
        """The full text a closing event repeats: it must be what the deltas said."""
        item = self._open[key]
        if not isinstance(final, str):
            return
        if item.deltas == 0 and not item.pieces:
            if final:
                self._append(key, final)
        elif final != item.text:
            self._fail(key, "stream.conflicting-delta", "the full arguments differ from the deltas")

    def _done(self, event: Mapping[str, Any]) -> None:
        key = str(event.get("output_index"))
        item = _dict(event.get("item"))
        if key in self._skip:
            return
        if key in self._final:
            self._late(key, "stream.repeated-field", "a second output_item.done for the index")
            return
        if key not in self._open:
            if item.get("type") != "function_call":
                self._record(key, key, item, "provider.unknown-item",
                             f"output item of type {item.get('type')!r}", answered=False,
                             provider_id=_str(item.get("call_id")) or _str(item.get("id")))
                return
            opened = self._open_item(key, key, item, provider_id=None, name=None)
            opened.extra["item_id"] = item.get("id")
        opened = self._open[key]
        if not self._identify(key, opened, provider_id=_str(item.get("call_id")), name=_str(item.get("name"))):
            return
        if item:
            opened.start = {k: v for k, v in item.items() if k != "arguments"}
        self._settle(key, item.get("arguments"))
        if key in self._open:
            self._close(key)


class AnthropicStream(StreamAssembly):
    """Anthropic Messages events, keyed by content block ``index``; ``content_block_stop`` is the boundary."""

    provider = "anthropic.messages"
    arguments_field = "partial_json"

    def __init__(self, tools: Mapping[str, str] | None = None, *,
                 max_arguments_bytes: int = MAX_ARGUMENTS_BYTES) -> None:
        super().__init__(tools, max_arguments_bytes=max_arguments_bytes)
        self._skip: set[Key] = set()

    def _evidence(self, item: _Item, text: str) -> dict[str, Any]:
        start = {k: v for k, v in item.start.items() if k != "input"}
        return {**start, "id": item.provider_id, "name": item.name or "", "partial_json": text}

    def _event(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        if kind == "message_start":
            message = _dict(event.get("message"))
            self.response_id = self.response_id or (_str(message.get("id")) or "")
            self.model = self.model or (_str(message.get("model")) or "")
        elif kind == "content_block_start":
            self._start(str(event.get("index")), _dict(event.get("content_block")))
        elif kind == "content_block_delta":
            self._delta(str(event.get("index")), _dict(event.get("delta")))
        elif kind == "content_block_stop":
            key = str(event.get("index"))
            if key in self._open:
                self._close(key)
            elif key in self._final:
                self._late(key, "stream.repeated-field", "a second content_block_stop for the index")
        elif kind in ("message_stop", "error"):
            self.end()

    def _start(self, key: Key, block: dict[str, Any]) -> None:
        kind = block.get("type")
        if key in self._open:
            self._fail(key, "stream.repeated-field", "a second content_block_start for the index")
            return
        if key in self._final or key in self._skip:
            self._record(key, key, block, "stream.repeated-field",
                         "a second content_block_start for the index",
                         provider_id=_str(block.get("id")), name=_str(block.get("name")))
            return
        if kind in _ANTHROPIC_NOT_CALLS:
            self._skip.add(key)
        elif kind == "tool_use":
            item = self._open_item(key, key, block, provider_id=_str(block.get("id")),
                                   name=_str(block.get("name")))
            initial = block.get("input")
            if isinstance(initial, dict) and initial:  # a proxy that sends the input whole
                item.extra["initial"] = msgspec.json.encode(initial).decode("utf-8")
        else:
            # A server tool's call (web search, …) or a block added later: on the record,
            # and answered by the server, not by a tool_result.
            self._record(key, key, block, "provider.unknown-item", f"content block of type {kind!r}",
                         provider_id=_str(block.get("id")), name=_str(block.get("name")), answered=False)

    def _delta(self, key: Key, delta: dict[str, Any]) -> None:
        if delta.get("type") != "input_json_delta":
            return  # text, thinking, signatures, citations: not a call's
        if key in self._skip:
            return
        if key in self._final:
            self._late(key, "stream.conflicting-delta", "a delta after the block stopped")
            return
        if key not in self._open:
            self._record(key, key, {}, "stream.conflicting-delta", "a delta for a block never started")
            return
        fragment = delta.get("partial_json")
        if isinstance(fragment, str) and fragment:
            self._append(key, fragment)

    def _close(self, key: Key) -> None:
        item = self._open[key]
        initial = item.extra.get("initial")
        if isinstance(initial, str) and not item.pieces:
            item.pieces = [initial]
        elif isinstance(initial, str):
            self._fail(key, "stream.conflicting-delta", "an input in the block's start and deltas too")
            return
        super()._close(key)


STREAMS: dict[str, type[StreamAssembly]] = {
    "openai.chat": ChatStream,
    "openai.responses": ResponsesStream,
    "anthropic.messages": AnthropicStream,
}
