"""The broker's refusals of a publish, turned into ``PermissionDenied`` at once instead of a timeout."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import weakref
from collections.abc import Awaitable, Iterator
from typing import TypeVar

from nats.aio.client import Client

from lockgate.client.sdk.errors import PermissionDenied

T = TypeVar("T")

log = logging.getLogger("lockgate.client")


#: The broker's notice that it dropped a message this connection's user may not publish.
_PUBLISH_DENIED = re.compile(r'permissions violation for publish to "([^"]+)"', re.IGNORECASE)


class Denials:
    """The broker's permission notices to one connection, handed to whoever waits on their subject.

    The broker drops a message its sender may not publish and tells the sender so, apart
    from the message: without listening for that notice a request waits out its timeout
    and looks like nobody answering.
    """

    def __init__(self, user: str) -> None:
        self.user = user
        self._waiting: dict[str, set[asyncio.Future[None]]] = {}

    async def on_error(self, exc: Exception) -> None:
        """The connection's error callback: a refused publish ends its waiters; every error is logged."""
        found = _PUBLISH_DENIED.search(str(exc))
        if found is not None:
            for waiter in self._waiting.get(found.group(1).lower(), ()):
                if not waiter.done():
                    waiter.set_result(None)
        await _log_error(exc)

    @contextlib.contextmanager
    def watch(self, subject: str) -> Iterator[asyncio.Future[None]]:
        """A future done when the broker refuses a publish to ``subject`` while it is watched."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        key = subject.lower()  # the server's notice need not keep the case
        self._waiting.setdefault(key, set()).add(waiter)
        try:
            yield waiter
        finally:
            waiters = self._waiting.get(key)
            if waiters is not None:
                waiters.discard(waiter)
                if not waiters:
                    del self._waiting[key]


#: The notices of the connections ``connect`` opened (a connection handed in has none).
DENIALS: weakref.WeakKeyDictionary[Client, Denials] = weakref.WeakKeyDictionary()


async def unless_denied(nc: Client, subject: str, work: Awaitable[T]) -> T:
    """``work`` (which publishes to ``subject`` on ``nc``), ended at once if the broker refuses that.

    Raises:
        PermissionDenied: the broker refused this user a publish to ``subject``.
    """
    denials = DENIALS.get(nc)
    task = asyncio.current_task()
    if denials is None or task is None:
        return await work
    waiting = True

    def interrupt(_: asyncio.Future[None]) -> None:
        if waiting:  # a notice after ``work`` ended must not cancel whatever the task does next
            task.cancel()

    # No task of its own per request (this is on every proposal's path): the notice
    # cancels the waiting task, which turns the cancellation into the refusal.
    with denials.watch(subject) as denied:
        denied.add_done_callback(interrupt)
        try:
            return await work
        except asyncio.CancelledError:
            if not denied.done() or task.cancelling() > 1:  # cancelled by its owner too
                raise
            task.uncancel()
            raise PermissionDenied(f"the broker refused user {denials.user!r} permission to publish "
                                   f"to {subject}", subject=subject) from None
        finally:
            waiting = False


async def _log_error(exc: Exception) -> None:
    # nats-py's default prints a traceback for every failed (re)connect attempt.
    log.warning("broker connection: %s", exc)
