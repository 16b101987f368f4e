"""Budget counters in the ``LG_BUDGETS`` bucket, changed only by compare-and-set."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

import msgspec
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from lockgate.authz.budgets import NO_LIMIT, Counter, keys, remaining, reserve, scope_value, settle
from lockgate.authz.config import Budget
from lockgate.core.errors import TransientError
from lockgate.intent.aggregate import EffectIntent

_counter = msgspec.json.Decoder(Counter)
#: Compare-and-set attempts before the decision is retried as a whole.
CAS_TRIES = 8


class BudgetContention(TransientError):
    """A counter kept changing under us; the decision is tried again."""


class BudgetLedger:
    """Reserves, consumes and releases an intent's share of every budget that counts it."""

    def __init__(self, kv: KeyValue) -> None:
        self._kv = kv

    async def _change(self, key: str, change: Callable[[Counter], Counter | None]) -> bool:
        """Apply ``change`` to one counter atomically; False when it refused (exhausted)."""
        for _ in range(CAS_TRIES):
            try:
                entry = await self._kv.get(key)
                current, revision = _counter.decode(entry.value or b"{}"), entry.revision
            except KeyNotFoundError:
                current, revision = Counter(), None
            changed = change(current)
            if changed is None:
                return False
            if changed == current:
                return True
            value = msgspec.json.encode(changed)
            try:
                if revision is None:
                    await self._kv.create(key, value)
                else:
                    await self._kv.update(key, value, last=revision)
                return True
            except KeyWrongLastSequenceError:
                continue
        raise BudgetContention(f"budget counter {key} kept changing", code="budget.contention")

    async def reserve(
        self, budgets: Sequence[Budget], intent: EffectIntent, cost: int, now: datetime
    ) -> tuple[list[str], Budget | None]:
        """Hold this intent's share everywhere, or nowhere: the keys held, or the budget exhausted."""
        held: list[str] = []
        for budget, key in self._keys(budgets, intent, now):
            if await self._change(key, _reserving(budget, key, intent.intent_id, cost)):
                held.append(key)
                continue
            await self.settle(held, intent.intent_id, consumed=False)
            return [], budget
        return held, None

    async def remaining(self, budgets: Sequence[Budget], intent: EffectIntent, now: datetime) -> int:
        """The least any budget counting this intent still admits (its own hold not counted)."""
        least = NO_LIMIT
        for budget, key in self._keys(budgets, intent, now):
            try:
                entry = await self._kv.get(key)
                counter = _counter.decode(entry.value or b"{}")
            except KeyNotFoundError:
                counter = Counter()
            least = min(least, remaining(counter, budget, key, exclude=intent.intent_id))
        return least

    def _keys(self, budgets: Sequence[Budget], intent: EffectIntent, now: datetime) -> list[tuple[Budget, str]]:
        out = []
        for budget in budgets:
            if budget.applies_to(intent.tool):
                scope = scope_value(budget, tenant=intent.tenant, actor=intent.actor,
                                    run_id=intent.run_id, capability=intent.tool)
                out += [(budget, key) for key in keys(budget, scope, now)]
        return out

    async def settle(self, held: Sequence[str], intent_id: str, *, consumed: bool) -> None:
        """Consume (the effect happened) or release (it did not) this intent's holds."""
        for key in held:
            await self._change(key, lambda c: settle(c, intent_id, consumed=consumed))


def _reserving(budget: Budget, key: str, intent_id: str, cost: int) -> Callable[[Counter], Counter | None]:
    return lambda counter: reserve(counter, budget, key, intent_id, cost)
