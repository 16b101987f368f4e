"""The invariant checker the end-to-end tests rely on: it must catch what it claims to."""

from __future__ import annotations

from datetime import timedelta

from lockgate.intent.events import (
    AttemptFailedBeforeSend,
    AttemptSent,
    EffectCompleted,
    ExecutionAuthorized,
    InterruptionRequested,
    WithdrawalRequested,
    Withdrawn,
)
from lockgate.testing.intents import T0, History
from lockgate.testing.invariants import violations


def authorized() -> History:
    h = History().normalized().decided("allow")
    return h.add(ExecutionAuthorized, attempt_id="a1", intent_key="k1",
                 digest="sha256:d1", policy_revision="p", contract_revision="rev-1",
                 gate_facts={}, deadline_at=T0 + timedelta(seconds=30))


def test_a_clean_history_has_no_violations() -> None:
    h = authorized().add(AttemptSent, attempt_id="a1")
    h.add(EffectCompleted, attempt_id="a1", receipt={}, result={}, provenance={})
    assert violations({h.intent_id: h.events},
                      [{"intent_id": h.intent_id, "idempotency_key": "k1"}]) == []


def test_an_event_after_a_terminal_state_is_a_violation() -> None:
    h = authorized().add(Withdrawn, by="runtime", why="")
    h.add(AttemptFailedBeforeSend, attempt_id="a1", reason="order.stale", detail="")
    [problem] = violations({h.intent_id: h.events})
    assert "AttemptFailedBeforeSend after the terminal state withdrawn (invariant 6)" in problem


def test_an_effect_of_an_intent_the_model_was_told_is_withdrawn_is_a_violation() -> None:
    # As an older executor recorded it: withdrawn while authorized, then the effect.
    h = authorized().add(Withdrawn, by="runtime", why="")
    write = [{"intent_id": h.intent_id, "idempotency_key": "k1"}]
    problems = violations({h.intent_id: h.events}, write)
    assert problems == [f"{h.intent_id}: told withdrawn, yet the world has its effect (invariant 6)"]
    # The record alone: a completion a terminal guard ignores is still a completion on record.
    h.add(EffectCompleted, attempt_id="a1", receipt={}, result={}, provenance={})
    assert any("told withdrawn, yet the record has its effect" in p
               for p in violations({h.intent_id: h.events}))
    # What a client was told counts too, even if the record never said it.
    done = authorized().add(AttemptSent, attempt_id="a1")
    assert violations({done.intent_id: done.events}, write, told={done.intent_id: ["withdrawn"]}) == [
        f"{done.intent_id}: told withdrawn, yet the world has its effect (invariant 6)"]


def test_a_withdrawal_that_was_only_requested_may_end_in_an_effect() -> None:
    h = authorized().add(WithdrawalRequested, attempt_id="a1", by="r", why="")
    h.add(AttemptSent, attempt_id="a1")
    h.add(InterruptionRequested, attempt_id="a1", by="r", why="")
    h.add(EffectCompleted, attempt_id="a1", receipt={}, result={}, provenance={})
    assert violations({h.intent_id: h.events},
                      [{"intent_id": h.intent_id, "idempotency_key": "k1"}]) == []


def test_a_lock_behind_the_state_is_a_violation() -> None:
    done = authorized().add(AttemptSent, attempt_id="a1")
    done.add(EffectCompleted, attempt_id="a1", receipt={}, result={}, provenance={})
    waiting = History(call_id="call-2").normalized().decided("allow")
    key = "tenant-a.case.case-123"
    histories = {done.intent_id: done.events, waiting.intent_id: waiting.events}
    assert violations(histories, locks={}) == []
    assert violations(histories, locks={key: waiting.intent_id}) == []  # the next one holds it
    [stranded] = violations(histories, locks={key: done.intent_id})
    assert stranded == f"lock {key}: still held by {done.intent_id}, completed (invariant 8)"
    [unknown] = violations(histories, locks={key: "f" * 32})
    assert "not on record" in unknown
