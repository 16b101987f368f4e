"""One contract for the budget and limit ledgers: the in-memory fakes and the LG_BUDGETS bucket."""

from __future__ import annotations

from lockgate.authz.config import Budget, Limit
from lockgate.core.ids import random_id
from lockgate.runtime.context import Ports
from lockgate.testing.intents import T0, History


def budget(max_count: int = 2) -> Budget:
    """A budget of its own (the bucket is shared by the session): per run, per hour."""
    return Budget(name=f"b-{random_id()}"[:60], scope="run", window_s=3600, max_count=max_count)


async def test_reservations_count_until_the_budget_is_exhausted(ports: Ports) -> None:
    b = budget(max_count=2)
    one, two, three = (History(call_id=f"call-{n}").normalized().intent for n in range(3))
    assert await ports.budgets.remaining([b], one, T0) == 2
    held, exhausted = await ports.budgets.reserve([b], one, 1, T0)
    assert len(held) == 1 and exhausted is None
    assert await ports.budgets.holds(held[0], one.intent_id)
    assert (await ports.budgets.reserve([b], two, 1, T0))[1] is None
    assert await ports.budgets.reserve([b], three, 1, T0) == ([], b)
    assert await ports.budgets.remaining([b], three, T0) == 0
    assert await ports.budgets.remaining([b], one, T0) == 1  # its own hold not counted


async def test_a_reservation_again_holds_once(ports: Ports) -> None:
    b = budget(max_count=1)
    intent = History().normalized().intent
    first = await ports.budgets.reserve([b], intent, 1, T0)
    assert await ports.budgets.reserve([b], intent, 1, T0) == first


async def test_given_back_frees_the_place_and_consumed_keeps_it(ports: Ports) -> None:
    b = budget(max_count=1)
    one, two = (History(call_id=f"call-{n}").normalized().intent for n in range(2))
    held, _ = await ports.budgets.reserve([b], one, 1, T0)
    await ports.budgets.settle(held, one.intent_id, consumed=False)
    assert not await ports.budgets.holds(held[0], one.intent_id)
    assert await ports.budgets.remaining_for([b], tenant="tenant-a", actor="user-42", run_id="run-1",
                                             capability="case.add_note", now=T0) == 1
    held, _ = await ports.budgets.reserve([b], two, 1, T0)
    await ports.budgets.settle(held, two.intent_id, consumed=True)
    assert not await ports.budgets.holds(held[0], two.intent_id)
    assert await ports.budgets.remaining([b], one, T0) == 0


async def test_an_in_flight_cap_admits_until_full_and_again_after_a_release(ports: Ports) -> None:
    tenant = f"t-{random_id()}"
    cap = [Limit(name="flight", scope="tenant", max_in_flight=1)]
    first = await ports.limits.admit(cap, tenant=tenant, actor="a", run_id="r", intent_id="i1")
    assert first.refused is None and first.holds == tuple(ports.limits.keys(
        cap, tenant=tenant, actor="a", run_id="r"))
    again = await ports.limits.admit(cap, tenant=tenant, actor="a", run_id="r", intent_id="i1")
    assert again.refused is None  # a redelivered candidate holds its one place
    refused = await ports.limits.admit(cap, tenant=tenant, actor="a", run_id="r", intent_id="i2")
    assert refused.refused is not None and refused.refused.reason == "rate.in-flight"
    await ports.limits.release(first.holds, "i1")
    assert (await ports.limits.admit(cap, tenant=tenant, actor="a", run_id="r", intent_id="i2")).refused is None


async def test_a_rate_refuses_past_its_burst(ports: Ports) -> None:
    tenant = f"t-{random_id()}"
    rate = [Limit(name="rate", scope="actor", per_s=0.001, burst=1)]
    assert (await ports.limits.admit(rate, tenant=tenant, actor="a", run_id="r", intent_id="i1")).refused is None
    refused = await ports.limits.admit(rate, tenant=tenant, actor="a", run_id="r", intent_id="i2")
    assert refused.refused is not None and refused.refused.reason == "rate.limited"
    assert ports.limits.over_rate(rate, tenant=tenant, actor="a", run_id="r", intent_id="i3") is not None
    assert ports.limits.keys(rate, tenant=tenant, actor="a", run_id="r") == []
