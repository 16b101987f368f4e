"""``/api/stream``: server-sent events with a person's changed intents as the views move."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

from fastapi import APIRouter
from fastapi.responses import StreamingResponse

from lockgate.console.answers import intent_of
from lockgate.console.deps import Anyone, TheConsole
from lockgate.console.people import Person
from lockgate.console.running import Console

#: The live stream says it is alive this often when nothing changes.
KEEPALIVE_S = 15.0
#: At most this many changed intents in one live update (more: the page reloads its lists).
CHANGES_MAX = 200

router = APIRouter(tags=["live"])


@router.get("/api/stream", response_class=StreamingResponse,
            responses={200: {"content": {"text/event-stream": {}},
                             "description": "Server-sent events: hello, changed, expired."}})
async def stream(who: Anyone, console: TheConsole) -> StreamingResponse:
    """Live updates: a ``changed`` event with your tenants' intents whenever the views move."""
    return StreamingResponse(_events(console, who), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


def _sse(event: str, data: object) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


async def _events(console: Console, who: Person) -> AsyncIterator[bytes]:
    """The live stream of one person: what changed in their tenants since the last event."""
    since = console.position
    yield _sse("hello", {"position": since, "user": who.name})
    while not console.stopping.is_set():
        left = who.expires_at - time.time()
        if left <= 0:
            yield _sse("expired", {"detail": "the token has expired"})
            return
        if not await console.changed_since(since, min(KEEPALIVE_S, left)):
            yield b": keep-alive\n\n"
            continue
        position = console.position
        scope = who.tenants or (None,)
        pages = await asyncio.gather(*(
            console.read(console.views.intents, tenant=t, limit=CHANGES_MAX) for t in scope))
        rows = [r for page in pages for r in page if r.last_sequence > since]
        rows.sort(key=lambda r: r.last_sequence)
        yield _sse("changed", {
            "position": position, "more": len(rows) >= CHANGES_MAX,
            "intents": [intent_of(r).model_dump(mode="json") for r in rows[-CHANGES_MAX:]],
        })
        since = position
