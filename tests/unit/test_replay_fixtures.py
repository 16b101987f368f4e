"""Replay fixtures: the record's answers, declared ones, and a missing one that fails closed."""

from __future__ import annotations

from pathlib import Path

import pytest

from lockgate.contracts.messages import ExecutionOrder, FactsRequest, NormalizeRequest, QueryRequest
from lockgate.contracts.vocabulary import DecisionOutcome, QueryFinding, ReportStage
from lockgate.intent.events import (
    AttemptRejected,
    AttemptSent,
    EffectCompleted,
    ExecutionAuthorized,
    NormalizationFailed,
    PolicyDecided,
)
from lockgate.replay.fixtures import FIXTURE_MISSING, Fixtures
from lockgate.replay.record import Candidate, ReplayError, Selection
from lockgate.testing.intents import T0, History

RESOURCE = {"type": "case", "id": "case-123", "tenant": "tenant-a"}


def executed() -> Candidate:
    h = History().normalized()
    h.add(PolicyDecided, outcome=DecisionOutcome.ALLOW, policy_revision="p", reasons=[],
          determining=["permit"], facts={"exists": True, "version": "v1"}, digest="sha256:d1", reservations=[])
    h.add(ExecutionAuthorized, attempt_id="a1", intent_key="k1", digest="sha256:d1",
          policy_revision="p", contract_revision="rev-1", gate_facts={"exists": True, "version": "v2"},
          deadline_at=T0)
    h.add(AttemptSent, attempt_id="a1")
    h.add(EffectCompleted, attempt_id="a1", receipt={"note_id": "n1"}, result={"note_id": "n1"},
          provenance={})
    return Candidate(h.intent_id, "tenant-a", 1, tuple(h.events))


def order(digest: str) -> ExecutionOrder:
    return ExecutionOrder(tenant="tenant-a", intent_id="i" * 32, attempt_id="a9", intent_key="k9",
                          capability="case.add_note", digest=digest, arguments={}, resource=RESOURCE,
                          actor="user-42", preconditions={}, authorized_version=4, report_token="tok")


def test_the_record_answers_what_it_was_asked() -> None:
    fixtures = Fixtures.recorded([executed()])
    normalized = fixtures.answer_normalize("case.add_note", NormalizeRequest(
        tenant="tenant-a", actor="user-42", arguments={"note": "hello"}, context={"case_id": "anything"}))
    assert (normalized.reason, normalized.resource) == (None, RESOURCE)
    ask = FactsRequest(tenant="tenant-a", actor="user-42", resource=RESOURCE)
    # Policy's facts first, then the final gate's, and the gate's again after that.
    assert [fixtures.answer_facts("case.add_note", ask).facts["version"] for _ in range(3)] == [  # type: ignore[union-attr]
        "v1", "v2", "v2"]
    sent, completed = fixtures.execute(order("sha256:d1"), T0)
    assert (sent.stage, completed.stage, completed.receipt) == (
        ReportStage.SENT, ReportStage.COMPLETED, {"note_id": "n1"})
    assert completed.token == "tok"  # the order's report token, echoed
    assert fixtures.misses == []


def test_a_question_the_record_does_not_answer_is_a_missing_fixture() -> None:
    fixtures = Fixtures.recorded([executed()])
    other = fixtures.answer_normalize("case.add_note", NormalizeRequest(
        tenant="tenant-a", actor="user-42", arguments={"note": "another"}, context={}))
    assert other.reason == FIXTURE_MISSING
    assert fixtures.answer_facts("case.add_note", FactsRequest(
        tenant="tenant-a", actor="user-13", resource=RESOURCE)) is None
    (refused,) = fixtures.execute(order("sha256:never"), T0)
    assert (refused.stage, refused.reason) == (ReportStage.REJECTED, FIXTURE_MISSING)
    assert [m.verb for m in fixtures.misses] == ["normalize", "facts", "execute"]


