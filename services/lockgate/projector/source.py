"""The events stream, read in order from a position: what the projection is handed.

Batched direct gets (``next_by_subj`` over ``lg.evt.>`` from the next sequence), the
read the event store's ``scan`` makes, which needs nothing on the server but the read
grant every service has: the projector creates no consumer and can change none. When
the views have caught up it asks again every ``IDLE_POLL_S``. A broker that does not
answer (restarting, a lost reply) is waited out: the read starts again after the last
event handed over, never after one read but not yet handed over.

Why not the library's subscription (``ApplicationSubscription`` over ``LockgateRecord``,
an ordered consumer, which the same ``IntentViews`` also runs under; see
``tests/integration/test_recorder_library.py``): it needs the grant to create an
ephemeral consumer on ``LG_EVENTS``, ``$JS.API.CONSUMER.CREATE.LG_EVENTS``, and that
subject carries no consumer name. Measured on the bundled nats-server: a request on it
with ``config.name`` set to a service's durable (``intake``) is accepted and *replaces
that durable's filter* (only ``durable_name`` is refused, error 10020). A role holding
it could starve or redirect any service's deliveries, so the projector reads without it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Protocol

from eventsourcing.persistence import Tracking
from nats.aio.client import Client

from lockgate.eventstore.base import EventStoreUnavailable, RecordedEvent
from lockgate.eventstore.jetstream import JetStreamEventStore
from lockgate.intent.aggregate import Event
from lockgate.intent.codec import decode_event
from lockgate.runtime.settings import Settings
from lockgate.runtime.streams import EVENTS
from lockgate.views.store import SOURCE

#: How long a caught-up projector waits before asking the stream again.
IDLE_POLL_S = 0.1
#: The most events applied in one go (one thread hand-over, one transaction).
BATCH = 256
#: The longest wait between two reads of a stream that does not answer.
RETRY_MAX_S = 2.0

log = logging.getLogger(__name__)


class Scan(Protocol):
    """Stored events from a sequence on, in order (the event store's ``scan``)."""

    def scan(self, start_sequence: int = 1) -> AsyncIterator[RecordedEvent]: ...


class StreamSource:
    """Events after a position, in batches, until ``stop`` is set."""

    def __init__(self, nc: Client, settings: Settings, store: Scan | None = None) -> None:
        self.nc = nc
        self.store: Scan = store or JetStreamEventStore(nc, api_prefix=settings.js_prefix)
        self._js = nc.jetstream(prefix=settings.js_prefix)

    async def batches(self, after: int | None,
                      stop: asyncio.Event) -> AsyncIterator[list[tuple[Event, Tracking]]]:
        """Yield what follows ``after`` (``None``: the stream's start), waiting for more.

        Raises:
            EventDecodeError: an event this code cannot read (the projection stops
                rather than skip it).
        """
        position = after or 0
        retry_s = IDLE_POLL_S
        while not stop.is_set():
            batch: list[tuple[Event, Tracking]] = []
            try:
                async for recorded in self.store.scan(position + 1):
                    batch.append((decode_event(recorded), Tracking(SOURCE, recorded.sequence)))
                    if len(batch) >= BATCH:
                        break
            except EventStoreUnavailable as exc:
                log.warning("the events stream did not answer (%s); reading again in %.1f s",
                            exc, retry_s)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), retry_s)
                retry_s = min(retry_s * 2, RETRY_MAX_S)
                continue
            retry_s = IDLE_POLL_S
            if batch:
                position = batch[-1][1].notification_id
                yield batch
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), IDLE_POLL_S)

    async def last_position(self) -> int:
        """The stream's last sequence (how far the views could be)."""
        info = await self._js.stream_info(EVENTS)
        return int(info.state.last_seq)
