"""When a capability is offered in a turn, and what policy says when it no longer is."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from lockgate.adapters.worker import HEARTBEAT_S
from lockgate.authz import PolicyBundle
from lockgate.authz.intents import Evidence
from lockgate.contracts.offer import ALIVE_WITHIN_S, Circumstances, Offer, alive, withheld_because
from lockgate.contracts.vocabulary import DecisionOutcome
from lockgate.policy.domain import evaluate_for
from lockgate.testing.intents import T0, History
from lockgate.testing.system import REPO

NOW = Circumstances(stage="default", roles=("analyst",), data_classes=None, done=frozenset(),
                    budget_left=None, alive=True)


ALWAYS = Offer()


def why(offer: Offer = ALWAYS, *, data_classes: tuple[str, ...] = (), cost: int = 1,
        **now: object) -> str | None:
    return withheld_because(offer, data_classes=data_classes, cost=cost,
                            now=replace(NOW, **now))  # type: ignore[arg-type]


def test_a_capability_without_rules_is_offered_while_its_adapter_is_alive() -> None:
    assert why() is None
    assert why(alive=False) == "adapter not alive"


@pytest.mark.parametrize(("offer", "now", "withheld"), [
    (Offer(stages=("review",)), {}, "not offered in stage 'default'"),
    (Offer(stages=("review",)), {"stage": "review"}, None),
    (Offer(roles=("maintainer",)), {}, "the actor has none of the roles it needs"),
    (Offer(roles=("maintainer", "analyst")), {}, None),
    (Offer(after=("repo.read_file",)), {}, "offered after repo.read_file executed in the run"),
    (Offer(after=("repo.read_file",)), {"done": frozenset({"repo.read_file"})}, None),
])
def test_its_own_rules_decide(offer: Offer, now: dict[str, object], withheld: str | None) -> None:
    assert why(offer, **now) == withheld


def test_the_runs_data_classes_and_the_budget_left_decide() -> None:
    assert why(data_classes=("case_note",)) is None  # the host set no data classes: any
    outside = withheld_because(Offer(), data_classes=("case_note",), cost=1,
                               now=replace(NOW, data_classes=("item_draft",)))
    assert outside == "touches data classes the run may not: case_note"
    inside = withheld_because(Offer(), data_classes=("case_note",), cost=1,
                              now=replace(NOW, data_classes=("case_note", "item_draft")))
    assert inside is None
    assert why(cost=3, budget_left=2) == "its budget is spent"
    assert why(cost=2, budget_left=2) is None


def test_a_run_that_names_its_capabilities_is_offered_only_those() -> None:
    uses = replace(NOW, capabilities=("ticket.comment",))
    assert withheld_because(ALWAYS, data_classes=(), cost=1, now=uses, name="ticket.comment") is None
    assert withheld_because(ALWAYS, data_classes=(), cost=1, now=uses, name="case.add_note") == (
        "not among the capabilities the run uses")
    assert why() is None  # a run that names none: any


def test_alive_is_three_heartbeats() -> None:
    assert ALIVE_WITHIN_S == 3 * HEARTBEAT_S
    assert alive(T0, T0 + timedelta(seconds=ALIVE_WITHIN_S - 1))
    assert not alive(T0, T0 + timedelta(seconds=ALIVE_WITHIN_S + 1))
    assert not alive(None, T0)


def test_a_capability_gone_since_its_turn_is_denied_by_current_policy() -> None:
    bundle = PolicyBundle.load(REPO / "deploy" / "policies")
    intent = History().normalized().intent
    gone = evaluate_for(intent, bundle, None, evidence=Evidence(offered_now=False))
    assert (gone.outcome, gone.reasons) == (DecisionOutcome.DENY, ("tool.no-longer-offered",))
