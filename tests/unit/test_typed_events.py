"""Events are built with their fields by name: a misspelt or missing one fails where the event is
built, and the fields given are the ones stored. (Where each event is built in ``libs`` and
``services``, ``mypy --strict`` checks the fields' types too: CI runs it.)"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from uuid import uuid4

import pytest

from lockgate.contracts.vocabulary import Finding, Resolution
from lockgate.eventstore.base import RecordedEvent
from lockgate.intent.aggregate import EffectIntent, Stamp
from lockgate.intent.codec import decode_event, encode_event
from lockgate.intent.events import (
    AttemptSent,
    CandidateRejected,
    ProcessingAbandoned,
    Reconciled,
    Withdrawn,
)
from lockgate.testing.intents import T0, History

STAMP = Stamp(now=T0, event_id="e1", causation_id="c1")

#: Builds that name a field wrong, leave one out, or leave out the stamp.
WRONG: dict[str, Callable[[EffectIntent], object]] = {
    "a misspelt field": lambda i: AttemptSent.next(
        i, STAMP, atempt_id="a1"),  # type: ignore[call-arg]
    "a missing field": lambda i: AttemptSent.next(i, STAMP),  # type: ignore[call-arg]
    "no stamp": lambda i: AttemptSent.next(i, attempt_id="a1"),  # type: ignore[call-arg]
    "a misspelt field of an event built whole": lambda i: ProcessingAbandoned(
        uuid4(), 2, datetime.now(UTC), "e", "run-1", "c", durable="d", trigger="t",
        cause="x", delivery=1),  # type: ignore[call-arg]
}


@pytest.mark.parametrize("build", WRONG.values(), ids=list(WRONG))
def test_a_wrong_field_fails_where_the_event_is_built(build: Callable[[EffectIntent], object]) -> None:
    with pytest.raises(TypeError):
        build(History().normalized().intent)


def test_the_fields_given_by_name_are_the_fields_stored() -> None:
    h = History().normalized()
    event = Reconciled.next(
        h.intent, STAMP, attempt_id="a1", finding=Finding.CONFIRMED, receipt={"id": "n-1"},
        by="ops", why="seen", resolution=Resolution.COMPLETED)
    stored = encode_event(event)
    read = decode_event(RecordedEvent("tenant-a", h.intent_id, event.originator_version,
                                      stored.event_type, stored.event_id, stored.data, 1))
    assert read == event
    assert isinstance(read, Reconciled)
    assert (read.attempt_id, read.finding, read.receipt, read.by, read.why, read.resolution) == (
        "a1", Finding.CONFIRMED, {"id": "n-1"}, "ops", "seen", Resolution.COMPLETED)


def test_next_refuses_an_event_that_creates_an_intent() -> None:
    """Its envelope has the aggregate's topic in it: it follows nothing."""
    h = History()
    with pytest.raises(TypeError, match="creates an intent"):
        CandidateRejected.next(
            h.intent, Stamp(now=T0, event_id="e", causation_id="c"), tenant="t")  # type: ignore[call-arg]


def test_next_fills_the_envelope_from_the_state_and_the_stamp() -> None:
    h = History().normalized()
    event = Withdrawn.next(
        h.intent, Stamp(now=T0, event_id="e9", causation_id="c9", offset=2), by="ops", why="no")
    assert (event.originator_id, event.originator_version, event.timestamp) == (
        h.intent.id, h.intent.version + 2, T0)
    assert (event.event_id, event.correlation_id, event.causation_id) == ("e9", "run-1", "c9")
    assert (event.by, event.why) == ("ops", "no")
