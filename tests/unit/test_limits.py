"""Flood-limit arithmetic: smooth rates with a burst, in-flight caps, all of a tenant's in one counter."""

from __future__ import annotations

from collections import defaultdict

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from lockgate.authz.config import BundleConfig, Limit
from lockgate.authz.limits import (
    FloodState,
    Refusal,
    admit,
    burst,
    flood_key,
    is_flood_key,
    over_rate,
    release,
)

RATE = Limit(name="per-actor", scope="actor", per_s=10, burst=3)
CAP = Limit(name="per-tenant", scope="tenant", max_in_flight=2, retry_after_s=0.5)
BOTH = Limit(name="both", scope="run", per_s=100, max_in_flight=1)
T = 1_000_000.0


def admitted(result: FloodState | Refusal) -> FloodState:
    assert isinstance(result, FloodState), result
    return result


def take(state: FloodState, limits: list[Limit] | Limit, intent: str, now: float = T, *,
         actor: str = "u", run: str = "r") -> FloodState | Refusal:
    return admit(state, limits if isinstance(limits, list) else [limits], actor=actor, run_id=run,
                 intent_id=intent, now_s=now)


def test_a_rate_lets_a_burst_through_then_one_per_interval() -> None:
    s = FloodState()
    for n in range(3):
        s = admitted(take(s, RATE, f"i{n}"))
    refused = take(s, RATE, "i3")
    assert isinstance(refused, Refusal) and refused.reason == "rate.limited"
    assert refused.retry_after_s == pytest.approx(0.1)  # the next slot, exactly
    assert take(s, RATE, "i3", T + 0.05) == Refusal(RATE, "rate.limited", pytest.approx(0.05))
    s = admitted(take(s, RATE, "i3", T + 0.1))
    assert isinstance(take(s, RATE, "i4", T + 0.1), Refusal)
    assert s.holds == {}  # a rate alone holds nothing


def test_a_refused_candidate_costs_nothing() -> None:
    s = FloodState()
    for n in range(3):
        s = admitted(take(s, RATE, f"i{n}"))
    for _ in range(100):
        assert isinstance(take(s, RATE, "again"), Refusal)
    assert isinstance(take(s, RATE, "later", T + 0.1), FloodState)  # no debt was built up


def test_an_idle_rate_does_not_bank_more_than_its_burst() -> None:
    s = admitted(take(FloodState(), RATE, "first"))
    later = T + 3600
    for n in range(3):
        s = admitted(take(s, RATE, f"i{n}", later))
    assert isinstance(take(s, RATE, "i3", later), Refusal)


def test_an_in_flight_cap_holds_places_until_released() -> None:
    s = admitted(take(FloodState(), CAP, "a"))
    s = admitted(take(s, CAP, "b"))
    full = take(s, CAP, "c")
    assert full == Refusal(CAP, "rate.in-flight", 0.5)
    assert admitted(take(s, CAP, "a")) == s  # a redelivered candidate keeps its place
    s = release(s, "a")
    assert set(admitted(take(s, CAP, "c")).holds) == {"b", "c"}
    assert release(s, "nobody") == s


def test_a_hold_older_than_its_ttl_stops_counting() -> None:
    cap = Limit(name="cap", scope="tenant", max_in_flight=1, hold_ttl_s=60)
    s = admitted(take(FloodState(), cap, "leaked"))
    assert isinstance(take(s, cap, "new", T + 59), Refusal)
    assert set(admitted(take(s, cap, "new", T + 61)).holds) == {"new"}


def test_each_cap_forgets_a_place_after_its_own_ttl() -> None:
    short = Limit(name="short", scope="tenant", max_in_flight=1, hold_ttl_s=60)
    long = Limit(name="long", scope="actor", max_in_flight=1, hold_ttl_s=3600)
    s = admitted(take(FloodState(), [short, long], "leaked"))
    assert take(s, [short, long], "new", T + 61) == Refusal(long, "rate.in-flight", 1.0)
    s = admitted(take(s, [short, long], "other-actor", T + 61, actor="v"))
    assert set(s.holds) == {"leaked", "other-actor"}  # the long cap still counts the first


