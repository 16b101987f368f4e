"""A counterfactual decides on the evidence as recorded, and says where it could not."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import msgspec
import pytest

from lockgate.authz import PolicyBundle
from lockgate.contracts.messages import RunContext
from lockgate.contracts.vocabulary import DecisionOutcome
from lockgate.intent.events import AttemptSent, EffectCompleted, ExecutionAuthorized, PolicyDecided
from lockgate.replay.counterfactual import Decided, counterfactual
from lockgate.replay.record import Candidate, Known, Sources, demo_contracts
from lockgate.replay.report import changes_table, summary
from lockgate.testing.intents import T0, History
from lockgate.testing.system import REPO, bundle_copy
from lockgate.worlds.casenotes.adapter import CONTRACT

FACTS: dict[str, str | int | bool] = {
    "exists": True, "tenant": "tenant-a", "status": "open", "writes_suspended": False,
    "actor_may_add_note": True, "sensitive": False, "version": 1}
NO_PII = """@id("case.pii")
forbid (principal, action, resource is Lockgate::Case)
when { context.data_classes.contains("pii") };
"""
PII = msgspec.structs.replace(CONTRACT, data_classes=(*CONTRACT.data_classes, "pii"))


@pytest.fixture(scope="module")
def no_pii(tmp_path_factory: pytest.TempPathFactory) -> PolicyBundle:
    root = tmp_path_factory.mktemp("no-pii")
    return PolicyBundle.load(bundle_copy(root, (REPO / "deploy" / "policies" / "bundle.yaml").read_text(),
                                         {"pii.cedar": NO_PII}))


def allowed(*, data_classes: tuple[str, ...] | None = CONTRACT.data_classes, reasons: tuple[str, ...] = (),
            outcome: str = DecisionOutcome.ALLOW) -> Candidate:
    """A note normalized under the case-notes contract and decided on ``FACTS``."""
    h = History(contract_revision=CONTRACT.revision).normalized(
        contract_revision=CONTRACT.revision, data_classes=data_classes)
    h.add(PolicyDecided, outcome=DecisionOutcome(outcome), policy_revision="p", reasons=list(reasons),
          determining=["case-notes.members-add-notes", "case-notes.unattended-unless-sensitive"], facts=FACTS,
          digest="sha256:d1", reservations=[])
    return Candidate(h.intent_id, "tenant-a", 1, tuple(h.events))


def run_opened(after: timedelta = -timedelta(minutes=1), stage: str = "default") -> RunContext:
    return RunContext(run_id="run-1", tenant="tenant-a", actor="user-42", context={"case_id": "case-123"},
                      delegation=None, stage=stage, opened_at=T0 + after)


def today(run: RunContext | None = None, *contracts: object) -> Known:
    return Known({("tenant-a", "run-1"): run or run_opened()},
                 {c.name: c for c in contracts if isinstance(c, type(CONTRACT))})


async def decide(candidate: Candidate, bundle: PolicyBundle, sources: Sources) -> Decided:
    (row,) = await counterfactual([candidate], bundle, sources)
    return row


async def test_the_contract_it_was_normalized_under_decides_not_todays(no_pii: PolicyBundle) -> None:
    row = await decide(allowed(), no_pii, Sources(deployment=today(None, PII)))
    assert (row.outcome, row.changed, row.contract_from, row.as_recorded) == ("allow", False, "recorded", True)


async def test_a_contract_the_record_cannot_vouch_for_is_current_evidence(no_pii: PolicyBundle) -> None:
    """Recorded before the data classes were kept: only the revision says which contract it was."""
    row = await decide(allowed(data_classes=None), no_pii, Sources(deployment=today(None, PII)))
    assert (row.outcome, row.reasons, row.contract_from, row.as_recorded) == ("deny", ("case.pii",), "current", False)
    assert row.notes == (f"contract case.add_note is {PII.revision[7:19]} (the contract registered today); "
                         f"the decision's was {CONTRACT.revision[7:19]}, which the record does not hold",)
    assert summary([row], "B") == ("1 of 1 recorded decisions change under B; 1 of the 1 decided on evidence "
                                   "not as recorded: the contract registered today (1 decision)")
    assert changes_table([row], "B").splitlines()[-3].endswith("not as recorded: the contract registered today")
    same = await decide(allowed(data_classes=None), no_pii, Sources(deployment=today(None, CONTRACT)))
    assert (same.contract_from, same.as_recorded) == ("recorded", True)  # the revision is its digest


async def test_no_contract_anywhere_is_undecidable_unless_the_builtin_ones_are_asked_for(
    no_pii: PolicyBundle,
) -> None:
    row = await decide(allowed(data_classes=None), no_pii, Sources(deployment=today()))
    assert (row.undecidable, row.changed, row.outcome) == (
        f"no contract for case.add_note (recorded revision {CONTRACT.revision[7:19]})", False, "")
    assert summary([row], "B") == "0 of 0 recorded decisions change under B; 1 undecidable (no evidence), not counted"
    builtin = await decide(allowed(data_classes=None), no_pii,
                           Sources(deployment=today(), builtin=Known({}, demo_contracts())))
    assert (builtin.outcome, builtin.contract_from, builtin.as_recorded) == ("allow", "built-in", False)
    assert builtin.grounds == "not as recorded: the contract compiled into lockgate"


async def test_a_run_opened_before_the_decision_is_the_one_it_read(no_pii: PolicyBundle) -> None:
    row = await decide(allowed(), no_pii, Sources(deployment=today(run_opened(stage="read-only"))))
    assert (row.run_from, row.outcome, row.reasons) == ("recorded", "deny", ("run.read-only-stage",))
    again = await decide(allowed(), no_pii, Sources(deployment=today(run_opened(timedelta(hours=1)))))
    assert (again.run_from, again.as_recorded, again.outcome) == ("current", False, "allow")
    declared = await decide(allowed(), no_pii, Sources(declared=today(), deployment=Known({}, {})))
    assert (declared.run_from, declared.grounds) == (
        "declared", "not as recorded: the run's context declared in the fixture file")
    lost = await decide(allowed(), no_pii, Sources(deployment=Known({}, {})))
    assert lost.undecidable == "no record of the context run run-1 was opened with"


async def test_a_capability_no_longer_offered_stays_so(no_pii: PolicyBundle) -> None:
    """Whether it was still offered is on the record: its decision says it was not."""
    candidate = allowed(outcome=DecisionOutcome.DENY, reasons=("tool.no-longer-offered",))
    row = await decide(candidate, no_pii, Sources(deployment=today()))
    assert (row.outcome, row.reasons, row.changed) == ("deny", ("tool.no-longer-offered",), False)


ONE_NOTE = """@id("run.one-note-only")
forbid (principal, action, resource is Lockgate::Case)
when { context.prior_effects >= 1 };
"""


def completed(call_id: str, after: timedelta = timedelta(0)) -> Candidate:
    """A note of run-1 decided and completed, its events ``after`` the usual times."""
    h = History(call_id=call_id, contract_revision=CONTRACT.revision).normalized(
        contract_revision=CONTRACT.revision, data_classes=CONTRACT.data_classes)
    h.add(PolicyDecided, outcome=DecisionOutcome.ALLOW, policy_revision="p", reasons=[],
          determining=[], facts=FACTS, digest="sha256:d1", reservations=[])
    h.add(ExecutionAuthorized, attempt_id="a1", intent_key="k1", digest="sha256:d1",
          policy_revision="p", contract_revision=CONTRACT.revision, gate_facts=FACTS, deadline_at=T0)
    h.add(AttemptSent, attempt_id="a1")
    h.add(EffectCompleted, attempt_id="a1", receipt={}, result={}, provenance={})
    events = tuple(msgspec.structs.replace(e, timestamp=e.timestamp + after) for e in h.events)
    return Candidate(h.intent_id, "tenant-a", 1, events)


async def test_prior_effects_are_what_the_run_completed_before_the_decision(
    tmp_path: Path,
) -> None:
    """Counted on the record of the whole run at the decision's time, not from the selection's
    order or the selection alone."""
    bundle = PolicyBundle.load(bundle_copy(tmp_path, (REPO / "deploy" / "policies" / "bundle.yaml").read_text(),
                                           {"one-note.cedar": ONE_NOTE}))
    assert bundle.uses_prior_effects
    first, later = completed("call-1"), completed("call-2", timedelta(hours=1))
    sources = Sources(deployment=today())
    (alone,) = await counterfactual([later], bundle, sources)
    (in_its_run,) = await counterfactual([later], bundle, sources, runs=[first, later])
    assert (alone.outcome, in_its_run.outcome, in_its_run.reasons) == ("allow", "deny", ("run.one-note-only",))
    # Listed after it, but decided and completed a minute before it: the first one's
    # decision is the one that saw a prior effect.
    early = completed("call-3", -timedelta(minutes=1))
    rows = await counterfactual([first, early], bundle, sources)
    assert [r.outcome for r in rows] == ["deny", "allow"]
