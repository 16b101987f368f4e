"""The archiver without a broker: which intents may leave the hot store (its domain), and a
round over an in-memory store and SQLite views: the mark appended, the purge asked for the
events before it, live and unprojected intents left alone."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import cast

import pytest
from eventsourcing.persistence import Tracking
from nats.js.client import JetStreamContext

from lockgate.archiver.app import Archiver
from lockgate.archiver.domain import archived, may_archive
from lockgate.eventstore.memory import MemoryEventStore
from lockgate.intent.codec import decode_event, encode_event
from lockgate.intent.events import IntentArchived, Withdrawn
from lockgate.testing.intents import T0, History
from lockgate.views.projection import IntentViews
from lockgate.views.rows import IntentRow
from lockgate.views.store import SOURCE, Views, open_views

#: When the archiver runs: a day after the histories here ended.
NOW = T0 + timedelta(days=1)


def ended() -> History:
    return History(call_id="call-ended").normalized().decided("deny", reasons=["case.closed"])


def live() -> History:
    return History(call_id="call-live").normalized().decided("require_approval")


def row_of(h: History, **over: object) -> IntentRow:
    intent = h.intent
    fields: dict[str, object] = dict(
        tenant="tenant-a", intent_id=h.intent_id, run_id="run-1", actor="user-42", call_id=intent.call_id,
        tool="case.add_note", effect_class="write", destination="", state=intent.state.value,
        reason=intent.reason, model_status="denied", attempts=0, attempt_stage=None, review_id=None,
        version=intent.version, created_at="", updated_at="", last_sequence=0)
    fields.update(over)
    return IntentRow(**fields)  # type: ignore[arg-type]


def test_an_ended_intent_the_views_hold_may_go() -> None:
    h = ended()
    assert may_archive(h.intent, row_of(h)) is None


def test_a_live_intent_never_goes_however_old() -> None:
    h = live()
    assert may_archive(h.intent, row_of(h)) == "live"


def test_an_intent_the_views_lag_behind_stays() -> None:
    h = ended()
    assert may_archive(h.intent, row_of(h, version=h.intent.version - 1)) == "views behind"


def test_an_intent_marked_archived_is_not_marked_again() -> None:
    h = ended()
    h.extend([archived(h.intent, now=NOW)])
    assert may_archive(h.intent, row_of(h)) == "archived"


def test_the_mark_follows_the_last_event_and_keeps_the_intent_s_identity() -> None:
    h = ended()
    intent = h.intent
    mark = archived(intent, now=NOW)
    assert (mark.originator_version, mark.archived_versions) == (intent.version + 1, intent.version)
    assert (mark.call_id, mark.candidate_digest, mark.state, mark.reason) == (
        intent.call_id, intent.candidate_digest, "denied", "case.closed")
    assert mark.event_id == archived(intent, now=NOW + timedelta(hours=1)).event_id  # same mark again


class Purges:
    """The JetStream purges the archiver asks for (``purge_stream``), kept."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str, int]] = []

    async def purge_stream(self, name: str, *, subject: str, seq: int) -> bool:
        self.asked.append((name, subject, seq))
        return True


@pytest.fixture
def views(tmp_path: Path) -> Iterator[Views]:
    opened = open_views(f"sqlite:///{tmp_path / 'views.sqlite'}")
    yield opened
    opened.close()


async def stored(store: MemoryEventStore, views: Views, *histories: History, project: bool = True) -> None:
    """Store the histories; project them into the views unless ``project`` is false."""
    for h in histories:
        history = await store.load("tenant-a", h.intent_id)
        await store.append(history, [encode_event(e) for e in h.events])
    if project:
        IntentViews(views).process_events(
            [(decode_event(r), Tracking(SOURCE, r.sequence)) for r in store.all_events()])


async def test_a_round_marks_and_purges_what_ended_and_leaves_what_lives(views: Views) -> None:
    store, purges = MemoryEventStore(), Purges()
    gone, stays = ended(), live()
    await stored(store, views, gone, stays)
    archiver = Archiver(store, cast(JetStreamContext, purges), views, after_s=3600)
    assert await archiver.round(NOW) == 1
    events = (await store.load("tenant-a", gone.intent_id)).events
    assert [e.event_type for e in events][-1] == "IntentArchived"
    mark = decode_event(events[-1])
    assert isinstance(mark, IntentArchived) and mark.archived_versions == 3
    assert purges.asked == [("LG_EVENTS", f"lg.evt.tenant-a.{gone.intent_id}.>", events[-1].sequence)]
    assert [e.event_type for e in (await store.load("tenant-a", stays.intent_id)).events][-1] == "PolicyDecided"
    assert archiver.archived == 1


async def test_a_round_before_the_cutoff_archives_nothing(views: Views) -> None:
    store, purges = MemoryEventStore(), Purges()
    await stored(store, views, ended())
    archiver = Archiver(store, cast(JetStreamContext, purges), views, after_s=2 * 86400)
    assert await archiver.round(NOW) == 0
    assert purges.asked == []


async def test_an_intent_the_views_have_not_seen_whole_stays(views: Views) -> None:
    store, purges = MemoryEventStore(), Purges()
    h = ended()
    await stored(store, views, h)
    history = await store.load("tenant-a", h.intent_id)
    late = Withdrawn.next(h.intent, h.stamp(), by="r", why="")
    await store.append(history, [encode_event(late)])  # stored after the views read
    archiver = Archiver(store, cast(JetStreamContext, purges), views, after_s=3600)
    assert await archiver.round(NOW) == 0
    assert purges.asked == []
    assert "IntentArchived" not in [e.event_type for e in (await store.load("tenant-a", h.intent_id)).events]
