"""Budget arithmetic: reservations count at once, outcomes consume or give them back."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from lockgate.authz.budgets import Counter, keys, reserve, scope_value, settle
from lockgate.authz.config import Budget
from lockgate.contracts.messages import AttemptReport
from lockgate.contracts.vocabulary import DecisionOutcome, Settles
from lockgate.eventstore.base import RecordedEvent
from lockgate.eventstore.subjects import event_subject
from lockgate.executor.domain import on_report
from lockgate.intent.aggregate import Event, Stamp
from lockgate.intent.codec import decode_event, encode_event, route
from lockgate.intent.events import (
    AttemptInterrupted,
    AttemptRejected,
    EffectCompleted,
    ExecutionAuthorized,
    GateRefused,
    PolicyDecided,
    ProcessingAbandoned,
    ReviewDenied,
    ReviewExpired,
    Withdrawn,
)
from lockgate.runtime.topology import durable
from lockgate.testing.intents import T0, History

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
COUNT = Budget(name="notes", scope="actor", window_s=3600, max_count=2)
COST = Budget(name="spend", scope="tenant", window_s=60, max_cost=5)
CAP = Budget(name="inflight", scope="run", max_in_flight=1, on_exhausted="pause")


def test_counts_are_kept_per_scope_and_window() -> None:
    scope = scope_value(COUNT, tenant="t", actor="user-42", run_id="r", capability="c")
    assert scope == "t/user-42"
    (key,) = keys(COUNT, scope, NOW)
    assert key.startswith("notes.t_user-42.w")
    later = datetime(2026, 1, 1, 13, 0, 1, tzinfo=UTC)
    assert keys(COUNT, scope, later) != [key]  # a new window
    assert keys(CAP, "t/r", NOW) == ["inflight.t_r.inflight"]


def test_a_count_budget_refuses_past_its_limit_and_gets_back_what_did_not_happen() -> None:
    c = Counter()
    c1 = reserve(c, COUNT, "k", "i1", 1)
    assert c1 is not None
    c2 = reserve(c1, COUNT, "k", "i2", 1)
    assert c2 is not None and c2.count == 2
    assert reserve(c2, COUNT, "k", "i3", 1) is None
    assert reserve(c2, COUNT, "k", "i1", 1) == c2  # a redelivered decision holds once
    released = settle(c2, "i2", consumed=False)
    assert released.count == 1 and "i2" not in released.holds
    consumed = settle(released, "i1", consumed=True)
    assert consumed.count == 1 and consumed.holds == {}
    assert settle(consumed, "i1", consumed=True) == consumed  # settling twice changes nothing


def test_cost_and_in_flight_limits() -> None:
    c = reserve(Counter(), COST, "k", "i1", 4)
    assert c is not None and reserve(c, COST, "k", "i2", 2) is None
    key = "inflight.t_r.inflight"
    held = reserve(Counter(), CAP, key, "i1", 1)
    assert held is not None and reserve(held, CAP, key, "i2", 1) is None
    free = settle(held, "i1", consumed=True)
    assert reserve(free, CAP, key, "i2", 1) is not None


def test_a_budget_must_limit_something() -> None:
    with pytest.raises(ValidationError):
        Budget(name="nothing", scope="actor")
    with pytest.raises(ValidationError):
        Budget(name="no-window", scope="actor", max_count=3)


def test_remaining_is_what_the_budget_still_admits_not_counting_ones_own_hold() -> None:
    from lockgate.authz.budgets import NO_LIMIT, remaining

    c = reserve(Counter(), COUNT, "k", "i1", 1)
    assert c is not None
    assert remaining(c, COUNT, "k") == 1
    assert remaining(c, COUNT, "k", exclude="i1") == 2  # the gate sees what policy saw
    assert remaining(Counter(), CAP, "x.inflight") == 1
    uncapped = Budget(name="cost-only", scope="tenant", window_s=60, max_cost=10)
    assert remaining(Counter(), uncapped, "k") == 10
    assert remaining(Counter(count=5), Budget(name="n", scope="run", max_in_flight=2), "k.inflight") == 2
    assert NO_LIMIT > 10**12


# -- which ends policy is handed ------------------------------------------------------------


def _ended(*, reservations: list[str]) -> list[Event]:
    """Every event that can end an intent, built on an intent with ``reservations``."""
    h = History().normalized()
    decided = h.extend([PolicyDecided.next(
        h.intent, h.stamp(), outcome=DecisionOutcome.ALLOW, policy_revision="p", reasons=[],
        determining=[], facts={}, digest="sha256:d1", reservations=reservations)])
    intent = decided.intent
    stamp = Stamp(now=T0, event_id="e", causation_id="c")
    return [
        GateRefused.next(intent, stamp, reason="gate.x", gate_facts={}),
        Withdrawn.next(intent, stamp, by="r", why=""),
        ReviewExpired.next(intent, stamp, review_id="r1"),
        ReviewDenied.next(intent, stamp, review_id="r1", reviewer="rev", reason="no"),
        ProcessingAbandoned.next(intent, stamp, durable="d", trigger="t", cause="x",
                                              deliveries=5),
        AttemptRejected.next(intent, stamp, attempt_id="a1", reason="x", detail=""),
        AttemptInterrupted.next(intent, stamp, attempt_id="a1", detail=""),
        EffectCompleted.next(intent, stamp, attempt_id="a1", receipt={}, result={},
                                          provenance={}),
    ]


def test_an_end_is_routed_to_policy_exactly_when_the_intent_holds_budget() -> None:
    held = _ended(reservations=["notes.t_user-42.w1"])
    free = _ended(reservations=[])
    assert {route(e) for e in held} == {Settles.BUDGET}
    assert {route(e) for e in free} == {Settles.NOTHING}
    budgets = durable("policy-budgets")
    for event in held:
        assert any(_matches(f, event) for f in budgets.filters), type(event).__name__
    for event in free:
        assert not any(_matches(f, event) for f in budgets.filters), type(event).__name__


def test_a_completed_effect_is_routed_to_policy_when_the_bundle_counts_effects() -> None:
    h = History().normalized().decided("allow").add(
        ExecutionAuthorized, attempt_id="a1", intent_key="k1", digest="sha256:d1",
        policy_revision="p", contract_revision="rev-1", gate_facts={}, deadline_at=T0)
    report = AttemptReport(tenant="tenant-a", intent_id=h.intent_id, attempt_id="a1",
                           stage="completed")
    for counts, routed in ((False, Settles.NOTHING), (True, Settles.BUDGET)):
        (completed,) = on_report(h.intent, report, None, cause="c", now=T0, counts_effects=counts)
        assert isinstance(completed, EffectCompleted)
        assert route(completed) == routed


def test_an_end_recorded_before_routes_to_policy_existed_reads_as_holding_budget() -> None:
    (gate_refused, *_) = _ended(reservations=[])
    stored = encode_event(gate_refused)
    envelope = json.loads(stored.data)
    del envelope["data"]["settles"]
    old = RecordedEvent("tenant-a", gate_refused.originator_id.hex, gate_refused.originator_version,
                        "GateRefused", "e", json.dumps(envelope).encode(), 9)
    assert route(decode_event(old)) == Settles.BUDGET


def _matches(subject_filter: str, event: Event) -> bool:
    subject = event_subject("tenant-a", event.originator_id.hex, event.originator_version,
                            type(event).__name__, route(event))
    want, have = subject_filter.split("."), subject.split(".")
    return len(want) == len(have) and all(w in ("*", h) for w, h in zip(want, have, strict=True))
