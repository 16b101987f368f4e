"""The running console: the views, the people, and how far the views go (for the live stream)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from lockgate.console.people import People
from lockgate.views.store import SOURCE, Views, views_position

T = TypeVar("T")


class Console:
    """What the routes read and act through: the views, the people, the latest position."""

    def __init__(self, views: Views, people: People, *, poll_s: float = 0.5,
                 lag: Callable[[], Awaitable[int | None]] | None = None,
                 sources: Sequence[str] = (SOURCE,)) -> None:
        """``sources``: the events streams (partitions) the views track a position in."""
        self.views = views
        self.sources = tuple(sources)
        self.people = people
        self.poll_s = poll_s
        #: How many events the views lag the stream, as the projector says (None: unknown).
        self.lag = lag
        self.position = 0
        self.stopping = asyncio.Event()
        self._changed = asyncio.Condition()

    async def read(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """A views call, on a thread (the views' calls block)."""
        return await asyncio.to_thread(call, *args, **kwargs)

    async def follow(self) -> None:
        """Poll the views' tracked position until stopping; wake every live stream on a change."""
        while not self.stopping.is_set():
            try:
                position = await self.read(views_position, self.views, self.sources) or 0
            except Exception:  # noqa: BLE001 - the views may be briefly locked; poll again
                position = self.position
            if position != self.position:
                self.position = position
                async with self._changed:
                    self._changed.notify_all()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), self.poll_s)
        async with self._changed:
            self._changed.notify_all()

    async def changed_since(self, position: int, timeout_s: float) -> bool:
        """Wait until the views move past ``position`` (False: ``timeout_s`` passed, or stopping)."""
        if self.position != position:
            return True
        async with self._changed:
            try:
                await asyncio.wait_for(
                    self._changed.wait_for(lambda: self.position != position or self.stopping.is_set()),
                    timeout_s)
            except TimeoutError:
                return False
        return self.position != position and not self.stopping.is_set()