def test_rate_and_cap_together_refuse_without_charging_the_other() -> None:
    s = admitted(take(FloodState(), BOTH, "a"))
    assert take(s, BOTH, "b") == Refusal(BOTH, "rate.in-flight", 1.0)
    assert take(s, BOTH, "b").detail == "both per run: 1 in flight"  # type: ignore[union-attr]
    s2 = release(s, "a")
    assert s2.rates == s.rates  # the cap's refusal did not touch the rate


def test_one_limit_refusing_costs_the_candidate_nothing_under_the_others() -> None:
    """Admission is all or nothing, in the bundle's order or any other: a run over its own
    rate does not spend its actor's or its tenant's, and a tenant at its cap does not spend
    the run's rate."""
    per_run = Limit(name="per-run", scope="run", per_s=1, burst=1)
    per_actor = Limit(name="per-actor", scope="actor", per_s=100, burst=2)
    per_tenant = Limit(name="per-tenant", scope="tenant", max_in_flight=1)
    limits = [per_run, per_actor, per_tenant]
    s = admitted(take(FloodState(), limits, "first"))
    assert take(s, limits, "second") == Refusal(per_run, "rate.limited", pytest.approx(1.0))
    # The actor's burst of two still has one left for another run, once the tenant's
    # place is given back: the refused candidate took nothing from it.
    assert take(s, limits, "other-run", run="r2") == Refusal(per_tenant, "rate.in-flight", 1.0)
    s = release(s, "first")
    s = admitted(take(s, limits, "other-run", run="r2"))
    assert take(release(s, "other-run"), limits, "third", run="r3").reason == "rate.limited"  # type: ignore[union-attr]


def test_each_cap_counts_the_places_of_its_own_scope() -> None:
    per_run = Limit(name="per-run", scope="run", max_in_flight=1)
    per_actor = Limit(name="per-actor", scope="actor", max_in_flight=2)
    per_tenant = Limit(name="per-tenant", scope="tenant", max_in_flight=3)
    limits = [per_run, per_actor, per_tenant]
    s = admitted(take(FloodState(), limits, "a1", actor="a", run="a-r1"))
    assert take(s, limits, "a2", actor="a", run="a-r1") == Refusal(per_run, "rate.in-flight", 1.0)
    s = admitted(take(s, limits, "a2", actor="a", run="a-r2"))
    assert take(s, limits, "a3", actor="a", run="a-r3") == Refusal(per_actor, "rate.in-flight", 1.0)
    s = admitted(take(s, limits, "b1", actor="b", run="b-r1"))
    assert take(s, limits, "c1", actor="c", run="c-r1") == Refusal(per_tenant, "rate.in-flight", 1.0)
    assert len(s.holds) == 3  # one place each, counted under every cap it falls in


def test_the_counter_keeps_only_what_still_counts() -> None:
    """Rates whose next arrival has passed, and places older than every cap's TTL, are dropped
    on the next write: a tenant's counter does not grow with the runs it ever had."""
    per_run = Limit(name="per-run", scope="run", per_s=10, max_in_flight=5, hold_ttl_s=60)
    s = FloodState()
    for n in range(50):
        s = admitted(take(s, per_run, f"i{n}", T + n * 0.01, run=f"r{n}"))
        s = release(s, f"i{n}")
    assert s.holds == {} and len(s.rates) == 10  # the runs of the last 0.1 s
    s = admitted(take(s, per_run, "late", T + 10, run="r-late"))
    assert list(s.rates) == ["per-run/r-late"]
    s = admitted(take(s, per_run, "later", T + 100, run="r-later"))
    assert list(s.holds) == ["later"]  # "late" was never given back, and is past its TTL


