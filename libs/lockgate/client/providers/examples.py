"""The loops the README shows ("Where agents plug in"), verbatim: a test runs them against the real system.

Each is a whole agent task with one provider: offer the turn's tools, hand the
provider's response body to Lockgate, append what comes back, until the model calls
nothing more. ``ask`` stands for the provider's API and returns the response body as
bytes (with the official SDKs, ``….with_raw_response.create(...)`` and then
``.http_response.content``): the bytes, not a parsed object, so the argument text
Lockgate judges is exactly what the model wrote.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterable, Awaitable, Callable
from typing import Any

from lockgate.client import providers
from lockgate.client.sdk import Run, Turn

Messages = list[dict[str, Any]]
#: The provider's API: the conversation so far and the tools offered, to the response body.
Ask = Callable[[Messages, Messages], Awaitable[bytes]]

TASK = "The customer called back: note it on the case."


async def openai_chat_task(run: Run, ask: Ask) -> Messages:
    """One task with OpenAI Chat Completions."""
    messages: Messages = [{"role": "user", "content": TASK}]
    while True:
        turn = await run.open_turn()
        body = await ask(messages, providers.tool_declarations("openai.chat", turn.tools))
        outcome = await providers.propose_response(turn, "openai.chat", body)
        if not outcome.tool_results():
            return messages
        messages += [json.loads(body)["choices"][0]["message"], *outcome.messages()]


async def openai_responses_task(run: Run, ask: Ask) -> Messages:
    """One task with the OpenAI Responses API."""
    items: Messages = [{"role": "user", "content": TASK}]
    while True:
        turn = await run.open_turn()
        body = await ask(items, providers.tool_declarations("openai.responses", turn.tools))
        outcome = await providers.propose_response(turn, "openai.responses", body)
        if not outcome.tool_results():
            return items
        items += [*json.loads(body)["output"], *outcome.messages()]


async def anthropic_task(run: Run, ask: Ask) -> Messages:
    """One task with Anthropic Messages."""
    messages: Messages = [{"role": "user", "content": TASK}]
    while True:
        turn = await run.open_turn()
        body = await ask(messages, providers.tool_declarations("anthropic.messages", turn.tools))
        outcome = await providers.propose_response(turn, "anthropic.messages", body)
        if not outcome.tool_results():
            return messages
        messages += [{"role": "assistant", "content": json.loads(body)["content"]}, *outcome.messages()]


async def gemini_task(run: Run, ask: Ask) -> Messages:
    """One task with Google Gemini."""
    contents: Messages = [{"role": "user", "parts": [{"text": TASK}]}]
    while True:
        turn = await run.open_turn()
        body = await ask(contents, providers.tool_declarations("gemini", turn.tools))
        outcome = await providers.propose_response(turn, "gemini", body)
        if not outcome.tool_results():
            return contents
        contents += [json.loads(body)["candidates"][0]["content"], *outcome.messages()]


async def anthropic_streamed_step(turn: Turn, events: AsyncIterable[bytes],
                                  stop: asyncio.Event) -> providers.Outcome:
    """One streamed Anthropic step: a call exists only once its block is complete."""
    assembly = providers.stream("anthropic.messages", turn.tools)
    async for data in events:  # each server-sent event's data
        assembly.feed(data)
        for draft in assembly.drafting():  # being written: never a call yet
            print(f"drafting {draft.tool} ({draft.size_bytes} bytes)")
        if stop.is_set():  # the user pressed stop: what is open is recorded, never run
            assembly.cancel()
            break
    return await providers.propose_assembled(turn, assembly)
