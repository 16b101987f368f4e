"""Flood limits as pure arithmetic on one counter per limit and scope.

One key of ``LG_BUDGETS`` holds both halves of a limit for one scope, so a candidate
costs one compare-and-set per limit (see ``ledger.LimitLedger``):

- the rate, as a generic cell rate (GCRA): ``tat`` is the theoretical arrival time of
  the next candidate; a candidate is admitted when it would not be more than ``burst``
  intervals early. No window edges (a fixed window lets twice the rate through at its
  boundary), and the wait until the next admission falls out exactly: ``retry_after_s``.
- the in-flight cap, as holds: intent id → when it was taken. A hold is released from
  the record when the intent ends (intake's response consumer), and one older than the
  limit's ``hold_ttl_s`` stops counting, in case its release was lost.

Times are wall-clock seconds (replicas share the counter), passed in.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import msgspec

from lockgate.authz.config import Limit

_NOT_KEY = re.compile(r"[^-_=a-zA-Z0-9]")
#: Key prefix of limit counters; ``=`` never occurs in a budget's key (budget names are
#: ``[A-Za-z0-9_-]``), so the two never meet in the bucket.
PREFIX = "limit="


class LimitState(msgspec.Struct, frozen=True):
    """One limit's counter for one scope."""

    tat: float = 0.0
    holds: dict[str, float] = msgspec.field(default_factory=dict)


@dataclass(frozen=True)
class Refusal:
    """Why a candidate was not admitted, and after how long trying again may succeed."""

    limit: Limit
    reason: str
    retry_after_s: float

    @property
    def detail(self) -> str:
        """For operators: which limit, how it is set."""
        parts = [f"{self.limit.name} per {self.limit.scope}"]
        if self.reason == "rate.limited":
            parts.append(f"{self.limit.per_s:g}/s, burst {burst(self.limit)}")
        else:
            parts.append(f"{self.limit.max_in_flight} in flight")
        return ": ".join(parts)


def burst(limit: Limit) -> int:
    """How many candidates may come at once above the rate."""
    if limit.burst is not None:
        return limit.burst
    return max(1, math.ceil(limit.per_s or 1))


def scope_value(limit: Limit, *, tenant: str, actor: str, run_id: str) -> str:
    """Who a limit counts for this candidate: the actor, the run or the tenant."""
    return {"actor": f"{tenant}/{actor}", "run": f"{tenant}/{run_id}", "tenant": tenant}[limit.scope]


def limit_key(limit: Limit, scope: str) -> str:
    """The counter of ``limit`` for ``scope`` in ``LG_BUDGETS``."""
    return f"{PREFIX}{limit.name}.{_NOT_KEY.sub('_', scope)}"


def admit(state: LimitState, limit: Limit, intent_id: str, now_s: float) -> LimitState | Refusal:
    """The counter with this candidate admitted, or why it is not.

    Admitting an intent that already holds a place changes nothing (a redelivered
    candidate), so it is never counted twice against the cap nor the rate.
    """
    holds = {k: t for k, t in state.holds.items() if now_s - t < limit.hold_ttl_s}
    if intent_id in holds:
        return LimitState(state.tat, holds)
    if limit.max_in_flight is not None and len(holds) >= limit.max_in_flight:
        return Refusal(limit, "rate.in-flight", limit.retry_after_s)
    tat = state.tat
    if limit.per_s is not None:
        interval = 1.0 / limit.per_s
        tat = max(state.tat, now_s) + interval
        early = tat - now_s - burst(limit) * interval
        if early > 1e-9:
            return Refusal(limit, "rate.limited", round(early, 3))
    if limit.max_in_flight is not None:
        holds[intent_id] = now_s
    return LimitState(tat, holds)


def release(state: LimitState, intent_id: str) -> LimitState:
    """The counter with this intent's hold released (the intent ended)."""
    if intent_id not in state.holds:
        return state
    return LimitState(state.tat, {k: t for k, t in state.holds.items() if k != intent_id})
