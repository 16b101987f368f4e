"""One StrEnum per vocabulary: the values are a contract, and adapters' words are hostile input."""

from __future__ import annotations

from uuid import UUID

import msgspec
import pytest

from lockgate.contracts.messages import AttemptReport, QueryResult
from lockgate.contracts.vocabulary import (
    AttemptStage,
    DecisionOutcome,
    Finding,
    QueryFinding,
    ReportStage,
    Resolution,
)
from lockgate.eventstore.base import RecordedEvent
from lockgate.executor.domain import on_report, refuse_report, report_token
from lockgate.intent.aggregate import State
from lockgate.intent.codec import decode_event, encode_event
from lockgate.intent.events import (
    Event,
    ExecutionAuthorized,
    OutcomeUnknown,
    PolicyDecided,
    Reconciled,
    ReportRefused,
)
from lockgate.reconciler.domain import ResolutionRefused, reconcile, resolve
from lockgate.testing.intents import T0, History

KEY = b"k" * 32


def test_the_values_of_every_vocabulary_are_listed_here() -> None:
    """Stored events and adapters' messages carry these strings: a rename breaks them."""
    assert [s.value for s in AttemptStage] == [
        "authorized", "sent", "acknowledged", "observed", "completed", "rejected", "interrupted",
        "failed_before_send", "unknown", "absent"]
    assert [s.value for s in ReportStage] == [
        "sent", "acknowledged", "observed", "completed", "rejected", "interrupted",
        "failed_before_send", "refused_order", "withdrawn", "other"]
    assert [o.value for o in DecisionOutcome] == ["allow", "require_approval", "deny", "pause"]
    assert [f.value for f in QueryFinding] == ["found", "absent", "unknown"]
    assert [f.value for f in Finding] == ["confirmed", "absent"]
    assert [r.value for r in Resolution] == [
        "completed", "retry", "operator", "not_executed", "withdrawn"]


def authorized() -> History:
    h = History().normalized().decided(DecisionOutcome.ALLOW)
    return h.add(ExecutionAuthorized, attempt_id="a1", intent_key="k", digest="sha256:d1",
                 policy_revision="p", contract_revision="rev-1", gate_facts={}, deadline_at=T0)


def wire_report(h: History, stage: object, *, token: str | None = None) -> bytes:
    """A report as an adapter may put it on the wire: any JSON at all in ``stage``."""
    good = report_token(KEY, "tenant-a", h.intent_id, "a1", "case.add_note")
    return msgspec.json.encode({"tenant": "tenant-a", "intent_id": h.intent_id, "attempt_id": "a1",
                                "stage": stage, "token": good if token is None else token})


@pytest.mark.parametrize("stage", ["teleported", "", "SENT", "sent ", "other", "x" * 10_000])
def test_an_unknown_report_stage_decodes_as_other(stage: str) -> None:
    report = msgspec.json.decode(wire_report(authorized(), stage), type=AttemptReport)
    assert report.stage is ReportStage.OTHER


@pytest.mark.parametrize("stage", [3, None, ["sent"], {"stage": "sent"}])
def test_a_report_stage_that_is_not_text_is_unreadable_as_before(stage: object) -> None:
    """Such a report is dropped as unreadable, exactly as when the field was plain text."""
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(wire_report(authorized(), stage), type=AttemptReport)


def test_a_forged_report_with_an_unknown_stage_is_refused_as_other() -> None:
    h = authorized()
    forged = msgspec.json.decode(wire_report(h, "teleported", token="0" * 64), type=AttemptReport)
    (refused,) = refuse_report(h.intent, forged, "report.token-mismatch", cause="c", now=T0)
    assert isinstance(refused, ReportRefused)
    assert (refused.attempt_id, refused.stage, refused.reason) == ("a1", "other", "report.token-mismatch")
    h.extend([refused])
    assert h.intent.refused_reports == {("a1", ReportStage.OTHER, "report.token-mismatch")}
    again = msgspec.json.decode(wire_report(h, "beamed", token="1" * 64), type=AttemptReport)
    assert refuse_report(h.intent, again, "report.token-mismatch", cause="c2", now=T0) == []


