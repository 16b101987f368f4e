"""Budget arithmetic: reservations count at once, outcomes consume or give them back."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from lockgate.authz.budgets import Counter, keys, reserve, scope_value, settle
from lockgate.authz.config import Budget

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