def test_a_query_no_fixture_answers_is_a_missing_fixture_not_absent() -> None:
    """Only the record can say an effect is absent (it was rejected); a consequence it does
    not know is a question nobody answered."""
    rejected = History(call_id="call-2").normalized(digest="sha256:d2")
    rejected.add(AttemptRejected, attempt_id="a1", reason="case.closed", detail="")
    fixtures = Fixtures.recorded([executed(), Candidate(rejected.intent_id, "tenant-a", 2, tuple(rejected.events))])
    ask = QueryRequest(tenant="tenant-a", intent_id="i" * 32, intent_key="k", arguments={})
    found = fixtures.answer_query("case.add_note", ask, "sha256:d1")
    assert found is not None and (found.finding, found.receipt) == (QueryFinding.FOUND, {"note_id": "n1"})
    absent = fixtures.answer_query("case.add_note", ask, "sha256:d2")
    assert absent is not None and absent.finding == QueryFinding.ABSENT
    assert fixtures.misses == []
    assert fixtures.answer_query("case.add_note", ask, "sha256:never") is None
    assert [(m.verb, m.key) for m in fixtures.misses] == [("query", "sha256:never")]


def test_the_services_own_failures_are_no_answer() -> None:
    h = History().add(NormalizationFailed, reason="capability.unavailable", field=None, detail="")
    fixtures = Fixtures.recorded([Candidate(h.intent_id, "tenant-a", 1, tuple(h.events))])
    assert fixtures.normalize == {}


def test_declared_fixtures_win(tmp_path: Path) -> None:
    file = tmp_path / "fixtures.yaml"
    file.write_text("""
runs:
  - {tenant: tenant-a, run_id: run-1, actor: user-42, context: {case_id: case-123}, roles: [case-lead]}
normalize:
  - capability: case.add_note
    tenant: tenant-a
    actor: user-42
    arguments: {note: hello}
    result: {reason: argument.note.invalid, field: note}
execute:
  - {digest: "sha256:d1", rejected: case.version-conflict}
""")
    fixtures = Fixtures.recorded([executed()])
    fixtures.declare(file)
    assert fixtures.runs[("tenant-a", "run-1")].roles == ("case-lead",)
    assert fixtures.answer_normalize("case.add_note", NormalizeRequest(
        tenant="tenant-a", actor="user-42", arguments={"note": "hello"}, context={})).field == "note"
    (rejected,) = fixtures.execute(order("sha256:d1"), T0)
    assert rejected.reason == "case.version-conflict"


def test_a_declared_normalization_carries_no_facts(tmp_path: Path) -> None:
    # Policy's facts come from the facts fixtures, in turn; a normalization that names
    # facts neither answers them nor changes the replay's identity.
    def declared(result: str) -> Fixtures:
        file = tmp_path / "fixtures.yaml"
        file.write_text(f"""
normalize:
  - capability: case.add_note
    tenant: tenant-a
    actor: user-42
    arguments: {{note: hello}}
    result: {result}
""")
        fixtures = Fixtures()
        fixtures.declare(file)
        return fixtures

    plain = declared("{resource: {type: case, id: case-123}}")
    with_facts = declared("{resource: {type: case, id: case-123}, facts: {facts: {exists: true}}}")
    answered = with_facts.answer_normalize("case.add_note", NormalizeRequest(
        tenant="tenant-a", actor="user-42", arguments={"note": "hello"}, context={}, with_facts=True))
    assert answered.resource["id"] == "case-123" and answered.facts is None
    assert with_facts.digest == plain.digest


def test_a_file_that_is_no_fixture_file_is_refused(tmp_path: Path) -> None:
    file = tmp_path / "fixtures.yaml"
    file.write_text("normalise: []\n")
    with pytest.raises(ReplayError):
        Fixtures().declare(file)


def test_the_fixtures_digest_names_their_answers() -> None:
    assert Fixtures.recorded([executed()]).digest == Fixtures.recorded([executed()]).digest
    assert Fixtures.recorded([executed()]).digest != Fixtures().digest


def test_an_empty_selection_is_refused() -> None:
    with pytest.raises(ReplayError):
        Selection().check()
