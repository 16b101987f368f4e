"""The event loop every Lockgate process runs on: uvloop where it is installed."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine
from typing import Any, TypeVar

from lockgate.runtime.natsclient import coalesce_writes, parse_headers_faster, timed_requests

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to completion on uvloop's loop if available, else on asyncio's own.

    ``LOCKGATE_EVENT_LOOP=asyncio`` keeps the standard loop (to compare, or to debug).
    The process's NATS clients write what one loop turn publishes together, parse header
    blocks faster and time their requests out with timers (``lockgate.runtime.natsclient``).
    """
    coalesce_writes()
    parse_headers_faster()
    timed_requests()
    if os.environ.get("LOCKGATE_EVENT_LOOP", "uvloop") != "asyncio":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.run(main)
    return asyncio.run(main)
