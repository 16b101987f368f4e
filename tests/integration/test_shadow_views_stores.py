"""The shadow decisions view on SQLite and on a real PostgreSQL the test starts: each intent's
latest decision beside the shadow bundle's, the flips counted, an older store refolded."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from eventsourcing.persistence import Tracking

from lockgate.contracts.vocabulary import DecisionOutcome
from lockgate.intent.aggregate import Stamp
from lockgate.intent.events import Event, PolicyDecided, ShadowDecision
from lockgate.testing import postgres
from lockgate.testing.intents import History
from lockgate.views.projection import IntentViews
from lockgate.views.store import SOURCE, Views, open_views
from tests.conftest import require_postgres

_databases = iter(range(1, 10_000))


@pytest.fixture(scope="module")
def pg() -> Iterator[postgres.PostgresServer]:
    require_postgres()
    with postgres.PostgresServer() as server:
        yield server


@pytest.fixture(params=["sqlite", "postgres"])
def views(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Views]:
    if request.param == "sqlite":
        opened = open_views(f"sqlite:///{tmp_path / 'views.sqlite'}")
    else:
        server: postgres.PostgresServer = request.getfixturevalue("pg")
        import psycopg

        name = f"shadow_{next(_databases)}"
        with psycopg.connect(server.url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        opened = open_views(server.url.rsplit("/", 1)[0] + "/" + name)
    try:
        yield opened
    finally:
        opened.close()


class Feed:
    """Hands events to a projection at increasing stream positions."""

    def __init__(self, views: Views) -> None:
        self.projection = IntentViews(views)
        self.position = 100

    def send(self, *events: Event) -> None:
        for event in events:
            self.position += 1
            self.projection.process_event(event, Tracking(SOURCE, self.position))


def decided(h: History, outcome: str, determining: list[str], shadow: ShadowDecision | None,
            *, minute: int = 0) -> History:
    stamp = h.stamp()
    at = Stamp(now=stamp.now + timedelta(minutes=minute), event_id=stamp.event_id,
               causation_id=stamp.causation_id)
    return h.extend([PolicyDecided.next(
        h.intent, at, outcome=DecisionOutcome(outcome), policy_revision="sha256:active",
        reasons=[], determining=determining, facts={}, digest=h.intent.digest or "",
        reservations=[], shadow=shadow)])


def shadow(outcome: str, determining: list[str], revision: str = "sha256:shadow") -> ShadowDecision:
    return ShadowDecision(revision=revision, outcome=DecisionOutcome(outcome),
                          reasons=determining if outcome == "deny" else [], determining=determining)


def traffic(feed: Feed) -> dict[str, History]:
    """Four decisions: two flipped to deny by one forbid, one agreeing, one without a shadow."""
    made = {
        "denied-1": decided(History(call_id="c1").normalized(), "allow", ["permit"],
                            shadow("deny", ["no-notes"]), minute=1),
        "denied-2": decided(History(call_id="c2", tenant="tenant-b").normalized(), "allow", ["permit"],
                            shadow("deny", ["no-notes"]), minute=3),
        "agreed": decided(History(call_id="c3").normalized(), "allow", ["permit"],
                          shadow("allow", ["permit"]), minute=2),
        "unshadowed": decided(History(call_id="c4").normalized(), "allow", ["permit"], None),
    }
    for h in made.values():
        feed.send(*h.events)
    return made


def test_one_row_per_shadowed_decision_newest_first(views: Views) -> None:
    made = traffic(Feed(views))
    rows = views.shadow_decisions()
    assert [r.intent_id for r in rows] == [made[k].intent_id for k in ("denied-2", "agreed", "denied-1")]
    first = rows[0]
    assert (first.flip, first.policy, first.active_determining, first.shadow_determining) == (
        "allow->deny", "no-notes", ("permit",), ("no-notes",))
    assert [r.intent_id for r in views.shadow_decisions(flipped_only=True, tenant="tenant-a")] == [
        made["denied-1"].intent_id]
    assert views.shadow_decisions(revision="sha256:other") == []
    assert len(views.shadow_decisions(limit=1)) == 1


def test_flips_are_counted_by_capability_flip_and_policy(views: Views) -> None:
    traffic(Feed(views))
    (flips,) = views.shadow_flips()
    assert (flips.tool, flips.flip, flips.policy, flips.count) == ("case.add_note", "allow->deny", "no-notes", 2)
    assert [f.count for f in views.shadow_flips(tenant="tenant-b")] == [1]
    assert views.shadow_flips(revision="sha256:other") == []


def test_the_latest_decision_of_an_intent_wins(views: Views) -> None:
    feed = Feed(views)
    h = decided(History().normalized(), "pause", [], shadow("pause", []))
    feed.send(*h.events)
    decided(h, "allow", ["permit"], shadow("deny", ["no-notes"], revision="sha256:shadow-2"), minute=5)
    feed.send(h.events[-1])
    (row,) = views.shadow_decisions()
    assert (row.active_outcome, row.shadow_outcome, row.shadow_revision) == ("allow", "deny", "sha256:shadow-2")
    # Decided again with the shadow stopped: the intent has no shadow decision any more.
    decided(h, "allow", ["permit"], None)
    feed.send(h.events[-1])
    assert views.shadow_decisions() == [] and views.shadow_flips() == []


def test_a_store_of_the_shape_before_is_refolded_into_the_shadow_view(views: Views) -> None:
    made = traffic(Feed(views))
    with views.datastore.transaction(commit=True) as c:  # type: ignore[attr-defined]
        c.execute("DROP TABLE lg_shadow_decisions")
        c.execute(views._sql("UPDATE lg_meta SET value = ? WHERE name = 'shape'"),  # type: ignore[attr-defined]
                  ("5",))
    views.prepare()  # type: ignore[attr-defined]
    assert views.refold_pending() and views.shadow_decisions() == []
    IntentViews(views).refold()
    assert {r.intent_id for r in views.shadow_decisions()} == {
        made[k].intent_id for k in ("denied-1", "denied-2", "agreed")}
