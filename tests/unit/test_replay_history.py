"""A counterfactual decides on the run's history the decision recorded, and says in words when
there was none to read, or when its run or contract are today's."""

from __future__ import annotations

from datetime import timedelta

import pytest

from lockgate.authz import PolicyBundle
from lockgate.authz.history import HistoryFacts
from lockgate.authz.intents import Evidence, judge
from lockgate.contracts.messages import Facts
from lockgate.contracts.vocabulary import DecisionOutcome
from lockgate.intent.codec import fold
from lockgate.intent.events import PolicyDecided
from lockgate.replay.counterfactual import Decided, counterfactual
from lockgate.replay.record import Candidate, Known, Sources
from lockgate.replay.report import changes_table, summary
from lockgate.testing.intents import History
from lockgate.testing.system import REPO, bundle_copy
from lockgate.worlds.casenotes.adapter import CONTRACT
from tests.unit.test_replay_counterfactual import FACTS, run_opened, today

#: Nothing is noted on a case once the run has read content from outside.
AFTER_OUTSIDE = """@id("case.after-outside")
forbid (principal, action, resource is Lockgate::Case)
when { context.history.untrusted };
"""
UNTRUSTED = HistoryFacts(untrusted_from=frozenset({"mail.read"}), executed=frozenset({"mail.read"}))


@pytest.fixture(scope="module")
def after_outside(tmp_path_factory: pytest.TempPathFactory) -> PolicyBundle:
    root = tmp_path_factory.mktemp("after-outside")
    return PolicyBundle.load(bundle_copy(root, (REPO / "deploy" / "policies" / "bundle.yaml").read_text(),
                                         {"outside.cedar": AFTER_OUTSIDE}))


def note(history: HistoryFacts | None) -> Candidate:
    """An allowed note whose decision recorded ``history`` (``None``: it kept none)."""
    h = History(contract_revision=CONTRACT.revision).normalized(
        contract_revision=CONTRACT.revision, data_classes=CONTRACT.data_classes)
    h.add(PolicyDecided, outcome=DecisionOutcome.ALLOW, policy_revision="p", reasons=[],
          determining=["case-notes.members-add-notes"], facts=FACTS, digest="sha256:d1", reservations=[],
          history=history.context() if history is not None else {})
    return Candidate(h.intent_id, "tenant-a", 1, tuple(h.events))


async def decide(candidate: Candidate, bundle: PolicyBundle, sources: Sources | None = None) -> Decided:
    (row,) = await counterfactual([candidate], bundle, sources or Sources(deployment=today()))
    return row


async def test_the_history_the_decision_recorded_is_the_one_decided_on(after_outside: PolicyBundle) -> None:
    row = await decide(note(UNTRUSTED), after_outside)
    assert (row.outcome, row.reasons, row.determining) == ("deny", ("case.after-outside",), ("case.after-outside",))
    assert (row.history_from, row.as_recorded, row.grounds, row.notes) == ("recorded", True, "as recorded", ())
    clean = await decide(note(HistoryFacts()), after_outside)
    assert (clean.outcome, clean.as_recorded) == ("allow", True)


async def test_no_recorded_history_is_read_as_empty_and_says_so(after_outside: PolicyBundle) -> None:
    candidate = note(None)
    row = await decide(candidate, after_outside)
    # Decided as a shadow bundle beside one that read no history was: without one.
    normalized = fold(candidate.events[:-1])
    assert normalized is not None
    live = judge(after_outside, normalized, Facts(facts=FACTS), Evidence(run=run_opened(), contract=CONTRACT))
    assert (row.outcome, row.reasons, row.history_from, row.as_recorded) == (
        str(live.outcome), live.reasons, "absent", False)
    assert row.grounds == "not as recorded: no history on the record, decided without it"
    assert row.notes == ("the decision kept no history of run run-1",)
    assert row.as_json()["evidence"] == {
        "run": "recorded", "contract": "recorded", "history": "absent", "facts": "recorded",
        "as_recorded": False, "words": row.grounds, "notes": list(row.notes)}
    assert summary([row], "B").split("; ", 1)[1] == (
        "1 of the 1 decided on evidence not as recorded: no history on the record, decided without it (1 decision)")
    table = changes_table([row], "B").splitlines()
    assert table[-2:] == ["not as recorded, because:", f"  {row.intent_id[:12]}  {row.notes[0]}"]


async def test_a_bundle_that_reads_no_history_misses_none(after_outside: PolicyBundle) -> None:
    plain = PolicyBundle.load(REPO / "deploy" / "policies")
    row = await decide(note(None), plain)
    assert (row.history_from, row.as_recorded, row.grounds) == ("recorded", True, "as recorded")


async def test_every_piece_not_as_recorded_is_named_in_words(after_outside: PolicyBundle) -> None:
    reopened = Sources(deployment=Known({("tenant-a", "run-1"): run_opened(timedelta(hours=1))}, {}))
    row = await decide(note(None), after_outside, reopened)
    assert row.grounds == ("not as recorded: the run's context as the deployment's runs hold it today; "
                           "no history on the record, decided without it")
    assert row.notes[0].startswith("run run-1 was opened again at ") and len(row.notes) == 2
    assert summary([row, await decide(note(UNTRUSTED), after_outside)], "B").split("; ", 1)[1] == (
        "1 of the 2 decided on evidence not as recorded: "
        "the run's context as the deployment's runs hold it today (1 decision); "
        "no history on the record, decided without it (1 decision)")
