"""The projection into the views, on SQLite and on a real PostgreSQL the test starts.

What matters: every event lands once, in order, with its stream position in the same
transaction; a failure inside the transaction leaves nothing behind and the same event
applies afterwards; an event handed over twice is refused, not doubled; the queries
(intents, timeline, review queue, unknown outcomes, denials, budgets, runs) say what
the record says.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest
from eventsourcing.persistence import IntegrityError, PersistenceError, Tracking

from lockgate.intent.events import (
    AttemptSent,
    EffectCompleted,
    Event,
    ExecutionAuthorized,
    OutcomeUnknown,
    PolicyDecided,
    ReviewApproved,
    ReviewRequested,
    Withdrawn,
)
from lockgate.testing import postgres
from lockgate.testing.intents import T0, History
from lockgate.views.projection import IntentViews, ProjectionGap
from lockgate.views.store import SOURCE, Views, open_views
from tests.conftest import require_postgres


@pytest.fixture(scope="module")
def pg() -> Iterator[postgres.PostgresServer]:
    require_postgres()
    with postgres.PostgresServer() as server:
        yield server


_schemas = iter(range(1, 10_000))


@pytest.fixture(params=["sqlite", "postgres"])
def views(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Views]:
    if request.param == "sqlite":
        opened = open_views(f"sqlite:///{tmp_path / 'views.sqlite'}")
    else:
        server: postgres.PostgresServer = request.getfixturevalue("pg")
        # Each test its own database, so no test sees another's rows.
        import psycopg

        name = f"views_{next(_schemas)}"
        with psycopg.connect(server.url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")  # type: ignore[arg-type]
        opened = open_views(server.url.rsplit("/", 1)[0] + "/" + name)
    try:
        yield opened
    finally:
        opened.close()


class Feed:
    """Hands events to a projection at increasing stream positions, as the stream would."""

    def __init__(self, views: Views, start: int = 100) -> None:
        self.projection = IntentViews(views)
        self.position = start

    def send(self, *events: Event) -> None:
        for event in events:
            self.position += 1
            self.projection.process_event(event, Tracking(SOURCE, self.position))

    def history(self, h: History) -> History:
        self.send(*h.events)
        return h


def authorized(h: History) -> History:
    return h.add(ExecutionAuthorized, attempt_id="a1", intent_key="k1",
                 digest="sha256:d1", policy_revision="pol-1", contract_revision="rev-1",
                 gate_facts={}, deadline_at=T0 + timedelta(seconds=30))


def executed(call_id: str = "call-1", **kw: Any) -> History:
    h = authorized(History(call_id=call_id, **kw).normalized().decided("allow"))
    h.add(AttemptSent, attempt_id="a1")
    return h.add(EffectCompleted, attempt_id="a1", receipt={"note_id": "n1"},
                 result={"note_id": "n1"}, provenance={"adapter": "casenotes"})


def review(h: History, review_id: str = "rv-1") -> History:
    return h.add(ReviewRequested, review_id=review_id, digest=h.intent.digest or "",
                 policy_revision="pol-1", contract_revision="rev-1",
                 summary="Adds a note to case-123, visible to the case team",
                 expires_at=T0 + timedelta(hours=1), action="Add a note to case case-123",
                 visible_to="the case team", shown={"note": "hello"},
                 preconditions=("case.status is open",), recovery=("once sent it cannot be stopped",))


def test_an_executed_intent_is_one_row_and_its_whole_timeline_in_order(views: Views) -> None:
    feed = Feed(views)
    h = feed.history(executed())
    row = views.intent(h.intent_id)
    assert row is not None
    assert (row.state, row.model_status, row.tool, row.effect_class) == (
        "completed", "executed", "case.add_note", "write")
    assert (row.tenant, row.run_id, row.actor, row.attempts, row.version) == (
        "tenant-a", "run-1", "user-42", 1, len(h.events))
    assert row.destination == "case-notes:tenant-a/case-123"
    timeline = views.events_of(h.intent_id)
    assert [e.event_type for e in timeline] == [type(e).__name__ for e in h.events]
    assert [e.sequence for e in timeline] == list(range(101, 101 + len(h.events)))
    assert views.max_tracking_id(SOURCE) == 100 + len(h.events)


def test_the_timeline_is_each_events_own_fields_read_out_of_the_record(views: Views) -> None:
    h = Feed(views).history(executed())
    timeline = views.timeline(h.intent_id)
    assert [(t.sequence, t.version, t.event_type) for t in timeline] == [
        (e.sequence, e.version, e.event_type) for e in views.events_of(h.intent_id)]
    assert timeline[0].data["arguments"] == {"note": "hello"}
    assert timeline[-1].data["result"] == {"note_id": "n1"}
    assert views.timeline("no-such-intent") == []


def test_an_event_handed_over_twice_changes_nothing(views: Views) -> None:
    feed = Feed(views)
    h = History().normalized()
    feed.send(*h.events)
    again = IntentViews(views)  # a restarted projector, folding from what the views hold
    again.process_event(h.events[-1], Tracking(SOURCE, feed.position))
    again.process_event(h.events[0], Tracking(SOURCE, feed.position - 1))
    assert [e.version for e in views.events_of(h.intent_id)] == [1, 2]
    assert views.max_tracking_id(SOURCE) == feed.position


def test_a_position_not_past_the_last_is_refused_in_the_same_transaction(views: Views) -> None:
    feed = Feed(views)
    h = feed.history(History())
    h.normalized()
    with pytest.raises(IntegrityError):  # the library's tracking: positions only move on
        feed.projection.process_event(h.events[-1], Tracking(SOURCE, feed.position))
    assert [e.version for e in views.events_of(h.intent_id)] == [1]
    with pytest.raises(ProjectionGap):  # a different event at a version already held
        other = History(arguments={"note": "other"})
        other.events[0] = msgspec.structs.replace(other.events[0], event_id="forged")
        feed.send(other.events[0])
    assert [e.event_id for e in views.events_of(h.intent_id)] == [h.events[0].event_id]


def test_a_failure_inside_the_transaction_leaves_nothing_and_the_event_applies_after(
    views: Views, monkeypatch: pytest.MonkeyPatch,
) -> None:
    feed = Feed(views)
    h = History()
    feed.send(*h.events)
    h.normalized()
    original = type(views)._insert_tracking  # type: ignore[attr-defined]

    def crash(self: Any, cursor: Any, tracking: Tracking) -> None:
        raise PersistenceError("the disk went away")

    monkeypatch.setattr(type(views), "_insert_tracking", crash)
    with pytest.raises(PersistenceError):
        feed.send(h.events[-1])
    assert [e.version for e in views.events_of(h.intent_id)] == [1]
    row = views.intent(h.intent_id)
    assert row is not None and row.state == "proposed"
    assert views.max_tracking_id(SOURCE) == 101
    monkeypatch.setattr(type(views), "_insert_tracking", original)
    feed.position -= 1  # the stream hands the same event at the same position again
    feed.send(h.events[-1])
    row = views.intent(h.intent_id)
    assert row is not None and row.state == "normalized"
    assert [e.version for e in views.events_of(h.intent_id)] == [1, 2]


def test_the_review_queue_holds_what_waits_for_a_person_and_nothing_else(views: Views) -> None:
    feed = Feed(views)
    waiting = feed.history(review(History(call_id="c1").normalized().decided("require_approval")))
    approved = review(History(call_id="c2").normalized().decided("require_approval"), "rv-2")
    approved.add(ReviewApproved, review_id="rv-2", reviewer="alice",
                 digest="sha256:d1", policy_revision="pol-1", contract_revision="rev-1")
    feed.history(approved)
    stale = review(History(call_id="c3").normalized().decided("require_approval"), "rv-3")
    feed.history(stale)
    feed.send(*review(stale, "rv-4").events[-1:])  # a changed consequence: a new review
    queue = views.reviews()
    assert [r.review_id for r in queue] == ["rv-1", "rv-4"]
    assert queue[0].intent_id == waiting.intent_id
    assert queue[0].summary == "Adds a note to case-123, visible to the case team"
    assert queue[0].tool == "case.add_note" and queue[0].digest == "sha256:d1"
    assert (queue[0].action, queue[0].visible_to, queue[0].shown) == (
        "Add a note to case case-123", "the case team", {"note": "hello"})
    assert queue[0].preconditions == ("case.status is open",)
    (done,) = views.reviews(status="approved")
    assert (done.review_id, done.decided_by) == ("rv-2", "alice")
    assert [r.review_id for r in views.reviews(status="superseded")] == ["rv-3"]
    withdrawn = stale.add(Withdrawn, by="runtime", why="no longer needed")
    feed.send(withdrawn.events[-1])
    assert [r.review_id for r in views.reviews()] == ["rv-1"]


def test_unknown_outcomes_denials_runs_and_budgets_are_read_off_the_record(views: Views) -> None:
    feed = Feed(views)
    unknown = authorized(History(call_id="u1").normalized().decided("allow"))
    unknown.add(AttemptSent, attempt_id="a1")
    unknown.add(OutcomeUnknown, attempt_id="a1", evidence="deadline passed after send")
    feed.history(unknown)
    feed.history(History(call_id="d1").normalized().decided("deny", ["case.closed"]))
    feed.history(History(call_id="d2").normalized().decided("deny", ["case.closed"]))
    feed.history(executed("e1", run_id="run-2"))
    spend = History(call_id="b1").normalized()
    spend.extend([PolicyDecided.next(
        spend.intent, spend.stamp(), outcome="allow", policy_revision="pol-1", reasons=[],
        determining=[], facts={}, digest="sha256:d1", reservations=["notes-per-day"])])
    feed.history(spend)
    assert [r.intent_id for r in views.needing_a_person()] == [unknown.intent_id]
    (denials,) = views.denials()
    assert (denials.state, denials.reason, denials.intents) == ("denied", "case.closed", 2)
    runs = {r.run_id: r for r in views.runs()}
    assert (runs["run-1"].candidates, runs["run-1"].executed) == (4, 0)
    assert (runs["run-2"].candidates, runs["run-2"].executed) == (1, 1)
    (budget,) = views.budgets()
    assert (budget.budget, budget.reserved, budget.consumed, budget.released) == (
        "notes-per-day", 1, 0, 0)
    feed.send(*spend.add(Withdrawn, by="runtime", why="").events[-1:])
    (budget,) = views.budgets()
    assert (budget.reserved, budget.released) == (0, 1)


def test_intents_page_newest_change_first_and_filter(views: Views) -> None:
    feed = Feed(views)
    ids = [feed.history(History(call_id=f"p{i}").normalized()).intent_id for i in range(5)]
    feed.history(History(call_id="other", tenant="tenant-b"))
    first = views.intents(tenant="tenant-a", limit=2)
    assert [r.intent_id for r in first] == ids[::-1][:2]
    rest = views.intents(tenant="tenant-a", before=first[-1].last_sequence, limit=10)
    assert [r.intent_id for r in rest] == ids[::-1][2:]
    assert [r.tenant for r in views.intents(state="proposed")] == ["tenant-b"]


def test_a_store_of_another_shape_keeps_the_record_and_refolds_what_is_derived(
    views: Views,
) -> None:
    feed = Feed(views)
    h = feed.history(review(executed().events and History(call_id="r1").normalized()
                            .decided("require_approval")))
    done = feed.history(executed("e2"))
    record = views.events_of(h.intent_id) + views.events_of(done.intent_id)
    with views.datastore.transaction(commit=True) as c:  # type: ignore[attr-defined]
        c.execute(views._sql("UPDATE lg_meta SET value = ? WHERE name = 'shape'"),  # type: ignore[attr-defined]
                  ("0",))
    views.prepare()  # type: ignore[attr-defined]
    # The permanent record and its position stay; what is derived from it is gone ...
    assert views.events_of(h.intent_id) + views.events_of(done.intent_id) == record
    assert views.max_tracking_id(SOURCE) == feed.position
    assert views.intent(h.intent_id) is None and views.reviews() == []
    assert views.refold_pending()
    # ... until it is folded again from the record, not from the stream.
    assert IntentViews(views).refold(page=1) == 2
    assert not views.refold_pending()
    row = views.intent(done.intent_id)
    assert row is not None and (row.state, row.model_status) == ("completed", "executed")
    assert [r.review_id for r in views.reviews()] == ["rv-1"]
    views.prepare()  # type: ignore[attr-defined]  # the same shape again: nothing to do
    assert not views.refold_pending() and views.intent(done.intent_id) is not None


def test_views_that_begin_after_an_intent_left_the_hot_store_start_at_its_mark(views: Views) -> None:
    from lockgate.archiver.domain import archived

    h = executed()
    mark = archived(h.intent, now=T0 + timedelta(days=8))
    Feed(views).send(mark)
    row = views.intent(h.intent_id)
    assert row is not None and (row.state, row.archived, row.version) == (
        "completed", True, len(h.events) + 1)


def _open_and_close(url: str) -> str:
    try:
        open_views(url).close()
    except Exception as exc:  # noqa: BLE001 - reported to the test
        return repr(exc)
    return "ok"


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_processes_opening_a_new_store_at_once_all_open_it(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path,
) -> None:
    """Projector, archiver, console and a CLI start together on a store nobody made yet."""
    import multiprocessing

    import psycopg

    context = multiprocessing.get_context("spawn")
    for round_ in range(3):
        if backend == "sqlite":
            url = f"sqlite:///{tmp_path / f'race-{round_}.sqlite'}"
        else:
            server: postgres.PostgresServer = request.getfixturevalue("pg")
            name = f"race_{next(_schemas)}"
            with psycopg.connect(server.url, autocommit=True) as conn:
                conn.execute(f"CREATE DATABASE {name}")  # type: ignore[arg-type]
            url = server.url.rsplit("/", 1)[0] + "/" + name
        with context.Pool(5) as pool:
            assert pool.map(_open_and_close, [url] * 5) == ["ok"] * 5


def test_a_batch_is_one_transaction_and_a_gap_keeps_what_came_before_it(views: Views) -> None:
    done = executed("batch-1")
    other = History(call_id="batch-2").normalized()
    pairs = [(e, Tracking(SOURCE, 200 + i)) for i, e in enumerate(done.events)]
    pairs.append((other.events[1], Tracking(SOURCE, 300)))  # its v2 before its v1: a gap
    projection = IntentViews(views)
    with pytest.raises(ProjectionGap):
        projection.process_events(pairs)
    assert views.max_tracking_id(SOURCE) == 200 + len(done.events) - 1  # the prefix, whole
    assert [e.version for e in views.events_of(done.intent_id)] == list(range(1, len(done.events) + 1))
    assert views.events_of(other.intent_id) == []
    assert projection.process_events([(other.events[0], Tracking(SOURCE, 300)),
                                      (other.events[1], Tracking(SOURCE, 301))]) == 2
    row = views.intent(other.intent_id)
    assert row is not None and row.state == "normalized" and views.max_tracking_id(SOURCE) == 301
