"""The events stream, read in order from a position: what the projection is handed.

Batched direct gets (``next_by_subj`` over ``lg.evt.>`` from the next sequence), the
read the event store's ``scan`` makes, which needs nothing on the server but the read
grant every service has: the projector creates no consumer and can change none. When
the views have caught up it asks again every ``IDLE_POLL_S``. A broker that does not
answer (restarting, a lost reply) is waited out: the read starts again after the last
event handed over, never after one read but not yet handed over.

Why not an ordered consumer (the library's ``ApplicationSubscription`` reads that way): it
needs the grant to create an ephemeral consumer on ``LG_EVENTS``,
``$JS.API.CONSUMER.CREATE.LG_EVENTS``, and that subject carries no consumer name. Measured on
the bundled nats-server: a request on it with ``config.name`` set to a service's durable
(``intake``) is accepted and *replaces that durable's filter* (only ``durable_name`` is
refused, error 10020). A role holding it could starve or redirect any service's deliveries,
so the projector reads without it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Protocol, cast

from eventsourcing.persistence import Tracking
from nats.aio.client import Client

from lockgate.eventstore.base import EventStoreUnavailable, RecordedEvent
from lockgate.eventstore.jetstream import JetStreamEventStore
from lockgate.intent.aggregate import Event
from lockgate.intent.codec import decode_event
from lockgate.runtime.settings import Settings

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
    """Events after each partition's position, in batches, until ``stop`` is set.

    One events stream (K = 1) is tracked as ``SOURCE``; K partitions each under their
    stream's name, read in turn, a batch from one partition at a time (an intent's
    events are all in one partition, so each keeps its order; the views need no order
    across intents).
    """

    def __init__(self, nc: Client, settings: Settings, store: Scan | None = None) -> None:
        self.nc = nc
        self.partitions = settings.partitions
        self._store = store or JetStreamEventStore(nc, api_prefix=settings.js_prefix,
                                                   partitions=self.partitions)
        self._js = nc.jetstream(prefix=settings.js_prefix)

    @property
    def sources(self) -> tuple[str, ...]:
        """The tracking name of each partition (its stream's name; ``SOURCE`` for K = 1)."""
        return self.partitions.streams

    def _scan(self, index: int, start: int) -> AsyncIterator[RecordedEvent]:
        if len(self.partitions) == 1:
            return self._store.scan(start)
        return cast(JetStreamEventStore, self._store).scan_partition(index, start)

    async def batches(self, after: Mapping[str, int | None],
                      stop: asyncio.Event) -> AsyncIterator[list[tuple[Event, Tracking]]]:
        """Yield what follows each partition's position in ``after`` (absent or ``None``:
        its start), waiting for more.

        Raises:
            EventDecodeError: an event this code cannot read (the projection stops
                rather than skip it).
        """
        positions = {name: after.get(name) or 0 for name in self.sources}
        retry_s = IDLE_POLL_S
        while not stop.is_set():
            handed = False
            for index, name in enumerate(self.sources):
                batch: list[tuple[Event, Tracking]] = []
                try:
                    async for recorded in self._scan(index, positions[name] + 1):
                        batch.append((decode_event(recorded), Tracking(name, recorded.sequence)))
                        if len(batch) >= BATCH:
                            break
                except EventStoreUnavailable as exc:
                    log.warning("%s did not answer (%s); reading again in %.1f s", name, exc, retry_s)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), retry_s)
                    retry_s = min(retry_s * 2, RETRY_MAX_S)
                    handed = True  # not idle: the same position is read again at once
                    break
                retry_s = IDLE_POLL_S
                if batch:
                    positions[name] = batch[-1][1].notification_id
                    handed = True
                    yield batch
            if not handed:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), IDLE_POLL_S)

    async def last_position(self) -> int:
        """How far the views could be: the events streams' last sequences, summed (the
        views' position is their tracked positions summed: ``views_position``)."""
        total = 0
        for name in self.sources:
            info = await self._js.stream_info(name)
            total += int(info.state.last_seq)
        return total
