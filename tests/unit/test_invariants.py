"""The invariant checker the end-to-end tests rely on: it must catch what it claims to."""

from __future__ import annotations

from datetime import timedelta

from lockgate.intent.aggregate import EffectIntent
from lockgate.testing.intents import T0, History
from lockgate.testing.invariants import violations


def authorized() -> History:
    h = History().normalized().decided("allow")
    return h.add(EffectIntent.ExecutionAuthorized, attempt_id="a1", intent_key="k1",
                 digest="sha256:d1", policy_revision="p", contract_revision="rev-1",
                 gate_facts={}, deadline_at=T0 + timedelta(seconds=30))


def test_a_clean_history_has_no_violations() -> None:
    h = authorized().add(EffectIntent.AttemptSent, attempt_id="a1")
    h.add(EffectIntent.EffectCompleted, attempt_id="a1", receipt={}, result={}, provenance={})
    assert violations({h.intent_id: h.events},
                      [{"intent_id": h.intent_id, "idempotency_key": "k1"}]) == []


def test_an_event_after_a_terminal_state_is_a_violation() -> None:
    h = authorized().add(EffectIntent.Withdrawn, by="runtime", why="")
    h.add(EffectIntent.AttemptFailedBeforeSend, attempt_id="a1", reason="order.stale", detail="")
    [problem] = violations({h.intent_id: h.events})
    assert "AttemptFailedBeforeSend after the terminal state withdrawn (invariant 6)" in problem