def test_over_rate_refuses_as_admission_would() -> None:
    s = FloodState()
    for n in range(3):
        s = admitted(take(s, [CAP, RATE], f"i{n}", T + n))
        s = release(s, f"i{n}")
    for n in range(3):
        s = admitted(take(s, RATE, f"j{n}", T + 10))
    assert over_rate(s, [CAP, RATE], actor="u", run_id="r", intent_id="k", now_s=T + 10) == \
        take(s, [RATE], "k", T + 10)
    assert over_rate(s, [RATE], actor="someone-else", run_id="r", intent_id="k", now_s=T + 10) is None
    # Never for a cap: a place may have been given back since.
    full = admitted(take(admitted(take(FloodState(), CAP, "a")), CAP, "b"))
    assert over_rate(full, [CAP], actor="u", run_id="r", intent_id="c", now_s=T) is None


def test_keys() -> None:
    assert flood_key("tenant-a") == "limits=tenant-a"
    assert flood_key("t.x*") == "limits=t_x_"
    assert is_flood_key("limits=tenant-a")
    assert not is_flood_key("limit=per-actor.tenant-a_user-42")  # the counters before
    assert burst(Limit(name="x", scope="actor", per_s=2.5)) == 3


def test_the_counter_round_trips_through_its_encoding() -> None:
    s = admitted(take(FloodState(), [BOTH, RATE], "a"))
    assert msgspec.json.decode(msgspec.json.encode(s), type=FloodState) == s


def test_limits_are_validated_when_the_bundle_loads() -> None:
    with pytest.raises(ValidationError):
        Limit(name="nothing", scope="actor")
    with pytest.raises(ValidationError):
        Limit(name="b", scope="actor", burst=5, max_in_flight=1)
    with pytest.raises(ValidationError):
        Limit(name="x", scope="capability", per_s=1)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        BundleConfig(limits=(CAP, CAP))


LIMITS = [
    Limit(name="per-run", scope="run", per_s=4, burst=2, max_in_flight=2),
    Limit(name="per-actor", scope="actor", per_s=6, burst=3, max_in_flight=3),
    Limit(name="per-tenant", scope="tenant", per_s=8, burst=5, max_in_flight=4),
]
steps = st.lists(st.tuples(
    st.sampled_from(["admit", "admit", "release"]),
    st.integers(0, 1), st.integers(0, 2),  # actor, run of that actor
    st.sampled_from([0.0, 0.0, 0.01, 0.05, 0.3]),  # time passing before it
), min_size=30, max_size=150)


@settings(max_examples=200, deadline=None)
@given(steps)
def test_no_sequence_of_admissions_and_releases_passes_a_limit(plan: list[tuple[str, int, int, float]]) -> None:
    """Whatever arrives, whenever: no scope ever has more places than its cap, and no scope
    is admitted more often than its rate and burst allow over any stretch of time."""
    s, now, n = FloodState(), T, 0
    admitted_at: dict[str, list[float]] = defaultdict(list)
    live: list[str] = []
    for action, a, r, dt in plan:
        now += dt
        actor, run = f"a{a}", f"a{a}-r{r}"
        if action == "release":
            if live:
                s = release(s, live.pop(0))
            continue
        n += 1
        result = take(s, LIMITS, f"i{n}", now, actor=actor, run=run)
        if isinstance(result, Refusal):
            assert result.retry_after_s > 0
            continue
        s = result
        live.append(f"i{n}")
        for scope in (f"run/{run}", f"actor/{actor}", "tenant/"):
            admitted_at[scope].append(now)
        by_scope = {"run": run, "actor": actor, "tenant": ""}
        for limit in LIMITS:
            held = [h for h in s.holds.values()
                    if limit.scope == "tenant" or (h.actor if limit.scope == "actor" else h.run)
                    == by_scope[limit.scope]]
            assert len(held) <= (limit.max_in_flight or 0)
    for limit in LIMITS:
        for scope, times in admitted_at.items():
            if not scope.startswith(limit.scope + "/"):
                continue
            for i, start in enumerate(times):
                within = [t for t in times[i:] if t - start <= 1.0]
                assert len(within) <= burst(limit) + (limit.per_s or 0) * 1.0 + 1e-9
