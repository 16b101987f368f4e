"""Stored events and folded states of the code before it: every one still reads and folds alike.

``data/intent_events.golden.jsonl`` holds histories covering every event type as the
codec stored them, and ``data/intent_states.golden.json`` the intent after each event of
each history, both written by the code before the intent became a plain decider. Old
bytes must decode to the events the same builders make today, and fold to the same
states, attribute by attribute.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from enum import Enum
from pathlib import Path
from typing import Any
from uuid import UUID

import msgspec
import pytest

from lockgate.eventstore.base import RecordedEvent
from lockgate.intent.aggregate import INTENT_TOPIC, Event
from lockgate.intent.codec import decode_event, encode_event, fold
from lockgate.intent.events import (
    ApprovalRefused,
    AttemptAcknowledged,
    AttemptFailedBeforeSend,
    AttemptInterrupted,
    AttemptRejected,
    AttemptSent,
    CandidateRejected,
    EffectCompleted,
    ExecutionAuthorized,
    GateRefused,
    IntentArchived,
    InterruptionRequested,
    NormalizationFailed,
    OutcomeUnknown,
    PolicyDecided,
    ProcessingAbandoned,
    Reconciled,
    ReportRefused,
    ResultObserved,
    ReviewApproved,
    ReviewDenied,
    ReviewExpired,
    ReviewRequested,
    WithdrawalRequested,
    Withdrawn,
)
from lockgate.testing.intents import T0, History

DATA = Path(__file__).parent / "data"
EVENTS_GOLDEN = DATA / "intent_events.golden.jsonl"
STATES_GOLDEN = DATA / "intent_states.golden.json"


def normalized(**facts: str | int | bool) -> History:
    return History(arguments={"case_id": "case-123", "note": "hello"}).normalized(
        facts=dict(facts) or None, lineage="equivalent", lineage_root="root-1", lineage_denials=1,
        predecessor_denied=True, data_classes=("pii",))


def authorize(h: History, attempt_id: str) -> History:
    return h.add(ExecutionAuthorized, attempt_id=attempt_id, intent_key="k1",
                 digest="sha256:d1", policy_revision="pol-1", contract_revision="rev-1",
                 gate_facts={"case_state": "open", "n": 3, "ok": True},
                 deadline_at=T0 + timedelta(seconds=30))


def reviewed() -> History:
    h = normalized(case_state="open").decided("require_approval", reasons=["policy.review"])
    h.add(ReviewRequested, review_id="r1", digest="sha256:d1", policy_revision="pol-1",
          contract_revision="rev-1", summary="add a note", expires_at=T0 + timedelta(hours=1),
          action="add note", visible_to="case", shown={"note": "hello"}, preconditions=("open",),
          recovery=("delete it",))
    return h.add(ApprovalRefused, review_id="r1", reviewer="eve", reason="self",
                 policy_revision="pol-1", determining=["p1"])


def completed() -> History:
    h = reviewed().add(ReviewApproved, review_id="r1", reviewer="bob",
                       digest="sha256:d1", policy_revision="pol-1", contract_revision="rev-1")
    h = authorize(h, "a1").add(AttemptAcknowledged, attempt_id="a1", remote_ref="r-1")
    h.add(AttemptSent, attempt_id="a1", claimant="w-1")
    h.add(ResultObserved, attempt_id="a1")
    h.add(EffectCompleted, attempt_id="a1", receipt={"note_id": "n-1"},
          result={"note_id": "n-1", "n": [1, 2]}, provenance={"adapter": "casenotes"})
    # After the end: ignored, then neutral ones (applied).
    h.add(AttemptFailedBeforeSend, attempt_id="a1", reason="order.stale", detail="")
    h.add(ReportRefused, attempt_id="a1", stage="sent", reason="report.unproven",
          adapter="casenotes")
    return h.add(ProcessingAbandoned, durable="d", trigger="t", cause="c", deliveries=3)


def retried() -> History:
    h = normalized().decided("pause", reasons=["policy.paused"]).decided("pause").decided("allow")
    h = authorize(h, "a1").add(AttemptFailedBeforeSend, attempt_id="a1",
                               reason="adapter.down", detail="x")
    h = authorize(h, "a2").add(AttemptSent, attempt_id="a2")
    h.add(OutcomeUnknown, attempt_id="a2", evidence="silence")
    h.add(Reconciled, attempt_id="a2", finding="absent", receipt={}, by="ops",
          why="looked", resolution="retry")
    h = authorize(h, "a3").add(ResultObserved, attempt_id="a3")
    return h.add(AttemptRejected, attempt_id="a3", reason="remote.refused", detail="no")


def reconciled(resolution: str, finding: str = "absent") -> Callable[[], History]:
    def build() -> History:
        h = authorize(normalized().decided("allow"), "a1").add(AttemptSent, attempt_id="a1")
        h.add(OutcomeUnknown, attempt_id="a1", evidence="timeout")
        return h.add(Reconciled, attempt_id="a1", finding=finding,
                     receipt={"note_id": "n-9"}, by="ops", why="checked", resolution=resolution)
    return build


def withdrawn() -> History:
    h = authorize(normalized().decided("allow"), "a1")
    h.add(WithdrawalRequested, attempt_id="a1", by="user-42", why="changed my mind")
    return h.add(Withdrawn, by="user-42", why="changed my mind")


def interrupted() -> History:
    h = authorize(normalized().decided("allow"), "a1").add(AttemptSent, attempt_id="a1")
    h.add(InterruptionRequested, attempt_id="a1", by="ops", why="stop")
    return h.add(AttemptInterrupted, attempt_id="a1", detail="stopped")


def abandoned_in_flight() -> History:
    h = authorize(normalized().decided("allow"), "a1")
    h.add(ProcessingAbandoned, durable="d", trigger="t1", cause="c", deliveries=5)
    return h.add(ProcessingAbandoned, durable="d", trigger="t2", cause="c", deliveries=5)


def abandoned_early() -> History:
    return normalized().add(ProcessingAbandoned, durable="p", trigger="9", cause="boom",
                            deliveries=5)


def ended(cls: type[Event], **fields: Any) -> Callable[[], History]:
    def build() -> History:
        return normalized().add(cls, **fields)
    return build


def review_ended(cls: type[Event], **fields: Any) -> Callable[[], History]:
    def build() -> History:
        return reviewed().add(cls, **fields)
    return build


def rejected() -> History:
    h = History(holds=("hold-1", "hold-2"), follows="0" * 32)
    first = h.events[0]
    h.events[0] = CandidateRejected(
        originator_id=first.originator_id, originator_version=1, timestamp=T0,
        originator_topic=INTENT_TOPIC, event_id="e1", correlation_id="run-1", causation_id="m1",
        tenant="tenant-a", run_id="run-1", turn_id="turn-1", call_id="call-1", actor="user-42",
        tool="case.add_note", raw_digest="sha256:raw", raw_size_bytes=3, catalogue_digest="c",
        reason="candidate.unknown-tool", field="name", detail="", retry_after_s=2.5,
        raw_arguments="{}", provider="openai", model="m", provider_item={"type": "function_call"},
        follows="1" * 32, follows_how="automatic")
    return h.add(ProcessingAbandoned, durable="d", trigger="t", cause="c", deliveries=3)


def received_with_evidence() -> History:
    h = History(holds=("hold-1",), follows="0" * 32)
    return h.add(NormalizationFailed, reason="argument.note.invalid", field="note",
                 detail="too long")


def archived() -> History:
    h = completed()
    intent = h.intent
    return h.extend([IntentArchived(
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
    "completed": completed, "retried": retried, "withdrawn": withdrawn, "interrupted": interrupted,
    "reconciled completed": reconciled("completed", "confirmed"),
    "reconciled withdrawn": reconciled("withdrawn"),
    "reconciled not executed": reconciled("not_executed"),
    "reconciled operator": reconciled("operator"),
    "abandoned in flight": abandoned_in_flight, "abandoned early": abandoned_early,
    "denied": ended(PolicyDecided, outcome="deny", policy_revision="pol-1",
                    reasons=["case.closed"], determining=["p2"], facts={"case_state": "closed"},
                    digest="sha256:d1", reservations=["b1", "b2"]),
    "gate refused": ended(GateRefused, reason="gate.stale", gate_facts={"x": 1}),
    "review denied": review_ended(ReviewDenied, review_id="r1", reviewer="bob",
                                  reason="no"),
    "review edited": review_ended(ReviewDenied, review_id="r1", reviewer="bob",
                                  reason="edit", edited_into="2" * 32, edited_call_id="call-2"),
    "review expired": review_ended(ReviewExpired, review_id="r1"),
    "rejected": rejected, "normalization failed": received_with_evidence,
    "archived": archived, "archived alone": archived_alone,
}


def stored(events: list[Event]) -> list[RecordedEvent]:
    return [RecordedEvent("tenant-a", e.originator_id.hex, e.originator_version, type(e).__name__,
                          e.event_id, encode_event(e).data, n) for n, e in enumerate(events, start=1)]


def plain(value: Any) -> Any:
    """A value as JSON holds it: records as their type and fields, collections as lists."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, UUID):
        return value.hex
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, set | frozenset):
        return sorted(plain(v) for v in value)
    if isinstance(value, msgspec.Struct):
        return [type(value).__name__, {n: plain(getattr(value, n)) for n in value.__struct_fields__}]
    return value


