"""The archiver process: ended intents leave the hot store once the views hold them.

The hot store keeps an index entry per subject in memory, so it holds live and recent
intents, not the whole past. Every ``archive_every_s`` the
archiver asks the views for intents that ended before ``archive_after_s`` ago, and for
each one:

1. loads it from the store and checks it ended, is not archived, and that the views
   hold every event of it (their row is at the store's version): a live intent never
   leaves, however old, and nothing the views lack is purged;
2. appends ``IntentArchived`` after its last event, with the same optimistic
   concurrency as every writer (an event that lands meanwhile refuses the mark, and
   the intent waits for the next round);
3. purges the intent's events *before* the mark, and only those. The mark stays as the
   intent's identity: a retried call id finds it and is not recorded again.

A crash between 2 and 3 leaves the mark with the events before it; the next start
finishes the purge of every intent marked in the last ``REPAIR_WINDOW_S``. Its user
may read the record, append ``IntentArchived`` and purge ``LG_EVENTS``, nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from datetime import UTC, datetime, timedelta

import msgspec
from nats.aio.msg import Msg
from nats.errors import Error as NatsError
from nats.js.client import JetStreamContext
from prometheus_client import Counter

from lockgate.archiver.domain import archived, may_archive
from lockgate.contracts import subjects
from lockgate.contracts.status import ProcessStatus
from lockgate.eventstore.base import ConcurrencyConflict, EventStore, EventStoreError
from lockgate.eventstore.jetstream import JetStreamEventStore
from lockgate.eventstore.partitions import SINGLE, Partitions
from lockgate.eventstore.subjects import aggregate_filter
from lockgate.intent.codec import decode_event, encode_event, fold
from lockgate.runtime import metrics
from lockgate.runtime.entry import connect, run_process
from lockgate.runtime.settings import Settings
from lockgate.views.rows import IntentRow, iso
from lockgate.views.store import Views, open_views

log = logging.getLogger("lockgate.archiver")

NAME = "archiver"
#: How far back a restarted archiver looks for a purge a crash cut short.
REPAIR_WINDOW_S = 3600.0
#: Intents archived per round at most (the next round takes the rest).
ROUND = 200

ARCHIVED = Counter("lockgate_archived_total", "Intents whose events left the hot store")


class Archiver:
    """Moves ended intents out of the hot store, one round at a time."""

    def __init__(self, store: EventStore, js: JetStreamContext, views: Views, *,
                 after_s: float, partitions: Partitions = SINGLE) -> None:
        """``partitions``: the events streams ``store`` keeps the intents in."""
        self.store = store
        self.partitions = partitions
        self.js = js
        self.views = views
        self.after_s = after_s
        self.archived = 0
        self.last_round: str = ""

    async def round(self, now: datetime) -> int:
        """Archive what may go now; return how many intents left the hot store."""
        cutoff = iso(now - timedelta(seconds=self.after_s))
        rows = await asyncio.to_thread(self.views.ended_before, cutoff, limit=ROUND)
        done = 0
        for row in rows:
            if await self.archive(row, now):
                done += 1
        self.archived += done
        self.last_round = iso(now)
        return done

    async def archive(self, row: IntentRow, now: datetime) -> bool:
        """Mark and purge one intent if it may go (False: not now, and why is logged)."""
        history = await self.store.load(row.tenant, row.intent_id)
        intent = fold(decode_event(r) for r in history.events)
        if intent is None:
            return False
        why = may_archive(intent, row)
        if why is not None:
            log.debug("intent %s stays: %s", row.intent_id, why)
            return False
        try:
            marked = await self.store.append(history, [encode_event(archived(intent, now=now))])
        except ConcurrencyConflict:
            return False  # something landed meanwhile: next round, once the views have it
        await self.purge_before(row.tenant, row.intent_id, marked.events[-1].sequence)
        ARCHIVED.inc()
        return True

    async def purge_before(self, tenant: str, intent_id: str, sequence: int) -> None:
        """Purge the intent's events stored before ``sequence`` (its mark), and no other."""
        where = self.partitions.of(intent_id)
        await self.js.purge_stream(where.stream, subject=aggregate_filter(tenant, intent_id, prefix=where.prefix),
                                   seq=sequence)

    async def repair(self, now: datetime) -> int:
        """Finish the purges a crash cut short (marked intents whose events are still there)."""
        since = iso(now - timedelta(seconds=REPAIR_WINDOW_S))
        rows = await asyncio.to_thread(self.views.archived_since, since, limit=1000)
        repaired = 0
        for row in rows:
            history = await self.store.load(row.tenant, row.intent_id)
            if len(history.events) > 1 and history.events[0].event_type != "IntentArchived":
                marks = [e for e in history.events if e.event_type == "IntentArchived"]
                if marks:
                    await self.purge_before(row.tenant, row.intent_id, marks[-1].sequence)
                    repaired += 1
        return repaired


async def serve(settings: Settings, stop: asyncio.Event) -> int:
    """Archive every ``archive_every_s`` until ``stop`` is set."""
    endpoint = metrics.start_endpoint(settings)
    nc = await connect(settings, name=f"lockgate-{NAME}", stop=stop)
    views = await asyncio.to_thread(open_views, settings.views_url, var_dir=settings.var_dir)
    archiver = Archiver(JetStreamEventStore(nc, api_prefix=settings.js_prefix, partitions=settings.partitions),
                        nc.jetstream(prefix=settings.js_prefix), views,
                        after_s=settings.archive_after_s, partitions=settings.partitions)

    async def answer(msg: Msg) -> None:
        if msg.reply:
            status = ProcessStatus(service=NAME, pid=os.getpid(),
                                   instance=f"archived {archiver.archived}",
                                   metrics=metrics.url_of(endpoint))
            await msg.respond(msgspec.json.encode(status))

    status = await nc.subscribe(subjects.status(NAME), cb=answer)
    try:
        if settings.archive_after_s > 0:
            with contextlib.suppress(EventStoreError, NatsError, TimeoutError):
                await archiver.repair(datetime.now(UTC))
        while not stop.is_set():
            if settings.archive_after_s > 0:
                try:
                    await archiver.round(datetime.now(UTC))
                except (EventStoreError, NatsError, TimeoutError) as exc:
                    log.warning("archive round failed (next round retries): %r", exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), settings.archive_every_s)
        return 0
    finally:
        with contextlib.suppress(Exception):
            await status.unsubscribe()
        with contextlib.suppress(Exception):
            await nc.drain()
        views.close()
        if endpoint is not None:
            endpoint.stop()


def main() -> None:
    """``python -m lockgate.archiver``: settings from the environment, until SIGTERM."""
    run_process(NAME, serve)
