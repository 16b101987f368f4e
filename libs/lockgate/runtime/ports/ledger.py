"""The budget and limit ledgers: an intent's share of every budget, a candidate's place in flight.

``Budgets`` is what policy reserves and settles and the final gate reads; ``Limits`` is what
intake admits candidates under. Both keep counters in the ``LG_BUDGETS`` bucket, changed only
by compare-and-set (``lockgate.authz.ledger`` has the loops: ``KvBudgets`` and ``LimitLedger``).
The fakes apply the same pure changes (``lockgate.authz.budgets``, ``lockgate.authz.limits``)
to a dict.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Protocol

from nats.js.errors import KeyNotFoundError

from lockgate.authz import budgets as counting
from lockgate.authz import limits as limiting
from lockgate.authz.budgets import NO_LIMIT, Counter, scope_value
from lockgate.authz.config import Budget, Limit
from lockgate.authz.ledger import Admission, BudgetContention, BudgetLedger, LimitLedger
from lockgate.authz.limits import FloodState, Refusal, flood_key, is_flood_key
from lockgate.intent.aggregate import EffectIntent

__all__ = ["Admission", "BudgetContention", "Budgets", "KvBudgets", "LimitLedger", "Limits",
           "MemoryBudgets", "MemoryLimits"]


class Budgets(Protocol):
    """Every budget's counters: reserved by policy, settled from the record, read by the gate.

    A counter that keeps changing under a compare-and-set raises ``BudgetContention``
    (retryable); a broker that does not answer raises ``nats.errors.Error``.
    """

    async def remaining(self, budgets: Sequence[Budget], intent: EffectIntent, now: datetime) -> int:
        """The least any budget counting this intent still admits (its own hold not counted)."""
        ...

    async def remaining_for(
        self, budgets: Sequence[Budget], *, tenant: str, actor: str, run_id: str, capability: str,
        now: datetime, exclude: str = "",
    ) -> int:
        """The least any budget counting ``capability`` for this actor and run still admits."""
        ...

    async def reserve(
        self, budgets: Sequence[Budget], intent: EffectIntent, cost: int, now: datetime
    ) -> tuple[list[str], Budget | None]:
        """Hold this intent's share everywhere or nowhere: the keys held, or the budget exhausted.

        Raises:
            BudgetContention: a counter kept changing.
        """
        ...

    async def settle(self, held: Sequence[str], intent_id: str, *, consumed: bool) -> None:
        """Consume (the effect happened) or give back (it did not) this intent's holds.

        Raises:
            BudgetContention: a counter kept changing.
        """
        ...

    async def holds(self, key: str, intent_id: str) -> bool:
        """True while ``intent_id``'s hold on the counter ``key`` is in place."""
        ...


class KvBudgets(BudgetLedger):
    """``Budgets`` over the ``LG_BUDGETS`` bucket (``BudgetLedger``'s compare-and-set)."""

    async def holds(self, key: str, intent_id: str) -> bool:
        """True while ``intent_id``'s hold on the counter ``key`` is in place."""
        try:
            entry = await self._kv.get(key)
        except KeyNotFoundError:
            return False
        # The hold is the intent id as a key of the counter's JSON: no decode needed.
        return intent_id.encode() in (entry.value or b"")


