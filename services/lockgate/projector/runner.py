"""The projection's loop: take the lease, read from the views' position, apply in order.

The views' calls block (the library's recorders are synchronous), so each batch is
applied on a worker thread while the event loop goes on answering status and reading
the stream. A replica that does not get the lease stands by and asks again every
``poll_s``; one that loses its footing (a failed write, a gap, an event it cannot read)
stops projecting and gives the lease up, and the supervisor restarts it rather than
it guessing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from eventsourcing.persistence import Tracking

from lockgate.intent.aggregate import Event
from lockgate.views.lease import Lease
from lockgate.views.projection import IntentViews
from lockgate.views.store import SOURCE, Views, total

log = logging.getLogger(__name__)

#: Batches of events (with their positions) after each source's position, until the event is set.
Batches = Callable[[Mapping[str, int | None], asyncio.Event], AsyncIterator[list[tuple[Event, Tracking]]]]


@dataclass
class Progress:
    """What the projector did, for its status answer and its metrics."""

    role: str = "starting"
    """``starting``, ``standby``, ``refolding``, ``projecting`` or ``stopped``."""
    applied: int = 0
    position: int | None = None
    last_applied_at: float = field(default_factory=time.monotonic)
    busy_since: float | None = None
    error: str | None = None


class Projector:
    """One replica's projection of the event stream into ``views``."""

    def __init__(self, views: Views, lease: Lease, batches: Batches, *, poll_s: float = 0.5,
                 sources: Sequence[str] = (SOURCE,)) -> None:
        """``sources``: the events streams (partitions) the views track a position in."""
        self.views = views
        self.lease = lease
        self.batches = batches
        self.sources = tuple(sources)
        #: Each source's position, as applied.
        self.positions: dict[str, int | None] = {}
        self.poll_s = poll_s
        self.progress = Progress()
        self.projection = IntentViews(views, self.sources)

    async def run(self, stop: asyncio.Event) -> None:
        """Project until ``stop`` is set; on a failure give the lease up and re-raise."""
        p = self.progress
        try:
            while not stop.is_set():
                if not await asyncio.to_thread(self.lease.try_acquire):
                    p.role = "standby"
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), self.poll_s)
                    continue
                if await asyncio.to_thread(self.views.refold_pending):
                    p.role = "refolding"
                    n = await asyncio.to_thread(self.projection.refold)
                    log.info("refolded %d intents from the views' record", n)
                p.role = "projecting"
                self.positions = {name: await asyncio.to_thread(self.views.max_tracking_id, name)
                                  for name in self.sources}
                p.position = total(self.positions)
                p.last_applied_at = time.monotonic()
                log.info("projecting from position %s", self.positions)
                async for batch in self.batches(dict(self.positions), stop):
                    p.busy_since = time.monotonic()
                    await asyncio.to_thread(self._apply, batch)
                    p.busy_since = None
        except BaseException as exc:
            p.error = f"{type(exc).__name__}: {exc}"
            if not isinstance(exc, asyncio.CancelledError):
                log.exception("projection stopped")
            raise
        finally:
            p.role = "stopped"
            await asyncio.to_thread(self.lease.release)

    def _apply(self, batch: list[tuple[Event, Tracking]]) -> None:
        """One transaction per batch: the views move from its first position to its last."""
        p = self.progress
        p.applied += self.projection.process_events(batch)
        last = batch[-1][1]
        self.positions[last.application_name] = last.notification_id
        p.position = total(self.positions)
        p.last_applied_at = time.monotonic()
