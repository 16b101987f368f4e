"""The few lines a runtime writes: hand Lockgate a provider's response, get back what to append."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from lockgate.client.providers.calls import (
    ParsedResponse,
    ProviderCall,
    ProviderError,
    provider_tool_name,
    tool_names,
)
from lockgate.client.providers.formats import format_of
from lockgate.client.providers.streams import STREAMS, Event, StreamAssembly
from lockgate.contracts.messages import Tool
from lockgate.contracts.responses import ModelResponse


class Proposer(Protocol):
    """What proposing needs of a turn (``lockgate.client.sdk.Turn`` is one)."""

    @property
    def tools(self) -> tuple[Tool, ...]: ...

    async def propose(
        self, *, tool: str, arguments: str, call_id: str | None = None, timeout_s: float = 30.0,
        provider_item: dict[str, Any] | None = None, provider: str = "", model: str = "",
        follows: str | None = None, assembly_failure: str | None = None,
    ) -> ModelResponse: ...


@dataclass(frozen=True)
class Answer:
    """One item of the provider's response and what Lockgate answered for it."""

    call: ProviderCall
    response: ModelResponse


@dataclass(frozen=True)
class Outcome:
    """Everything Lockgate answered for one provider response, and how to tell the model."""

    provider: str
    model: str
    answers: tuple[Answer, ...]

    @property
    def calls(self) -> tuple[ProviderCall, ...]:
        """The items proposed: calls and recorded failures."""
        return tuple(a.call for a in self.answers)

    def tool_results(self) -> list[dict[str, Any]]:
        """The provider's own result items, one per item it expects answered, in order.

        Chat ``tool`` messages, Responses ``function_call_output`` items, Anthropic
        ``tool_result`` blocks or Gemini ``functionResponse`` parts, each carrying only
        the model-facing projection (``model_content``).
        """
        result = format_of(self.provider).result
        return [result(a.call, a.response) for a in self.answers if a.call.answered]

    def messages(self) -> list[dict[str, Any]]:
        """What to append to the provider conversation after the model's own turn.

        Chat: the ``tool`` messages; Responses: the ``function_call_output`` items;
        Anthropic: one ``user`` message of ``tool_result`` blocks; Gemini: one ``user``
        content of ``functionResponse`` parts. Empty when nothing needs answering.
        """
        return format_of(self.provider).turn(self.tool_results())


def tool_declarations(provider: str, tools: Sequence[Tool]) -> list[dict[str, Any]]:
    """The turn's catalogue as the provider's tool declarations, under provider-safe names.

    Gemini's come as one ``Tool`` of ``functionDeclarations``; the others as one entry each.

    Raises:
        ProviderError: an unknown provider, or two capabilities that map to one name.
    """
    declare = format_of(provider).tool
    tool_names(tools)
    declared = [declare(provider_tool_name(t.name), t.description, dict(t.parameters)) for t in tools]
    if provider == "gemini":
        return [{"functionDeclarations": declared}]
    return declared


def parse_response(provider: str, raw: bytes | str, tools: Sequence[Tool] = (), *,
                   choice: int = 0) -> ParsedResponse:
    """Every tool call (and every item to record as a failure) of one provider response.

    ``raw`` is the response body exactly as received: argument objects are kept as the
    bytes the provider sent. ``tools`` (the turn's catalogue) maps provider-facing names
    back to capabilities. A response with several choices (``n > 1``) offers
    alternatives: only ``choice``, the one the runtime continues, is read.

    Raises:
        ProviderError: unknown provider, or a body that is not such a response at all.
    """
    data = raw.encode("utf-8") if isinstance(raw, str) else bytes(raw)
    return format_of(provider).parse(data, tool_names(tools), choice)


async def propose_calls(turn: Proposer, provider: str, model: str, calls: Sequence[ProviderCall], *,
                        timeout_s: float = 30.0) -> Outcome:
    """Propose every call and record every failure, concurrently; return the answers.

    Safe to repeat: the call ids are derived from the response, so the same calls are
    the same intents and Lockgate deduplicates them.

    Raises:
        ClientError: proposing one of them failed (the first such error, after every
            other proposal finished); handing the same calls again is safe.
    """
    format_of(provider)
    answered = await asyncio.gather(*(turn.propose(
        tool=c.tool, arguments=c.arguments, call_id=c.call_id, timeout_s=timeout_s,
        provider_item=c.provider_item, provider=provider, model=model,
        assembly_failure=c.failure) for c in calls), return_exceptions=True)
    for answer in answered:
        if isinstance(answer, BaseException):
            raise answer
    return Outcome(provider=provider, model=model, answers=tuple(
        Answer(c, a) for c, a in zip(calls, answered, strict=True) if isinstance(a, ModelResponse)))


async def propose_response(turn: Proposer, provider: str, raw: bytes | str, *,
                           choice: int = 0, timeout_s: float = 30.0) -> Outcome:
    """Propose every tool call of one provider response in ``turn``; return the answers.

    Raises:
        ProviderError: unknown provider, or a body that is not such a response.
        ClientError: a proposal failed (handing the response again is safe).
    """
    parsed = parse_response(provider, raw, turn.tools, choice=choice)
    return await propose_calls(turn, provider, parsed.model, parsed.calls, timeout_s=timeout_s)


def stream(provider: str, tools: Sequence[Tool] = (), **options: Any) -> StreamAssembly:
    """A fresh assembly for one stream of ``provider`` (``openai.chat``, ``openai.responses``,
    ``anthropic.messages``); ``options`` go to its constructor (``max_arguments_bytes``, ``choice``).

    Raises:
        ProviderError: the format has no stream assembly here.
    """
    format_of(provider)
    try:
        kind = STREAMS[provider]
    except KeyError:
        raise ProviderError(f"no stream assembly for {provider!r}; one of {sorted(STREAMS)}",
                            code="provider.unknown") from None
    return kind(tool_names(tools), **options)


async def propose_stream(turn: Proposer, provider: str, events: AsyncIterable[Event], *,
                         timeout_s: float = 30.0, **options: Any) -> Outcome:
    """Assemble a stream's calls from ``events`` as they arrive; propose them once it ends.

    Every item still open when the events stop is ``stream.truncated``, also when they
    stop with an error (a dropped connection, an event that is not JSON): what arrived
    is recorded, then the error is raised. When the task running this is cancelled, the
    items open then are recorded as ``stream.cancelled`` (shielded from the
    cancellation) before it is raised again.

    Raises:
        ProviderError: an event that is not a JSON object.
        ClientError: a proposal failed (proposing the same stream again is safe).
    """
    assembly = stream(provider, turn.tools, **options)
    try:
        async for event in events:
            assembly.feed(event)
    except asyncio.CancelledError:
        assembly.cancel()
        await asyncio.shield(propose_assembled(turn, assembly, timeout_s=timeout_s))
        raise
    except Exception:
        await propose_assembled(turn, assembly, timeout_s=timeout_s)
        raise
    return await propose_assembled(turn, assembly, timeout_s=timeout_s)


async def propose_assembled(turn: Proposer, assembly: StreamAssembly, *,
                            timeout_s: float = 30.0) -> Outcome:
    """Propose everything an assembly finished, ending the stream first if nobody did."""
    assembly.end()
    return await propose_calls(turn, assembly.provider, assembly.model, assembly.items(),
                               timeout_s=timeout_s)
