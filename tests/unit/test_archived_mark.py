"""``IntentArchived``: the ended intent's identity, alone or after its events."""

from __future__ import annotations

from datetime import timedelta

import pytest

from lockgate.archiver.domain import archived, may_archive
from lockgate.eventstore.base import RecordedEvent
from lockgate.intent.aggregate import State
from lockgate.intent.codec import decode_event, encode_event, fold
from lockgate.intent.events import (
    EffectCompleted,
    Event,
    ExecutionAuthorized,
    IntentArchived,
    ReportRefused,
)
from lockgate.testing.intents import T0, History
from lockgate.views.rows import intent_row


def executed() -> History:
    h = History().normalized().decided("allow")
    h.add(ExecutionAuthorized, attempt_id="a1", intent_key="k1", digest="sha256:d1",
          policy_revision="p", contract_revision="rev-1", gate_facts={},
          deadline_at=T0 + timedelta(seconds=30))
    return h.add(EffectCompleted, attempt_id="a1", receipt={}, result={}, provenance={})


def stored(event: Event, tenant: str = "tenant-a") -> Event:
    """Through the codec, as a service loading the store would read it."""
    new = encode_event(event)
    return decode_event(RecordedEvent(tenant, event.originator_id.hex, event.originator_version,
                                      new.event_type, new.event_id, new.data, 99))


def test_alone_it_is_the_ended_intent_with_its_identity() -> None:
    h = executed()
    mark = archived(h.intent, now=T0 + timedelta(days=8))
    alone = fold([stored(mark)])
    assert alone is not None
    assert (alone.state, alone.version, alone.archived) == (State.COMPLETED, len(h.events) + 1, True)
    assert (alone.tenant, alone.run_id, alone.call_id, alone.candidate_digest) == (
        "tenant-a", "run-1", "call-1", "sha256:candidate")
    assert alone.intent_id == h.intent_id


def test_after_the_events_it_changes_nothing_but_the_mark() -> None:
    h = executed()
    before = h.intent
    h.extend([archived(before, now=T0)])
    after = h.intent
    assert (after.state, after.receipt, after.archived) == (before.state, before.receipt, True)
    assert after.version == before.version + 1
    late = ReportRefused.next(after, h.stamp(), attempt_id="", stage="other",
                                           reason="report.unproven", adapter="x")
    assert fold([stored(h.events[-1]), late]) is not None  # a late neutral event still folds


def test_only_an_ended_intent_the_views_hold_whole_may_leave() -> None:
    live = History().normalized().decided("require_approval").intent
    row = intent_row(live, created_at=T0, last_sequence=5)
    assert may_archive(live, row) == "live"
    done = executed().intent
    assert may_archive(done, intent_row(done, created_at=T0, last_sequence=9)) is None
    behind = intent_row(History().normalized().decided("deny").intent, created_at=T0, last_sequence=3)
    denied = History().normalized().decided("deny").add(
        ReportRefused, attempt_id="", stage="other", reason="r", adapter="a").intent
    assert may_archive(denied, behind) == "views behind"
    h = executed()
    h.extend([archived(h.intent, now=T0)])
    assert may_archive(h.intent, intent_row(h.intent, created_at=T0, last_sequence=10)) == "archived"


def test_it_is_not_an_event_a_deciding_function_builds() -> None:
    with pytest.raises(TypeError):
        IntentArchived.next(executed().intent, History().stamp())  # type: ignore[call-arg]
