"""The projector on an in-memory source: stored events folded into the views (SQLite in a
temporary directory), in order, each once; a gap stops it; a replica without the lease
stands by. No broker: the projector's batches are its seam (``Projector(batches=...)``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path

import pytest
from eventsourcing.persistence import Tracking

from lockgate.intent.aggregate import Event
from lockgate.projector.runner import Projector
from lockgate.testing.intents import History
from lockgate.views.lease import FileLease
from lockgate.views.projection import IntentViews, ProjectionGap
from lockgate.views.store import SOURCE, Views, open_views


@pytest.fixture
def views(tmp_path: Path) -> Iterator[Views]:
    opened = open_views(f"sqlite:///{tmp_path / 'views.sqlite'}")
    yield opened
    opened.close()


class Source:
    """The stored events in stream order, handed over in batches of ``size``; the stop is
    set once everything after the asked position was handed (so ``run`` returns)."""

    def __init__(self, events: list[Event], size: int = 2) -> None:
        self.events = events
        self.size = size
        #: The positions each read started after.
        self.asked: list[Mapping[str, int | None]] = []

    async def batches(self, after: Mapping[str, int | None],
                      stop: asyncio.Event) -> AsyncIterator[list[tuple[Event, Tracking]]]:
        self.asked.append(dict(after))
        start = after.get(SOURCE) or 0
        pending = [(e, Tracking(SOURCE, seq)) for seq, e in enumerate(self.events, start=1) if seq > start]
        for i in range(0, len(pending), self.size):
            yield pending[i:i + self.size]
        stop.set()


class Held:
    """A lease another replica holds."""

    def try_acquire(self) -> bool:
        return False

    def release(self) -> None:
        return None


def two_intents() -> tuple[History, History, list[Event]]:
    """Two intents' events, interleaved as the stream stores them."""
    a = History(call_id="call-a").normalized().decided("allow")
    b = History(call_id="call-b").normalized().decided("deny", reasons=["case.closed"])
    return a, b, [a.events[0], b.events[0], a.events[1], b.events[1], a.events[2], b.events[2]]


async def project(views: Views, source: Source, tmp_path: Path) -> Projector:
    projector = Projector(views, FileLease(tmp_path / "views.lease"), source.batches, poll_s=0.01)
    await projector.run(asyncio.Event())
    return projector


async def test_stored_events_are_folded_into_the_views_in_order(views: Views, tmp_path: Path) -> None:
    a, b, events = two_intents()
    projector = await project(views, Source(events), tmp_path)
    row_a, row_b = views.intent(a.intent_id), views.intent(b.intent_id)
    assert row_a is not None and (row_a.state, row_a.version) == ("allowed", 3)
    assert row_b is not None and (row_b.state, row_b.version, row_b.reason) == ("denied", 3, "case.closed")
    assert [e.event_type for e in views.events_of(a.intent_id)] == [
        "CandidateReceived", "CandidateNormalized", "PolicyDecided"]
    assert views.max_tracking_id(SOURCE) == 6
    assert (projector.progress.applied, projector.progress.position, projector.progress.role) == (6, 6, "stopped")


async def test_a_projector_reads_on_from_the_views_position(views: Views, tmp_path: Path) -> None:
    a, _, events = two_intents()
    await project(views, Source(events[:3]), tmp_path)
    again = Source(events)
    projector = await project(views, again, tmp_path)
    assert again.asked == [{SOURCE: 3}]
    assert projector.progress.applied == 3
    row = views.intent(a.intent_id)
    assert row is not None and row.version == 3


async def test_events_handed_over_again_change_nothing(views: Views, tmp_path: Path) -> None:
    a, _, events = two_intents()
    await project(views, Source(events), tmp_path)
    async def replay(after: Mapping[str, int | None],
                     stop: asyncio.Event) -> AsyncIterator[list[tuple[Event, Tracking]]]:
        # What the views hold, handed over again at later positions (a replay).
        yield [(e, Tracking(SOURCE, 7 + n)) for n, e in enumerate(events[:2])]
        stop.set()

    projector = Projector(views, FileLease(tmp_path / "views.lease"), replay, poll_s=0.01)
    await projector.run(asyncio.Event())
    assert projector.progress.applied == 0
    assert len(views.events_of(a.intent_id)) == 3


async def test_a_gap_stops_the_projector_after_the_events_before_it(views: Views, tmp_path: Path) -> None:
    a, b, events = two_intents()
    gap = [events[0], events[1], events[4]]  # a's PolicyDecided without its CandidateNormalized
    lease = FileLease(tmp_path / "views.lease")
    projector = Projector(views, lease, Source(gap, size=3).batches, poll_s=0.01)
    with pytest.raises(ProjectionGap):
        await projector.run(asyncio.Event())
    assert views.max_tracking_id(SOURCE) == 2  # the two before it, applied
    row = views.intent(a.intent_id)
    assert row is not None and row.version == 1
    assert projector.progress.role == "stopped" and "ProjectionGap" in (projector.progress.error or "")
    other = FileLease(tmp_path / "views.lease")
    assert other.try_acquire()  # the lease was given up
    other.release()


async def test_a_replica_without_the_lease_stands_by_and_reads_nothing(views: Views) -> None:
    _, _, events = two_intents()
    source = Source(events)
    stop = asyncio.Event()
    projector = Projector(views, Held(), source.batches, poll_s=0.01)
    task = asyncio.create_task(projector.run(stop))
    for _ in range(500):
        if projector.progress.role == "standby":
            break
        await asyncio.sleep(0.01)
    stop.set()
    await task
    assert source.asked == [] and views.max_tracking_id(SOURCE) is None


def test_a_non_lockgate_event_is_refused(views: Views) -> None:
    with pytest.raises(TypeError):
        IntentViews(views).process_events([(object(), Tracking(SOURCE, 1))])
    assert views.max_tracking_id(SOURCE) is None
