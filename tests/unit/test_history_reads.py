"""A request carries only the attributes of the run's history its bundle's policies read.

Cedar's cost grows with the context it is handed (a whole history roughly triples a
question's), so the policy service renders ``context.history`` down to what the bundle
reads (``PolicyBundle.history_reads``), each bundle its own: a shadow bundle reading more
than the active one is handed what it reads.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lockgate.authz.engine import PolicyBundle, merge_schema_fragments
from lockgate.authz.history import HistoryFacts, Window
from lockgate.authz.intents import Evidence, authz_request, judge
from lockgate.contracts.messages import Facts
from lockgate.contracts.vocabulary import DecisionOutcome
from lockgate.testing.intents import History

REPO = Path(__file__).resolve().parents[2]
SCHEMA = merge_schema_fragments([
    (REPO / "deploy" / "policies" / "lockgate.cedarschema").read_text(),
    """namespace Lockgate {
      entity Case;
      action "case.add_note" appliesTo { principal: [Actor], resource: [Case], context: Context };
      action "case.add_note::unattended" in ["unattended"]
        appliesTo { principal: [Actor], resource: [Case], context: Context };
    }""",
])
PERMIT = '@id("p")\npermit (principal, action, resource);\n'
UNTRUSTED = PERMIT + '@id("untrusted")\nforbid (principal, action, resource) when { context.history.untrusted };\n'
TOTALS = PERMIT + ('@id("totals")\nforbid (principal, action, resource) '
                   'when { context.history.run.amount > 10 && context.history.approvals > 0 };\n')
HAS = PERMIT + '@id("has")\nforbid (principal, action, resource) when { context.history has run };\n'
WHOLE = PERMIT + '@id("whole")\nforbid (principal, action, resource) when { context has history };\n'

HISTORY = HistoryFacts(untrusted_from=frozenset({"mail.read"}), approvals=1,
                       run=Window({"publish": 2}, 50))
INTENT = History().intent


def bundle(policies: str) -> PolicyBundle:
    return PolicyBundle.from_text(policies, SCHEMA)


@pytest.mark.parametrize(("policies", "reads"), [
    (PERMIT, frozenset()), (UNTRUSTED, frozenset({"untrusted"})),
    (TOTALS, frozenset({"run", "approvals"})), (HAS, frozenset({"run"})), (WHOLE, None),
])
def test_the_bundle_knows_what_it_reads_of_the_history(policies: str, reads: frozenset[str] | None) -> None:
    assert bundle(policies).history_reads == reads


def test_a_request_carries_only_what_is_read() -> None:
    request = authz_request(INTENT, Facts(facts={}), Evidence(history=HISTORY),
                            history_reads=frozenset({"untrusted"}))
    assert request.context["history"] == {"untrusted": True}
    whole = authz_request(INTENT, Facts(facts={}), Evidence(history=HISTORY))
    assert whole.context["history"] == HISTORY.context()


def test_each_bundle_is_handed_what_it_reads() -> None:
    """The same evidence, judged by a bundle reading only `untrusted` and by one reading the
    totals (a shadow beside it): each is decided on what it reads, without an error."""
    evidence = Evidence(history=HISTORY)
    first = judge(bundle(UNTRUSTED), INTENT, Facts(facts={}), evidence)
    second = judge(bundle(TOTALS), INTENT, Facts(facts={}), evidence)
    assert (first.outcome, first.reasons, first.errors) == (DecisionOutcome.DENY, ("untrusted",), ())
    assert (second.outcome, second.reasons, second.errors) == (DecisionOutcome.DENY, ("totals",), ())