def test_a_report_built_in_process_with_an_unknown_stage_is_refused_as_other_too() -> None:
    h = authorized()
    raw = AttemptReport(tenant="tenant-a", intent_id=h.intent_id, attempt_id="a1",
                        stage="teleported")  # type: ignore[arg-type]
    (refused,) = refuse_report(h.intent, raw, "report.token-missing", cause="c", now=T0)
    assert isinstance(refused, ReportRefused) and refused.stage is ReportStage.OTHER


def test_a_proven_report_with_an_unknown_stage_changes_nothing() -> None:
    h = authorized()
    report = msgspec.json.decode(wire_report(h, "teleported"), type=AttemptReport)
    assert on_report(h.intent, report, None, cause="c", now=T0) == []
    assert h.intent.state is State.AUTHORIZED and h.intent.attempt("a1").stage is AttemptStage.AUTHORIZED


def test_an_adapters_unreadable_query_finding_is_no_evidence() -> None:
    h = authorized().add(OutcomeUnknown, attempt_id="a1", evidence="silence")
    found = msgspec.json.decode(b'{"finding": "probably", "receipt": {}}', type=QueryResult)
    assert found.finding is QueryFinding.UNKNOWN
    assert reconcile(h.intent, "a1", found, None, cause="q", now=T0) == []
    assert h.intent.state is State.UNKNOWN


def test_an_operators_unknown_finding_is_refused_with_its_reason_code() -> None:
    h = authorized().add(OutcomeUnknown, attempt_id="a1", evidence="silence")
    with pytest.raises(ResolutionRefused) as refused:
        resolve(h.intent, finding="probably", by="ops", why="looked", receipt={}, contract=None,
                cause="r", now=T0)
    assert refused.value.code == "reconcile.bad-finding"


def stored(event: Event) -> RecordedEvent:
    new = encode_event(event)
    return RecordedEvent(tenant="tenant-a", intent_id=event.originator_id.hex,
                         version=event.originator_version, event_id=new.event_id,
                         event_type=new.event_type, data=new.data, sequence=1)


def test_an_enum_field_is_stored_as_its_plain_string() -> None:
    def decided(outcome: str) -> Event:
        return History().normalized().add(
            PolicyDecided, outcome=outcome, policy_revision="p", reasons=[],
            determining=[], facts={}, digest="d", reservations=[]).events[-1]

    with_member = decided(DecisionOutcome.REQUIRE_APPROVAL)
    with_text = decided("require_approval")  # what was stored before the enums existed
    assert stored(with_member).data == stored(with_text).data
    assert b'"outcome":"require_approval"' in stored(with_member).data
    decoded = decode_event(stored(with_text))
    assert isinstance(decoded, PolicyDecided)
    assert decoded.outcome is DecisionOutcome.REQUIRE_APPROVAL and decoded == with_member


def test_an_old_reconciliation_reads_with_its_resolution() -> None:
    h = authorized().add(OutcomeUnknown, attempt_id="a1", evidence="silence")
    version = len(h.events) + 1
    v1 = msgspec.json.encode({"v": 1, "data": {
        "originator_id": str(UUID(hex=h.intent_id)), "originator_version": version,
        "timestamp": T0.isoformat(), "event_id": "e", "correlation_id": "run-1",
        "causation_id": "c", "attempt_id": "a1", "finding": "absent", "receipt": {},
        "by": "ops", "why": "looked"}})
    old = decode_event(RecordedEvent(tenant="tenant-a", intent_id=h.intent_id, version=version,
                                     event_id="e", event_type="Reconciled", data=v1, sequence=1))
    assert isinstance(old, Reconciled)
    assert (old.finding, old.resolution) == (Finding.ABSENT, Resolution.OPERATOR)
    assert old.resolution is Resolution.OPERATOR
    assert h.extend([old]).intent.state is State.NEEDS_OPERATOR
