"""Budgets, quotas and concurrency caps as pure arithmetic on one counter each.

A counter lives under one key of the ``LG_BUDGETS`` bucket and is changed only with
compare-and-set, so several policy replicas agree. A decision *reserves* (a hold
counts at once); the intent's outcome later *consumes* the hold (the effect happened)
or *releases* it (it did not), so a denied, withdrawn or failed intent gives its
budget back and an uncertain one keeps it.
"""

from __future__ import annotations

import re
from datetime import datetime

import msgspec

from lockgate.authz.config import Budget

_NOT_KEY = re.compile(r"[^-_=a-zA-Z0-9]")
#: What ``remaining`` says when no budget counts an intent (Cedar's Long is 64-bit).
NO_LIMIT = 2**62


class Counter(msgspec.Struct, frozen=True):
    """One budget key: what was used (holds included) and the holds not yet settled."""

    count: int = 0
    cost: int = 0
    holds: dict[str, int] = msgspec.field(default_factory=dict)


def scope_value(budget: Budget, *, tenant: str, actor: str, run_id: str, capability: str) -> str:
    """Who a budget counts for this intent: the actor, the run, the capability or the tenant."""
    return {
        "actor": f"{tenant}/{actor}",
        "run": f"{tenant}/{run_id}",
        "capability": f"{tenant}/{capability}",
        "tenant": tenant,
    }[budget.scope]


def keys(budget: Budget, scope: str, now: datetime) -> list[str]:
    """The counters an intent touches: its window's, and the in-flight one for a cap."""
    base = f"{budget.name}.{_NOT_KEY.sub('_', scope)}"
    out = []
    if budget.window_s is not None and (budget.max_count is not None or budget.max_cost is not None):
        out.append(f"{base}.w{int(now.timestamp() // budget.window_s)}")
    if budget.max_in_flight is not None:
        out.append(f"{base}.inflight")
    return out


def reserve(counter: Counter, budget: Budget, key: str, intent_id: str, cost: int) -> Counter | None:
    """The counter with this intent's hold added, or ``None`` when that would exceed the budget."""
    if intent_id in counter.holds:
        return counter  # already reserved (a redelivered decision)
    if key.endswith(".inflight"):
        if budget.max_in_flight is not None and len(counter.holds) >= budget.max_in_flight:
            return None
        return Counter(counter.count, counter.cost, {**counter.holds, intent_id: cost})
    if budget.max_count is not None and counter.count + 1 > budget.max_count:
        return None
    if budget.max_cost is not None and counter.cost + cost > budget.max_cost:
        return None
    return Counter(counter.count + 1, counter.cost + cost, {**counter.holds, intent_id: cost})


def settle(counter: Counter, intent_id: str, *, consumed: bool) -> Counter:
    """The counter with this intent's hold settled: kept as used, or given back."""
    if intent_id not in counter.holds:
        return counter
    cost = counter.holds[intent_id]
    holds = {k: v for k, v in counter.holds.items() if k != intent_id}
    if consumed:
        return Counter(counter.count, counter.cost, holds)
    return Counter(max(0, counter.count - 1), max(0, counter.cost - cost), holds)


def remaining(counter: Counter, budget: Budget, key: str, *, exclude: str = "") -> int:
    """How many more intents this counter admits, not counting ``exclude``'s own hold."""
    own = counter.holds.get(exclude)
    count = counter.count - (1 if own is not None else 0)
    cost = counter.cost - (own or 0)
    if key.endswith(".inflight"):
        held = len(counter.holds) - (1 if own is not None else 0)
        return max(0, (budget.max_in_flight or NO_LIMIT) - held)
    left = [NO_LIMIT]
    if budget.max_count is not None:
        left.append(budget.max_count - count)
    if budget.max_cost is not None:
        left.append(budget.max_cost - cost)
    return max(0, min(left))
