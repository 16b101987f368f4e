"""Flood-limit arithmetic: a smooth rate with a burst, an in-flight cap, released by intent."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from lockgate.authz.config import BundleConfig, Limit
from lockgate.authz.limits import LimitState, Refusal, admit, burst, limit_key, release, scope_value

RATE = Limit(name="per-actor", scope="actor", per_s=10, burst=3)
CAP = Limit(name="per-tenant", scope="tenant", max_in_flight=2, retry_after_s=0.5)
BOTH = Limit(name="both", scope="run", per_s=100, max_in_flight=1)
T = 1_000_000.0


def admitted(result: LimitState | Refusal) -> LimitState:
    assert isinstance(result, LimitState), result
    return result


def test_a_rate_lets_a_burst_through_then_one_per_interval() -> None:
    s = LimitState()
    for n in range(3):
        s = admitted(admit(s, RATE, f"i{n}", T))
    refused = admit(s, RATE, "i3", T)
    assert isinstance(refused, Refusal) and refused.reason == "rate.limited"
    assert refused.retry_after_s == pytest.approx(0.1)  # the next slot, exactly
    assert admit(s, RATE, "i3", T + 0.05) == Refusal(RATE, "rate.limited", pytest.approx(0.05))
    s = admitted(admit(s, RATE, "i3", T + 0.1))
    assert isinstance(admit(s, RATE, "i4", T + 0.1), Refusal)
    assert s.holds == {}  # a rate alone holds nothing


def test_a_refused_candidate_costs_nothing() -> None:
    s = LimitState()
    for n in range(3):
        s = admitted(admit(s, RATE, f"i{n}", T))
    for _ in range(100):
        assert isinstance(admit(s, RATE, "again", T), Refusal)
    assert isinstance(admit(s, RATE, "later", T + 0.1), LimitState)  # no debt was built up


def test_an_idle_rate_does_not_bank_more_than_its_burst() -> None:
    s = admitted(admit(LimitState(), RATE, "first", T))
    later = T + 3600
    for n in range(3):
        s = admitted(admit(s, RATE, f"i{n}", later))
    assert isinstance(admit(s, RATE, "i3", later), Refusal)


def test_an_in_flight_cap_holds_places_until_released() -> None:
    s = admitted(admit(LimitState(), CAP, "a", T))
    s = admitted(admit(s, CAP, "b", T))
    full = admit(s, CAP, "c", T)
    assert full == Refusal(CAP, "rate.in-flight", 0.5)
    assert admitted(admit(s, CAP, "a", T)) == s  # a redelivered candidate keeps its place
    s = release(s, "a")
    assert set(admitted(admit(s, CAP, "c", T)).holds) == {"b", "c"}
    assert release(s, "nobody") == s


def test_a_hold_older_than_its_ttl_stops_counting() -> None:
    cap = Limit(name="cap", scope="tenant", max_in_flight=1, hold_ttl_s=60)
    s = admitted(admit(LimitState(), cap, "leaked", T))
    assert isinstance(admit(s, cap, "new", T + 59), Refusal)
    assert set(admitted(admit(s, cap, "new", T + 61)).holds) == {"new"}


def test_rate_and_cap_together_refuse_without_charging_the_other() -> None:
    s = admitted(admit(LimitState(), BOTH, "a", T))
    assert admit(s, BOTH, "b", T) == Refusal(BOTH, "rate.in-flight", 1.0)
    assert admit(s, BOTH, "b", T).detail == "both per run: 1 in flight"  # type: ignore[union-attr]
    s2 = release(s, "a")
    assert s2.tat == s.tat  # the cap's refusal did not touch the rate


def test_keys_and_scopes() -> None:
    assert scope_value(RATE, tenant="t", actor="u-1", run_id="r") == "t/u-1"
    assert scope_value(CAP, tenant="t", actor="u-1", run_id="r") == "t"
    assert limit_key(RATE, "t/u-1") == "limit=per-actor.t_u-1"
    assert burst(Limit(name="x", scope="actor", per_s=2.5)) == 3


def test_limits_are_validated_when_the_bundle_loads() -> None:
    with pytest.raises(ValidationError):
        Limit(name="nothing", scope="actor")
    with pytest.raises(ValidationError):
        Limit(name="b", scope="actor", burst=5, max_in_flight=1)
    with pytest.raises(ValidationError):
        Limit(name="x", scope="capability", per_s=1)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        BundleConfig(limits=(CAP, CAP))
