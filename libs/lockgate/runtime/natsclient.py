"""What a loop turn publishes goes to the socket in one write.

nats-py appends each publish to a pending buffer and kicks its flusher task, which
writes the buffer to the socket. At a pipeline's pace (every handler publishing an
ack, an append, a request, each after its own await) nearly every message is kicked
alone and is one write system call of its own; on loopback TCP those calls were about
a third of every service's CPU. With ``coalesce_writes`` a publish yields to the event
loop once before it kicks, so every handler ready in that turn adds its messages to
the same buffer and the flusher writes them together. A message waits one loop turn
more (microseconds); nothing is reordered (the buffer is one list, appended in order).

The hook is nats-py's ``Client._flush_pending`` (2.x), wrapped, not rewritten; with a
client that has no such coroutine nothing is changed.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from nats.aio.client import Client

_original: Callable[..., Awaitable[Any]] | None = None


def coalesce_writes(enable: bool = True) -> bool:
    """Make publishes of one loop turn share a write (or, ``enable=False``, stop).

    Returns whether the client now coalesces. Safe to call more than once.
    """
    global _original
    current = getattr(Client, "_flush_pending", None)
    if not enable:
        if _original is not None:
            Client._flush_pending = _original  # type: ignore[method-assign,assignment]
            _original = None
        return False
    if _original is not None:
        return True
    if current is None or not inspect.iscoroutinefunction(current) \
            or "force_flush" not in inspect.signature(current).parameters:
        return False
    original = current

    async def flush_after_this_turn(self: Client, force_flush: bool = False) -> Any:
        await asyncio.sleep(0)
        return await original(self, force_flush)

    _original = original
    Client._flush_pending = flush_after_this_turn  # type: ignore[method-assign]
    return True
