"""The projector process: the projection on its thread, status and metrics on the event loop.

It answers ``lg.status.projector`` like every service (ready once it projects or stands
by; its ``views`` entry says how far the views lag the stream and how long since the
last event was applied, so ``lockgate status`` and the supervisor see a stuck
projector as they see a stuck durable) and exports the views' state as gauges:
reviews waiting and the oldest one's age, intents by state, unknown outcomes open,
the lag and the events applied.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from datetime import UTC, datetime

import msgspec
from nats.aio.msg import Msg
from prometheus_client import Counter, Gauge

from lockgate.contracts import subjects
from lockgate.contracts.status import ConsumerProgress, ProcessStatus
from lockgate.projector.runner import Projector
from lockgate.projector.source import StreamSource
from lockgate.runtime import metrics
from lockgate.runtime.entry import connect, run_process
from lockgate.runtime.settings import Settings
from lockgate.views.lease import lease_for
from lockgate.views.rows import NEEDS_A_PERSON
from lockgate.views.store import Views, open_views, views_position

log = logging.getLogger("lockgate.projector")

NAME = "projector"
#: How often the gauges are read off the views and the stream.
GAUGES_EVERY_S = 2.0

REVIEWS_WAITING = Gauge("lockgate_reviews_waiting", "Reviews waiting for a person")
REVIEW_OLDEST_AGE = Gauge("lockgate_review_oldest_age_seconds",
                          "Age of the oldest review still waiting (0: none waits)")
INTENTS_BY_STATE = Gauge("lockgate_attempts", "Intents by state, as the views hold them",
                         ["state"])
UNKNOWN_OPEN = Gauge("lockgate_unknown_outcomes_open",
                     "Intents whose outcome is unknown or that wait for an operator")
LAG = Gauge("lockgate_projector_lag_events", "Events in the stream not yet in the views")
EVENTS = Counter("lockgate_projector_events_total", "Events applied to the views")


class Running:
    """The process's parts, for its status answer and its gauges."""

    def __init__(self, source: StreamSource, views: Views, projector: Projector, *,
                 metrics_url: str = "") -> None:
        self.source = source
        self.metrics_url = metrics_url
        self.views = views
        self.projector = projector
        self.stream_last = -1
        #: The views' position as the store last said (a standby's view of the holder's work).
        self.views_position: int | None = None
        self._counted = 0

    def status(self) -> ProcessStatus:
        """Ready once projecting or standing by; ``views`` says how far they lag the stream.

        Every replica reports the lag (a standby reads the views' position from the
        store), so whichever answers a reader first answers right; only the projecting
        one reports idle and busy times, by which a stuck projector is told apart.
        """
        p = self.projector.progress
        now = time.monotonic()
        consumers = {}
        position = p.position if p.role == "projecting" else self.views_position
        if self.stream_last >= 0 and p.role in ("projecting", "standby"):
            projecting = p.role == "projecting"
            consumers["views"] = ConsumerProgress(
                pending=max(0, self.stream_last - (position or 0)),
                idle_s=round(now - p.last_applied_at, 3) if projecting else 0.0,
                busy_s=round(now - p.busy_since, 3) if projecting and p.busy_since else 0.0)
        return ProcessStatus(service=NAME, pid=os.getpid(), instance=p.role,
                             ready=p.role in ("projecting", "standby"), consumers=consumers,
                             metrics=self.metrics_url)

    async def answer(self, msg: Msg) -> None:
        """The status, with the lag against the stream as it is now: a reader that sees
        ``pending`` 0 knows the views hold every event stored before it asked."""
        if not msg.reply:
            return
        with contextlib.suppress(Exception):
            self.stream_last = await asyncio.wait_for(self.source.last_position(), 1.0)
            if self.projector.progress.role != "projecting":
                self.views_position = await asyncio.to_thread(views_position, self.views,
                                                              self.source.sources)
        await msg.respond(msgspec.json.encode(self.status()))

    def refresh_gauges(self) -> None:
        """Read the gauges off the views (on a thread: the views' calls block)."""
        p = self.projector.progress
        EVENTS.inc(p.applied - self._counted)
        self._counted = p.applied
        if self.stream_last >= 0 and p.role == "projecting":
            LAG.set(max(0, self.stream_last - (p.position or 0)))
        waiting = self.views.reviews(status="waiting", limit=1000)
        REVIEWS_WAITING.set(len(waiting))
        if waiting:
            oldest = datetime.fromisoformat(waiting[0].requested_at)
            REVIEW_OLDEST_AGE.set(max(0.0, (datetime.now(UTC) - oldest).total_seconds()))
        else:
            REVIEW_OLDEST_AGE.set(0)
        counts = self.views.state_counts()
        for state, n in counts.items():
            INTENTS_BY_STATE.labels(state=state).set(n)
        UNKNOWN_OPEN.set(sum(counts.get(s, 0) for s in NEEDS_A_PERSON))

    async def watch(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(Exception):
                self.stream_last = await self.source.last_position()
            try:
                await asyncio.to_thread(self.refresh_gauges)
            except Exception:  # noqa: BLE001 - a gauge read must not stop the process
                log.warning("could not read the gauges off the views", exc_info=True)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), GAUGES_EVERY_S)


async def serve(settings: Settings, stop: asyncio.Event) -> int:
    """Run until ``stop`` is set (0) or the projection fails (1: the supervisor restarts it)."""
    endpoint = metrics.start_endpoint(settings)
    nc = await connect(settings, name=f"lockgate-{NAME}", stop=stop)
    views = await asyncio.to_thread(open_views, settings.views_url, var_dir=settings.var_dir)
    source = StreamSource(nc, settings)
    projector = Projector(views, lease_for(settings.views_url, settings.var_dir), source.batches,
                          sources=source.sources)
    running = Running(source, views, projector, metrics_url=metrics.url_of(endpoint))
    status = await nc.subscribe(subjects.status(NAME), cb=running.answer)
    halt = asyncio.Event()
    projecting = asyncio.create_task(projector.run(halt))
    watcher = asyncio.create_task(running.watch(halt))
    stopping = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({projecting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        failed = projecting.done() and projecting.exception() is not None
        return 1 if failed else 0
    finally:
        halt.set()
        for task in (projecting, watcher, stopping):
            task.cancel()
        await asyncio.gather(projecting, watcher, stopping, return_exceptions=True)
        with contextlib.suppress(Exception):
            await status.unsubscribe()
        with contextlib.suppress(Exception):
            await nc.drain()
        views.close()
        if endpoint is not None:
            endpoint.stop()


def main() -> None:
    """``python -m lockgate.projector``: settings from the environment, until SIGTERM."""
    run_process(NAME, serve)
