"""Flood limits as pure arithmetic on one counter per tenant.

Every scope a limit can count (one run, one actor, the tenant) lies within one tenant, so
one key of ``LG_BUDGETS`` per tenant holds every limit's state for every scope of it, and a
candidate is admitted under all its limits, or under none, with one compare-and-set (see
``lockgate.runtime.ports.ledger.LimitLedger``); its in-flight place is given back with one more:

- rates, as a generic cell rate (GCRA) per limit and scope: ``rates[<limit>/<scope>]`` is
  the theoretical arrival time of the next candidate; a candidate is admitted when it would
  not be more than ``burst`` intervals early. No window edges (a fixed window lets twice
  the rate through at its boundary), and the wait until the next admission falls out
  exactly: ``retry_after_s``. A rate whose arrival time has passed is the same as none, so
  it is dropped: the counter keeps only the scopes that sent something lately.
- in-flight caps, as holds: intent id → when it was taken, and the actor and run it
  counts for. One hold counts under every cap whose scope it falls in. A hold is released
  from the record when the intent ends (intake's response consumer), and one older than a
  limit's ``hold_ttl_s`` stops counting under it, in case its release was lost.

Admission is atomic: a candidate refused by one limit costs it nothing under any other,
before or after it in the bundle's order.

Times are wall-clock seconds (replicas share the counter), passed in.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import msgspec

from lockgate.authz.config import Limit

_NOT_KEY = re.compile(r"[^-_=a-zA-Z0-9]")
#: Key prefix of the limit counters; ``=`` never occurs in a budget's key (budget names are
#: ``[A-Za-z0-9_-]``), so the two never meet in the bucket. (Counters of one key per limit
#: and scope, named ``limit=<limit>.<scope>``, came before; nothing reads them now.)
PREFIX = "limits="


class Hold(msgspec.Struct, frozen=True, array_like=True):
    """One intent's place in flight: when it was taken, and whose it is."""

    at: float
    actor: str
    run: str


class FloodState(msgspec.Struct, frozen=True):
    """One tenant's counter: every limit's rate per scope, and every place in flight."""

    rates: dict[str, float] = msgspec.field(default_factory=dict)
    holds: dict[str, Hold] = msgspec.field(default_factory=dict)


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


def flood_key(tenant: str) -> str:
    """The counter of every limit of ``tenant`` in ``LG_BUDGETS``."""
    return f"{PREFIX}{_NOT_KEY.sub('_', tenant)}"


def is_flood_key(key: str) -> bool:
    """Whether ``key`` is a tenant's counter (and not one of the per-limit keys before it)."""
    return key.startswith(PREFIX)


def rate_key(limit: Limit, *, actor: str, run_id: str) -> str:
    """Where ``limit``'s rate for this scope is kept in its tenant's counter."""
    scope = {"actor": actor, "run": run_id, "tenant": ""}[limit.scope]
    return f"{limit.name}/{scope}"


def _counts(limit: Limit, hold: Hold, *, actor: str, run_id: str) -> bool:
    """Whether ``hold`` takes a place in ``limit``'s scope for this actor and run."""
    if limit.scope == "tenant":
        return True
    return hold.actor == actor if limit.scope == "actor" else hold.run == run_id


@dataclass(frozen=True)
class _Places:
    """The places a tenant's counter holds, counted once for one candidate's scopes."""

    live: dict[str, Hold]
    ttl_s: float
    tenant: int
    actor: int
    run: int

    @classmethod
    def count(cls, holds: dict[str, Hold], ttl_s: float, *, actor: str, run_id: str,
              now_s: float) -> _Places:
        """The holds younger than ``ttl_s`` (the longest any cap keeps one), and how many
        of them are this actor's and this run's: one pass, whatever the limits."""
        live: dict[str, Hold] = {}
        by_actor = by_run = 0
        for key, hold in holds.items():
            if now_s - hold.at < ttl_s:
                live[key] = hold
                by_actor += hold.actor == actor
                by_run += hold.run == run_id
        return cls(live, ttl_s, len(live), by_actor, by_run)

    def of(self, limit: Limit, *, actor: str, run_id: str, now_s: float) -> int:
        """Places taken in ``limit``'s scope."""
        if limit.hold_ttl_s < self.ttl_s:  # a cap that forgets sooner than another: count it alone
            return sum(1 for h in self.live.values()
                       if now_s - h.at < limit.hold_ttl_s and _counts(limit, h, actor=actor, run_id=run_id))
        return {"tenant": self.tenant, "actor": self.actor, "run": self.run}[limit.scope]


def _early(limit: Limit, rates: dict[str, float], key: str, now_s: float) -> tuple[float, float]:
    """The rate's next arrival time if this candidate is admitted, and how early it comes."""
    interval = 1.0 / (limit.per_s or 1.0)
    tat = max(rates.get(key, 0.0), now_s) + interval
    return tat, tat - now_s - burst(limit) * interval


def admit(
    state: FloodState, limits: Sequence[Limit], *, actor: str, run_id: str, intent_id: str,
    now_s: float,
) -> FloodState | Refusal:
    """The counter with this candidate admitted under every limit, or the first that refuses it.

    Admitting an intent that already holds a place changes nothing (a redelivered
    candidate), so it is never counted twice against a cap nor a rate.
    """
    if intent_id in state.holds:
        return state
    capped = [lim for lim in limits if lim.max_in_flight is not None]
    places = _Places.count(state.holds, max((lim.hold_ttl_s for lim in capped), default=0.0),
                           actor=actor, run_id=run_id, now_s=now_s)
    rates = {k: t for k, t in state.rates.items() if t > now_s}
    for limit in limits:
        if limit.max_in_flight is not None and \
                places.of(limit, actor=actor, run_id=run_id, now_s=now_s) >= limit.max_in_flight:
            return Refusal(limit, "rate.in-flight", limit.retry_after_s)
        if limit.per_s is not None:
            key = rate_key(limit, actor=actor, run_id=run_id)
            tat, early = _early(limit, rates, key, now_s)
            if early > 1e-9:
                return Refusal(limit, "rate.limited", round(early, 3))
            rates[key] = tat
    holds = places.live
    if capped:
        holds[intent_id] = Hold(now_s, actor, run_id)
    return FloodState(rates, holds)


def over_rate(
    state: FloodState, limits: Sequence[Limit], *, actor: str, run_id: str, intent_id: str,
    now_s: float,
) -> Refusal | None:
    """The first rate ``state`` refuses this candidate under, judging rates alone.

    Exact on any state the counter had: a rate's arrival time only ever grows, so what
    an earlier state refuses, the counter refuses now. (Not so for a cap: a place may
    have been given back since.)
    """
    if intent_id in state.holds:
        return None
    for limit in limits:
        if limit.per_s is not None:
            _, early = _early(limit, state.rates, rate_key(limit, actor=actor, run_id=run_id), now_s)
            if early > 1e-9:
                return Refusal(limit, "rate.limited", round(early, 3))
    return None


def release(state: FloodState, intent_id: str) -> FloodState:
    """The counter with this intent's place given back (the intent ended)."""
    if intent_id not in state.holds:
        return state
    return FloodState(state.rates, {k: h for k, h in state.holds.items() if k != intent_id})