class MemoryBudgets:
    """The fake ``Budgets``: counters in a dict, changed by the same rules."""

    def __init__(self) -> None:
        #: Every counter by key, as the bucket would hold it.
        self.counters: dict[str, Counter] = {}

    async def remaining(self, budgets: Sequence[Budget], intent: EffectIntent, now: datetime) -> int:
        """The least any budget counting this intent still admits (its own hold not counted)."""
        return await self.remaining_for(budgets, tenant=intent.tenant, actor=intent.actor,
                                        run_id=intent.run_id, capability=intent.tool, now=now,
                                        exclude=intent.intent_id)

    async def remaining_for(
        self, budgets: Sequence[Budget], *, tenant: str, actor: str, run_id: str, capability: str,
        now: datetime, exclude: str = "",
    ) -> int:
        """The least any budget counting ``capability`` for this actor and run still admits."""
        least = NO_LIMIT
        for budget in budgets:
            if not budget.applies_to(capability):
                continue
            scope = scope_value(budget, tenant=tenant, actor=actor, run_id=run_id, capability=capability)
            for key in counting.keys(budget, scope, now):
                least = min(least, counting.remaining(self.counters.get(key, Counter()), budget, key,
                                                      exclude=exclude))
        return least

    async def reserve(
        self, budgets: Sequence[Budget], intent: EffectIntent, cost: int, now: datetime
    ) -> tuple[list[str], Budget | None]:
        """Hold this intent's share everywhere or nowhere."""
        held: list[str] = []
        for budget in budgets:
            if not budget.applies_to(intent.tool):
                continue
            scope = scope_value(budget, tenant=intent.tenant, actor=intent.actor,
                                run_id=intent.run_id, capability=intent.tool)
            for key in counting.keys(budget, scope, now):
                changed = counting.reserve(self.counters.get(key, Counter()), budget, key,
                                           intent.intent_id, cost)
                if changed is None:
                    await self.settle(held, intent.intent_id, consumed=False)
                    return [], budget
                self.counters[key] = changed
                held.append(key)
        return held, None

    async def settle(self, held: Sequence[str], intent_id: str, *, consumed: bool) -> None:
        """Consume or give back this intent's holds."""
        for key in held:
            if key in self.counters:
                self.counters[key] = counting.settle(self.counters[key], intent_id, consumed=consumed)

    async def holds(self, key: str, intent_id: str) -> bool:
        """True while ``intent_id``'s hold on the counter ``key`` is in place."""
        return intent_id in self.counters.get(key, Counter()).holds


class Limits(Protocol):
    """Candidates' places under a tenant's flood limits (intake's ledger).

    A counter that keeps changing raises ``BudgetContention`` (retryable); a broker that
    does not answer raises ``nats.errors.Error``.
    """

    async def admit(
        self, limits: Sequence[Limit], *, tenant: str, actor: str, run_id: str, intent_id: str,
    ) -> Admission:
        """Admit a candidate under every limit or under none: the holds taken, or the refusal."""
        ...

    def over_rate(
        self, limits: Sequence[Limit], *, tenant: str, actor: str, run_id: str, intent_id: str,
    ) -> Refusal | None:
        """The refusal of a rate that the last state this process saw gives (``None``: ask)."""
        ...

    async def release(self, keys: Sequence[str], intent_id: str) -> None:
        """Give back this intent's places."""
        ...

    def keys(self, limits: Sequence[Limit], *, tenant: str, actor: str, run_id: str) -> list[str]:
        """The keys a candidate of this scope would hold a place in."""
        ...


class MemoryLimits:
    """The fake ``Limits``: one ``FloodState`` per tenant in a dict, changed by the same rules."""

    def __init__(self, clock_s: Callable[[], float] = time.time) -> None:
        self._clock_s = clock_s
        #: Every tenant's counter by key, as the bucket would hold it.
        self.states: dict[str, FloodState] = {}

    async def admit(
        self, limits: Sequence[Limit], *, tenant: str, actor: str, run_id: str, intent_id: str,
    ) -> Admission:
        """Admit a candidate under every limit or under none."""
        key = flood_key(tenant)
        changed = limiting.admit(self.states.get(key, FloodState()), limits, actor=actor,
                                 run_id=run_id, intent_id=intent_id, now_s=self._clock_s())
        if isinstance(changed, Refusal):
            return Admission((), changed)
        self.states[key] = changed
        return Admission((key,) if any(lim.max_in_flight is not None for lim in limits) else ())

    def over_rate(
        self, limits: Sequence[Limit], *, tenant: str, actor: str, run_id: str, intent_id: str,
    ) -> Refusal | None:
        """The refusal of a rate the counter gives now."""
        state = self.states.get(flood_key(tenant))
        if state is None:
            return None
        return limiting.over_rate(state, limits, actor=actor, run_id=run_id, intent_id=intent_id,
                                  now_s=self._clock_s())

    async def release(self, keys: Sequence[str], intent_id: str) -> None:
        """Give back this intent's places."""
        for key in keys:
            if is_flood_key(key) and key in self.states:
                self.states[key] = limiting.release(self.states[key], intent_id)

    def keys(self, limits: Sequence[Limit], *, tenant: str, actor: str, run_id: str) -> list[str]:
        """The keys a candidate of this scope would hold a place in."""
        return [flood_key(tenant)] if any(lim.max_in_flight is not None for lim in limits) else []
