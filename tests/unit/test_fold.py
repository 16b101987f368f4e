"""Folding and coding an intent's events: errors where a history is not one, shortcuts that
read as the long ways read, and a fold that never changes what it was given.

The states every history folds to are pinned in ``test_intent_goldens.py``.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lockgate.eventstore.base import RecordedEvent
from lockgate.intent import codec
from lockgate.intent.aggregate import Event, Stamp, State
from lockgate.intent.codec import decode_event, encode_event, fold
from lockgate.intent.events import AttemptSent
from lockgate.intent.evolve import (
    FoldError,
    NotAFirstEvent,
    OriginatorIDError,
    OriginatorVersionError,
    evolve,
)
from lockgate.testing.intents import T0, History
from tests.unit.test_intent_goldens import HISTORIES, completed


@pytest.mark.parametrize("name", list(HISTORIES))
def test_a_fold_of_decoded_events_is_the_fold_of_the_events(name: str) -> None:
    h = HISTORIES[name]()
    intent_id = h.events[0].originator_id.hex
    decoded = [decode_event(RecordedEvent("tenant-a", intent_id, e.originator_version,
                                          type(e).__name__, e.event_id, encode_event(e).data, n))
               for n, e in enumerate(h.events, start=1)]
    assert decoded == h.events
    assert fold(decoded) == fold(h.events)


@pytest.mark.parametrize("name", list(HISTORIES))
def test_events_are_stored_as_their_builtins(name: str) -> None:
    for e in HISTORIES[name]().events:
        expected = msgspec.json.encode({"v": type(e).version, "data": msgspec.to_builtins(e)})
        assert encode_event(e).data == expected


@pytest.mark.parametrize("name", list(HISTORIES))
def test_evolving_leaves_the_state_it_was_given_as_it_was(name: str) -> None:
    events = HISTORIES[name]().events
    states = [fold(events[:n]) for n in range(1, len(events) + 1)]
    copies = [msgspec.structs.replace(s) for s in states if s is not None]
    for state, event in zip(states, events[1:], strict=False):
        evolve(state, event)
    assert [s for s in states if s is not None] == copies
    with pytest.raises(AttributeError):
        states[-1].state = State.PROPOSED  # type: ignore[misc, union-attr]


def test_an_event_of_another_intent_or_out_of_place_is_refused_with_lockgates_errors() -> None:
    h = completed()
    intent = fold(h.events[:3])
    assert intent is not None
    other = AttemptSent.next(intent, Stamp(now=T0, event_id="x", causation_id="y"),
                                          attempt_id="a1")
    with pytest.raises(OriginatorVersionError):
        fold([*h.events[:2], other])
    foreign = type(other)(UUID(int=7), 4, T0, "x", "run-1", "y", attempt_id="a1")
    with pytest.raises(OriginatorIDError) as raised:
        fold([*h.events[:3], foreign])
    assert raised.value.code == "intent.originator-id" and not raised.value.retryable
    with pytest.raises(OriginatorVersionError):  # a second first event, at version 1
        fold([h.events[0], h.events[0]])
    with pytest.raises(NotAFirstEvent):  # a history that starts past its first event
        fold(h.events[1:])
    second = msgspec.structs.replace(h.events[0], originator_version=2)
    with pytest.raises(NotAFirstEvent):  # a first event inside a history
        fold([h.events[0], second])
    assert issubclass(NotAFirstEvent, FoldError) and issubclass(OriginatorIDError, FoldError)


def test_an_event_after_a_terminal_state_moves_the_version_alone() -> None:
    h = completed()
    ended = fold(h.events[:-3])
    assert ended is not None and ended.state is State.COMPLETED
    late = h.events[-3]
    after = evolve(ended, late)
    assert after.ignored == ("AttemptFailedBeforeSend",)
    assert after.version == late.originator_version and after.modified_on == late.timestamp
    assert msgspec.structs.replace(after, version=ended.version, modified_on=ended.modified_on,
                                   ignored=()) == ended


def test_an_event_naming_no_attempt_is_refused_and_changes_nothing() -> None:
    h = History().normalized().decided("allow")
    intent = h.intent
    sent = AttemptSent.next(intent, h.stamp(), attempt_id="nope")
    with pytest.raises(KeyError):
        evolve(intent, sent)
    assert intent.state is State.ALLOWED


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
    e = completed().events[2]
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
    e = completed().events[0]
    data = msgspec.json.decode(encode_event(e).data)
    data["data"]["raw_size_bytes"] = str(data["data"]["raw_size_bytes"])  # "17": a string
    recorded = stored_as(e, msgspec.json.encode(data))
    assert codec._decode_current(recorded, type(e)) is None
    assert decode_event(recorded) == the_long_way(recorded) == e
