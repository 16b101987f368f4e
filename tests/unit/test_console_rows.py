"""The console's answers from the views' typed rows: the timeline and a review's evidence read
out of the record as the projector stores it, and mapped onto the API's models (no I/O)."""

from __future__ import annotations

from datetime import timedelta

import msgspec
from msgspec.structs import replace

from lockgate.console import domain
from lockgate.console.answers import event_of, review_detail
from lockgate.intent.events import CandidateReceived, ReviewRequested
from lockgate.intent.evolve import evolve
from lockgate.testing.intents import T0, History
from lockgate.views.projection import IntentViews
from lockgate.views.rows import (
    EventRow,
    IntentRow,
    ReviewRow,
    TimelineRow,
    iso,
    review_evidence,
    timeline_row,
)
from lockgate.views.store import Change


def projected(h: History) -> list[Change]:
    """What the projector writes for each event of ``h``, in order."""
    changes: list[Change] = []
    intent = None
    for sequence, event in enumerate(h.events, start=101):
        intent = evolve(intent, event)
        assert intent is not None
        changes.append(IntentViews.change(event, intent, T0, sequence))
    return changes


def awaiting_review(**received: object) -> History:
    h = History(**received).normalized(  # type: ignore[arg-type]
        arguments={"case_id": "case-123", "note": "hello", "size": 3},
        destination="case-notes:tenant-a/case-123").decided(
        "require_approval", reasons=["notes.visible-outside", "notes.large"])
    return h.add(ReviewRequested, review_id="rv-1", digest=h.intent.digest or "",
                 policy_revision="pol-1", contract_revision="rev-1", summary="Adds a note",
                 expires_at=T0 + timedelta(hours=1), action="Add a note", visible_to="the case team",
                 shown={"note": "hello"}, preconditions=(), recovery=())


def rows_of(h: History) -> tuple[list[TimelineRow], IntentRow, ReviewRow]:
    changes = projected(h)
    review = next(c.opened for c in changes if c.opened is not None)
    return [timeline_row(c.event) for c in changes], changes[-1].intent, review


def test_a_timeline_row_holds_the_events_own_fields_out_of_their_envelope() -> None:
    timeline, _, _ = rows_of(awaiting_review())
    received = timeline[0]
    assert (received.event_type, received.sequence, received.version) == ("CandidateReceived", 101, 1)
    assert received.data["arguments"] == {"note": "hello"}
    assert received.data["tool"] == "case.add_note"
    assert "v" not in received.data and "data" not in received.data
    decided = next(t for t in timeline if t.event_type == "PolicyDecided")
    assert decided.data["outcome"] == "require_approval"


def test_stored_text_that_is_no_json_object_reads_as_no_fields() -> None:
    base = EventRow(sequence=1, tenant="t", intent_id="i", version=1, event_type="X", event_id="e",
                    recorded_at="2026-01-01T00:00:00.000000+00:00", data="")
    for text in ("not json", "[1, 2]", '{"v": 1, "data": [1]}', "3"):
        assert timeline_row(replace(base, data=text)).data == {}, text
    assert timeline_row(replace(base, data='{"a": 1}')).data == {"a": 1}


def test_the_review_evidence_is_what_normalization_and_policy_recorded() -> None:
    timeline, intent, _ = rows_of(awaiting_review(arguments={"note": "hello", "extra": "x"}))
    evidence = review_evidence(timeline, intent)
    assert evidence.arguments == {"case_id": "case-123", "note": "hello", "size": 3}
    assert evidence.proposed_arguments == {"note": "hello", "extra": "x"}
    assert evidence.resource == {"type": "case", "id": "case-123", "tenant": "tenant-a"}
    assert (evidence.destination, evidence.effect_class) == ("case-notes:tenant-a/case-123", "write")
    assert evidence.policy_reasons == ("notes.visible-outside", "notes.large")


def test_before_normalization_the_intents_own_destination_stands_in() -> None:
    h = History()
    changes = projected(h)
    intent = replace(changes[-1].intent, destination="dest-x", effect_class="read")
    evidence = review_evidence([timeline_row(c.event) for c in changes], intent)
    assert (evidence.destination, evidence.effect_class) == ("dest-x", "read")
    assert (evidence.arguments, evidence.resource, evidence.policy_reasons) == ({}, {}, ())
    assert evidence.proposed_arguments == {"note": "hello"}


def test_the_latest_normalization_is_the_one_shown() -> None:
    h = awaiting_review()
    h.normalized(digest="sha256:d2", arguments={"note": "second"})
    timeline, intent, _ = rows_of(h)
    assert review_evidence(timeline, intent).arguments == {"note": "second"}


def test_a_reviewer_sees_the_raw_evidence_withheld_and_an_operator_sees_it() -> None:
    h = History()
    first = h.events[0]
    assert isinstance(first, CandidateReceived)
    h.events[0] = msgspec.structs.replace(first, raw_arguments='{"note": "hello"}',
                                      provider_item={"id": "item-1"})
    received = timeline_row(projected(h)[0].event)
    shown = event_of(received, evidence=False)
    assert shown.data["raw_arguments"] == shown.data["provider_item"] == "(withheld: operators only)"
    assert shown.data["arguments"] == {"note": "hello"}
    whole = event_of(received, evidence=True)
    assert whole.data["raw_arguments"] == '{"note": "hello"}'
    assert whole.data["provider_item"] == {"id": "item-1"}
    assert whole.words == "the model proposed it" and whole.type == "CandidateReceived"


def test_a_review_is_decidable_only_while_it_waits_unexpired_and_awaited() -> None:
    timeline, intent, review = rows_of(awaiting_review())
    before, after = iso(T0), iso(T0 + timedelta(hours=2))
    assert intent.state == "awaiting_approval" and intent.review_id == review.review_id
    assert domain.decidable(review, intent, now=before)
    assert not domain.decidable(review, intent, now=after)
    assert not domain.decidable(replace(review, status="approved"), intent, now=before)
    assert not domain.decidable(review, replace(intent, review_id="rv-other"), now=before)
    assert not domain.decidable(review, replace(intent, state="authorized"), now=before)


def test_a_review_detail_maps_the_rows_onto_the_answer() -> None:
    timeline, intent, review = rows_of(awaiting_review())
    detail = review_detail(review, intent, review_evidence(timeline, intent), now=iso(T0))
    assert detail.decidable
    assert detail.review.review_id == "rv-1" and detail.intent.intent_id == intent.intent_id
    assert detail.intent.label.code == "awaiting_review"
    assert detail.policy_reasons == ["notes.visible-outside", "notes.large"]
    assert detail.model_dump(mode="json")["arguments"] == {"case_id": "case-123", "note": "hello",
                                                           "size": 3}

