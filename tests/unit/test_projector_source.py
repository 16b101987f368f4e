"""The projector's read of the stream when the broker does not answer for a while."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import cast

import pytest
from nats.aio.client import Client

from lockgate.eventstore.base import EventStoreUnavailable, RecordedEvent
from lockgate.intent.codec import encode_event
from lockgate.projector import source
from lockgate.projector.source import StreamSource
from lockgate.runtime.settings import Settings
from lockgate.testing.intents import History
from lockgate.views.store import SOURCE


class Flaky:
    """The stored events, with the store going silent after ``fail_after`` reads, ``times`` times."""

    def __init__(self, events: list[RecordedEvent], *, fail_after: int, times: int) -> None:
        self.events = events
        self.fail_after = fail_after
        self.times = times
        self.starts: list[int] = []

    async def scan(self, start_sequence: int = 1) -> AsyncIterator[RecordedEvent]:
        self.starts.append(start_sequence)
        for n, recorded in enumerate(e for e in self.events if e.sequence >= start_sequence):
            if self.times and n == self.fail_after:
                self.times -= 1
                raise EventStoreUnavailable("direct get timed out")
            yield recorded


def recorded(n: int) -> list[RecordedEvent]:
    h = History().normalized().decided("allow")
    out = []
    for seq, event in enumerate(h.events[:n], start=1):
        new = encode_event(event)
        out.append(RecordedEvent("tenant-a", event.originator_id.hex, event.originator_version,
                                 new.event_type, new.event_id, new.data, seq))
    return out


async def positions(src: StreamSource, after: int | None, want: int) -> list[int]:
    stop = asyncio.Event()
    seen: list[int] = []
    async with asyncio.timeout(10):
        async for batch in src.batches({SOURCE: after}, stop):
            seen.extend(t.notification_id for _, t in batch)
            if len(seen) >= want:
                stop.set()
    return seen


@pytest.fixture
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(source, "IDLE_POLL_S", 0.01)
    monkeypatch.setattr(source, "BATCH", 2)


def make(store: Flaky) -> StreamSource:
    nc = cast(Client, SimpleNamespace(jetstream=lambda prefix=None: None))
    return StreamSource(nc, Settings(), store=store)


@pytest.mark.usefixtures("quick")
async def test_a_silent_broker_mid_read_neither_skips_nor_repeats_an_event() -> None:
    events = recorded(3)
    store = Flaky(events, fail_after=1, times=2)   # reads one event, then the broker goes quiet
    seen = await positions(make(store), None, len(events))
    assert seen == [1, 2, 3]
    assert store.starts[:3] == [1, 1, 1]            # read again from the last handed over, not from 2


@pytest.mark.usefixtures("quick")
async def test_it_reads_on_from_where_the_views_are() -> None:
    events = recorded(3)
    store = Flaky(events, fail_after=0, times=1)
    assert await positions(make(store), 1, 2) == [2, 3]
    assert store.starts[0] == 2
