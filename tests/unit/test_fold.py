"""Folding and coding an intent's events: the shortcuts do exactly what the long ways do."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any
from uuid import UUID

import msgspec
import pytest
from eventsourcing.domain import OriginatorIDError, OriginatorVersionError
from hypothesis import given, settings
from hypothesis import strategies as st

from lockgate.eventstore.base import RecordedEvent
from lockgate.intent import aggregate, codec
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


def stored_as(e: Event, data: bytes | None = None, intent_id: str | None = None) -> RecordedEvent:
    return RecordedEvent("tenant-a", intent_id or e.originator_id.hex, e.originator_version,
                         type(e).__name__, e.event_id, encode_event(e).data if data is None else data, 1)


def the_long_way(recorded: RecordedEvent) -> Event:
    """decode_event through the dictionary, the upcasters and msgspec.convert."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(codec, "_decode_current", lambda recorded, cls: None)
        return decode_event(recorded)


@pytest.mark.parametrize("name", list(HISTORIES))
def test_an_event_of_the_current_version_reads_straight_as_the_long_way_reads_it(name: str) -> None:
    for e in HISTORIES[name]().events:
        recorded = stored_as(e)
        assert codec._decode_current(recorded, type(e)) is not None
        assert decode_event(recorded) == the_long_way(recorded) == e


def test_the_subject_names_the_intent_and_the_version_whatever_the_data_says() -> None:
    e = executed().events[2]
    data = msgspec.json.decode(encode_event(e).data)
    other = UUID(int=5)
    for stored in (
        {**data["data"], "originator_id": str(other), "originator_version": 9},  # another's
        {k: v for k, v in data["data"].items() if k not in ("originator_id", "originator_version")},
        {**data["data"], "originator_id": "not a uuid"},
    ):
        recorded = stored_as(e, msgspec.json.encode({"v": data["v"], "data": stored}))
        got = decode_event(recorded)
        assert got == the_long_way(recorded) == e
        assert got.originator_id == e.originator_id and got.originator_version == e.originator_version


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)  # JSON has neither
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=300, derandomize=True, deadline=None)
@given(arguments=st.dictionaries(st.text(max_size=6), JSON, max_size=4),
       facts=st.dictionaries(st.text(max_size=6), st.text(max_size=4) | st.integers() | st.booleans(),
                             max_size=4),
       extra=st.dictionaries(st.text(min_size=1, max_size=6).map(lambda k: "x_" + k), JSON, max_size=2))
def test_any_field_values_read_alike_both_ways(
    arguments: dict[str, Any], facts: dict[str, str | int | bool], extra: dict[str, Any],
) -> None:
    h = History(arguments=arguments).normalized(facts=facts)
    for e in h.events:
        data = msgspec.json.decode(encode_event(e).data)
        # Fields a later writer added: ignored both ways.
        recorded = stored_as(e, msgspec.json.encode({"v": data["v"], "data": {**data["data"], **extra}}))
        assert decode_event(recorded) == the_long_way(recorded) == e


def test_a_value_that_needs_the_lax_reading_is_read_the_long_way() -> None:
    e = executed().events[0]
    data = msgspec.json.decode(encode_event(e).data)
    data["data"]["raw_size_bytes"] = str(data["data"]["raw_size_bytes"])  # "17": a string
    recorded = stored_as(e, msgspec.json.encode(data))
    assert codec._decode_current(recorded, type(e)) is None
    assert decode_event(recorded) == the_long_way(recorded) == e
