"""The ``EffectIntent`` aggregate itself: what folding a stored history may and may not do."""

from __future__ import annotations

from datetime import timedelta

import pytest

from lockgate.intent.aggregate import State
from lockgate.intent.events import (
    AttemptFailedBeforeSend,
    AttemptRejected,
    AttemptSent,
    EffectCompleted,
    Event,
    ExecutionAuthorized,
    GateRefused,
    Reconciled,
    Withdrawn,
)
from lockgate.testing.intents import T0, History


def authorized() -> History:
    h = History().normalized().decided("allow")
    return h.add(ExecutionAuthorized, attempt_id="a1", intent_key="k1",
                 digest="sha256:d1", policy_revision="p", contract_revision="rev-1",
                 gate_facts={}, deadline_at=T0 + timedelta(seconds=30))


def withdrawn() -> History:
    return History().normalized().decided("allow").add(Withdrawn, by="runtime", why="")


def test_a_stored_failure_before_send_after_a_withdrawal_does_not_revive_the_intent() -> None:
    """The bug behind invariant 6: this once put the intent back to ``allowed``."""
    h = withdrawn()
    h.add(ExecutionAuthorized, attempt_id="a1", intent_key="k1", digest="sha256:d1",
          policy_revision="p", contract_revision="rev-1", gate_facts={}, deadline_at=T0)
    h.add(AttemptFailedBeforeSend, attempt_id="a1", reason="order.stale", detail="")
    intent = h.intent
    assert intent.state is State.WITHDRAWN
    assert intent.attempts == ()  # the authorization after the withdrawal moved nothing either
    assert intent.version == len(h.events)  # ... but the events keep their places
    assert intent.ignored == ("ExecutionAuthorized", "AttemptFailedBeforeSend")


@pytest.mark.parametrize(
    ("ending", "fields"),
    [
        (EffectCompleted, dict(attempt_id="a1", receipt={"n": "1"}, result={}, provenance={})),
        (AttemptRejected, dict(attempt_id="a1", reason="case.closed", detail="")),
        (GateRefused, dict(reason="gate.policy-changed", gate_facts={})),
        (Withdrawn, dict(by="runtime", why="")),
    ],
)
def test_every_later_event_leaves_a_terminal_state_as_it_was(
    ending: type[Event], fields: dict[str, object]
) -> None:
    h = authorized().add(ending, **fields)
    before = h.intent
    assert before.state.terminal
    h.add(AttemptFailedBeforeSend, attempt_id="a1", reason="x", detail="")
    h.add(Reconciled, attempt_id="a1", finding="absent", receipt={}, by="r", why="w",
          resolution="retry")
    h.add(AttemptSent, attempt_id="a1")
    after = h.intent
    assert (after.state, after.reason, after.receipt) == (before.state, before.reason, before.receipt)
    assert [a.stage for a in after.attempts] == [a.stage for a in before.attempts]