def golden_events() -> dict[str, list[dict[str, Any]]]:
    by_history: dict[str, list[dict[str, Any]]] = {}
    for line in EVENTS_GOLDEN.read_text().splitlines():
        row = json.loads(line)
        by_history.setdefault(row.pop("history"), []).append(row)
    return by_history


def recorded(row: dict[str, Any]) -> RecordedEvent:
    return RecordedEvent("tenant-a", row["intent_id"], row["version"], row["event_type"],
                         row["event_id"], row["data"].encode(), row["sequence"])


def test_the_goldens_cover_every_event_type() -> None:
    stored_types = {row["event_type"] for rows in golden_events().values() for row in rows}
    built = {type(e).__name__ for build in HISTORIES.values() for e in build().events}
    assert stored_types == built
    assert len(stored_types) == 27


@pytest.mark.parametrize("name", list(HISTORIES))
def test_events_stored_by_the_code_before_decode_to_the_events_built_today(name: str) -> None:
    rows = golden_events()[name]
    events = HISTORIES[name]().events
    assert [decode_event(recorded(row)) for row in rows] == events
    # And are stored today as they were: the same envelope, field names and values (the
    # order of the keys aside: a first event's ``originator_topic`` now follows the envelope).
    assert [json.loads(r.data) for r in stored(events)] == [json.loads(row["data"]) for row in rows]


@pytest.mark.parametrize("name", list(HISTORIES))
def test_every_history_folds_to_the_states_the_code_before_folded(name: str) -> None:
    expected = json.loads(STATES_GOLDEN.read_text())[name]
    decoded = [decode_event(recorded(row)) for row in golden_events()[name]]
    for n, snapshot in enumerate(expected, start=1):
        intent = fold(decoded[:n])
        assert intent is not None
        assert {attr: plain(getattr(intent, attr)) for attr in snapshot} == snapshot, n
