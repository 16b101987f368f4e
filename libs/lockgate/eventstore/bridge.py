"""Synchronous callers, asynchronous client: an event loop in a thread of its own.

The ``eventsourcing`` library calls its recorders from whatever threads an application
runs (a projection runner has two, a test case ten), and waits for each answer; nats-py
runs on an asyncio loop. A ``LoopThread`` owns one loop, runs it in one daemon thread,
and hands it coroutines with ``asyncio.run_coroutine_threadsafe``: calls from many
threads share the loop (and the one connection on it) and overlap on the wire.

Nothing starts at import: the thread starts when a ``LoopThread`` is made.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopClosed(RuntimeError):
    """The loop was closed: nothing more runs on it."""


class LoopThread:
    """An asyncio event loop running in a daemon thread, for synchronous callers."""

    def __init__(self, name: str) -> None:
        """Start the loop's thread (``name`` names it, for stack dumps)."""
        self._loop = asyncio.new_event_loop()
        self._closed = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    @property
    def closed(self) -> bool:
        """True once ``close`` was called."""
        return self._closed

    def in_loop_thread(self) -> bool:
        """True when called from the loop's own thread (where waiting on it would deadlock)."""
        return threading.get_ident() == self._thread.ident

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop; its future may be waited on from any other thread.

        Cancelling the future cancels the coroutine's task on the loop.

        Raises:
            LoopClosed: the loop was closed (``coro`` is closed unstarted).
        """
        with self._lock:
            if self._closed:
                coro.close()
                raise LoopClosed("the event loop thread was closed")
            return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and wait for its result (or its exception).

        Raises:
            LoopClosed: the loop was closed, or is closed while ``coro`` runs.
            RuntimeError: called from the loop's own thread.
        """
        if self.in_loop_thread():
            coro.close()
            raise RuntimeError("a coroutine run from its own loop's thread would never finish")
        future = self.submit(coro)
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            if self._closed:
                raise LoopClosed("the event loop thread was closed") from None
            raise

    def close(self, timeout_s: float = 5.0) -> None:
        """Cancel what still runs on the loop, stop it and wait for its thread to end.

        Idempotent. Called from the loop's own thread it only asks the loop to stop.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self.in_loop_thread():
            self._loop.stop()
            return
        with contextlib.suppress(concurrent.futures.TimeoutError, RuntimeError):
            asyncio.run_coroutine_threadsafe(_cancel_others(), self._loop).result(timeout_s)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout_s)
        if not self._thread.is_alive():
            self._loop.close()


async def _cancel_others() -> None:
    """Cancel every task of the running loop but this one and let them unwind."""
    current = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not current]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.get_running_loop().shutdown_asyncgens()
