"""Folding and coding an intent's events: the shortcuts do exactly what the library's way does."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any
from uuid import UUID

import msgspec
import pytest
from eventsourcing.domain import OriginatorIDError, OriginatorVersionError

from lockgate.eventstore.base import RecordedEvent
from lockgate.intent import aggregate
from lockgate.intent.aggregate import INTENT_TOPIC, EffectIntent, Event, Stamp
from lockgate.intent.codec import decode_event, encode_event, fold
from lockgate.testing.intents import T0, History


def executed() -> History:
    h = History(arguments={"case_id": "case-123", "note": "hello"}).normalized(
        facts={"case_state": "open"}).decided("allow", reasons=["policy.allow"])
    h.add(EffectIntent.ExecutionAuthorized, attempt_id="a1", intent_key="k1", digest="sha256:d1",
          policy_revision="pol-1", contract_revision="rev-1", gate_facts={"case_state": "open"},
          deadline_at=T0 + timedelta(seconds=30))
    h.add(EffectIntent.AttemptSent, attempt_id="a1")
    h.add(EffectIntent.AttemptAcknowledged, attempt_id="a1", remote_ref="r-1")
    h.add(EffectIntent.ResultObserved, attempt_id="a1")
    return h.add(EffectIntent.EffectCompleted, attempt_id="a1", receipt={"note_id": "n-1"},
                 result={"note_id": "n-1"}, provenance={"adapter": "casenotes"})


def after_the_end() -> History:
    """Events stored after a terminal state (ignored) and a neutral one (applied)."""
    h = executed()
    h.add(EffectIntent.AttemptFailedBeforeSend, attempt_id="a1", reason="order.stale", detail="")
    return h.add(EffectIntent.ProcessingAbandoned, durable="d", trigger="t", cause="c", deliveries=3)


def rejected() -> History:
    h = History()
    first = h.events[0]
    assert isinstance(first, EffectIntent.CandidateReceived)
    h.events[0] = EffectIntent.CandidateRejected(
        originator_id=first.originator_id, originator_version=1, timestamp=T0,
        originator_topic=INTENT_TOPIC, event_id="e1", correlation_id="run-1", causation_id="m1",
        tenant="tenant-a", run_id="run-1", turn_id="turn-1", call_id="call-1", actor="user-42",
        tool="case.add_note", raw_digest="sha256:raw", raw_size_bytes=3, catalogue_digest="c",
        reason="candidate.unknown-tool", field="name", detail="", retry_after_s=2.5)
    return h.add(EffectIntent.ProcessingAbandoned, durable="d", trigger="t", cause="c", deliveries=3)


def archived() -> History:
    h = executed()
    intent = h.intent
    return h.extend([EffectIntent.IntentArchived(
        originator_id=intent.id, originator_version=intent.version + 1, timestamp=T0,
        originator_topic=INTENT_TOPIC, event_id="arch", correlation_id="run-1", causation_id="x",
        tenant="tenant-a", run_id="run-1", turn_id="turn-1", call_id="call-1", actor="user-42",
        tool="case.add_note", raw_digest="r", raw_size_bytes=1, catalogue_digest="c",
        contract_revision="rev-1", candidate_digest="d", state="completed", reason=None,
        archived_versions=intent.version)])


def archived_alone() -> History:
    h = History()
    h.events = archived().events[-1:]
    return h


HISTORIES: dict[str, Callable[[], History]] = {
    "executed": executed, "after the end": after_the_end, "rejected": rejected,
    "archived": archived, "archived alone": archived_alone,
}


def by_the_library(events: list[Event]) -> EffectIntent | None:
    """Fold with the shortcuts off: every event through the library's own ``mutate``."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(aggregate, "_FOLLOWS", None)
        mp.setattr(aggregate, "_CREATES", None)
        return fold(events)


def state_of(value: Any) -> Any:
    """Everything an object holds, recursively, for comparing two folds."""
    if isinstance(value, dict):
        return {k: state_of(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return type(value)(state_of(v) for v in value) if not isinstance(value, set) else value
    if hasattr(value, "__dict__") and not isinstance(value, type):
        return (type(value).__name__, state_of(vars(value)))
    return value


@pytest.mark.parametrize("name", list(HISTORIES))
def test_a_fold_ends_where_the_library_fold_ends(name: str) -> None:
    events = HISTORIES[name]().events
    for n in range(1, len(events) + 1):
        assert state_of(fold(events[:n])) == state_of(by_the_library(events[:n])), n


@pytest.mark.parametrize("name", list(HISTORIES))
def test_a_fold_of_decoded_events_is_the_fold_of_the_events(name: str) -> None:
    h = HISTORIES[name]()
    intent_id = h.events[0].originator_id.hex
    decoded = [decode_event(RecordedEvent("tenant-a", intent_id, e.originator_version,
                                          type(e).__name__, e.event_id, encode_event(e).data, n))
               for n, e in enumerate(h.events, start=1)]
    assert decoded == h.events
    assert state_of(fold(decoded)) == state_of(fold(h.events))


@pytest.mark.parametrize("name", list(HISTORIES))
def test_events_are_stored_as_their_builtins(name: str) -> None:
    for e in HISTORIES[name]().events:
        expected = msgspec.json.encode({"v": type(e).class_version, "data": msgspec.to_builtins(e)})
        assert encode_event(e).data == expected


@pytest.mark.parametrize("shortcuts", [True, False])
def test_an_event_of_another_intent_or_out_of_place_is_refused_as_the_library_refuses(
    shortcuts: bool, monkeypatch: pytest.MonkeyPatch,
) -> None:
    if not shortcuts:
        monkeypatch.setattr(aggregate, "_FOLLOWS", None)
        monkeypatch.setattr(aggregate, "_CREATES", None)
    h = executed()
    intent = fold(h.events[:3])
    assert intent is not None
    other = EffectIntent.AttemptSent.next(intent, Stamp(now=T0, event_id="x", causation_id="y"),
                                          attempt_id="a1")
    with pytest.raises(OriginatorVersionError):
        fold([*h.events[:2], other])
    foreign = type(other)(UUID(int=7), 4, T0, "x", "run-1", "y", attempt_id="a1")
    with pytest.raises(OriginatorIDError):
        fold([*h.events[:3], foreign])
    with pytest.raises(AssertionError):  # a second first event: the library's own refusal
        fold([h.events[0], h.events[0]])
