"""The budget and limit ledgers: an intent's share of every budget, a candidate's place in flight.

``Budgets`` is what policy reserves and settles and the final gate reads; ``Limits`` is what
intake admits candidates under. Both keep counters in the ``LG_BUDGETS`` bucket, changed only
by compare-and-set (``KvBudgets`` and ``LimitLedger``). The counters' arithmetic is pure and
the domain's (``lockgate.authz.budgets``, ``lockgate.authz.limits``): the bucket's
implementations and the fakes, which keep the counters in a dict, apply the same changes.
"""

from __future__ import annotations

import asyncio
import functools
import random
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, TypeVar

import msgspec
from nats.js import JetStreamContext
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from lockgate.authz import budgets as counting
from lockgate.authz import limits as limiting
from lockgate.authz.budgets import NO_LIMIT, Counter, scope_value
from lockgate.authz.config import Budget, Limit
from lockgate.authz.limits import FloodState, Refusal, flood_key, is_flood_key
from lockgate.core.bounded import KeyedLocks, keep
from lockgate.core.errors import TransientError
from lockgate.intent.aggregate import EffectIntent
from lockgate.runtime.ports.buckets import leader_entry
from lockgate.runtime.streams import BUDGETS_BUCKET

__all__ = ["Admission", "BudgetContention", "Budgets", "KvBudgets", "LimitLedger", "Limits",
           "MemoryBudgets", "MemoryLimits"]

_counter = msgspec.json.Decoder(Counter)
#: Compare-and-set attempts before the decision is retried as a whole.
CAS_TRIES = 8


S = TypeVar("S", bound=msgspec.Struct)


async def _read(
    kv: KeyValue, key: str, decoder: msgspec.json.Decoder[S], empty: S,
    leader: JetStreamContext | None = None,
) -> tuple[S, int | None]:
    """A counter and its revision (``empty`` and ``None`` when the key has none yet).

    With ``leader``, as the bucket's leader holds it (``lockgate.runtime.ports.buckets``):
    for what is believed without a write (a refusal, nothing to change), which a
    replica behind the leader would otherwise answer from an older counter.
    """
    if leader is not None:
        found = await leader_entry(leader, BUDGETS_BUCKET, key)
        if found is None:
            return empty, None
        return (decoder.decode(found.value) if found.value else empty), found.revision
    try:
        entry = await kv.get(key)
    except KeyNotFoundError as exc:
        # A delete marker (``KeyDeletedError`` arrives as this, with the marker's entry):
        # the next write names the marker's revision.
        marker = getattr(exc, "entry", None)
        return empty, (int(marker.revision) if marker is not None and marker.revision else None)
    return decoder.decode(entry.value or b"{}"), entry.revision


async def _write(kv: KeyValue, key: str, value: msgspec.Struct, revision: int | None) -> int:
    """Store ``value`` only if the key is still at ``revision`` (absent when ``None``).

    Returns the key's new revision.

    Raises:
        KeyWrongLastSequenceError: another writer got in between.
    """
    data = msgspec.json.encode(value)
    # Absent means no message on the key's subject at all (``last=0``): one round trip
    # either way. ``KeyValue.create`` would follow a refusal with a get of its own.
    return int(await kv.update(key, data, last=revision or 0))


class BudgetContention(TransientError):
    """A counter kept changing under us; the decision is tried again."""


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


class _Counted(ABC):
    """A ``Budgets`` whatever keeps its counters: which counters count an intent, what they
    still admit, and reserving everywhere or nowhere, written once for the bucket and the fake.

    A subclass says only where the counters are: how one is read (``_counter_at``) and how one
    is changed atomically (``_change``).
    """

    @abstractmethod
    async def _counter_at(self, key: str) -> Counter:
        """The counter ``key`` as it stands (an empty one when there is none)."""

    @abstractmethod
    async def _change(self, key: str, change: Callable[[Counter], Counter | None]) -> bool:
        """Apply ``change`` to one counter atomically; False when it refused (exhausted).

        Raises:
            BudgetContention: the counter kept changing.
        """

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
                counter = await self._counter_at(key)
                least = min(least, counting.remaining(counter, budget, key, exclude=exclude))
        return least

    def _keys(self, budgets: Sequence[Budget], intent: EffectIntent, now: datetime) -> list[tuple[Budget, str]]:
        out = []
        for budget in budgets:
            if budget.applies_to(intent.tool):
                scope = scope_value(budget, tenant=intent.tenant, actor=intent.actor,
                                    run_id=intent.run_id, capability=intent.tool)
                out += [(budget, key) for key in counting.keys(budget, scope, now)]
        return out

    async def settle(self, held: Sequence[str], intent_id: str, *, consumed: bool) -> None:
        """Consume (the effect happened) or release (it did not) this intent's holds."""
        for key in held:
            await self._change(key, lambda c: counting.settle(c, intent_id, consumed=consumed))


def _reserving(budget: Budget, key: str, intent_id: str, cost: int) -> Callable[[Counter], Counter | None]:
    return lambda counter: counting.reserve(counter, budget, key, intent_id, cost)


class KvBudgets(_Counted):
    """``Budgets`` over the ``LG_BUDGETS`` bucket: an intent's share of every budget that
    counts it, reserved, consumed and released by compare-and-set."""

    def __init__(self, kv: KeyValue, js: JetStreamContext | None = None) -> None:
        """``js``: where the bucket's leader is asked before an exhausted budget or a
        change with nothing to change is believed (``None``: the bucket is not replicated)."""
        self._kv = kv
        self._js = js

    async def _change(self, key: str, change: Callable[[Counter], Counter | None]) -> bool:
        """Apply ``change`` to one counter atomically; False when it refused (exhausted).

        A read says what to write, and the compare-and-set checks it; what is decided
        without a write (exhausted, or already so: a hold already released) is asked of
        the bucket's leader first, and so is the counter after another writer got in.
        """
        leader: JetStreamContext | None = None
        for _ in range(CAS_TRIES):
            current, revision = await _read(self._kv, key, _counter, Counter(), leader)
            believed = leader is not None or self._js is None
            changed = change(current)
            if changed is None or changed == current:
                if believed:
                    return changed is not None
                leader = self._js
                continue
            try:
                await _write(self._kv, key, changed, revision)
                return True
            except KeyWrongLastSequenceError:
                leader = self._js
                continue
        raise BudgetContention(f"budget counter {key} kept changing", code="budget.contention")

    async def _counter_at(self, key: str) -> Counter:
        try:
            entry = await self._kv.get(key)
        except KeyNotFoundError:
            return Counter()
        return _counter.decode(entry.value or b"{}")

    async def holds(self, key: str, intent_id: str) -> bool:
        """True while ``intent_id``'s hold on the counter ``key`` is in place."""
        try:
            entry = await self._kv.get(key)
        except KeyNotFoundError:
            return False
        # The hold is the intent id as a key of the counter's JSON: no decode needed.
        return intent_id.encode() in (entry.value or b"")


class MemoryBudgets(_Counted):
    """The fake ``Budgets``: counters in a dict, changed by the same rules."""

    def __init__(self) -> None:
        #: Every counter by key, as the bucket would hold it.
        self.counters: dict[str, Counter] = {}

    async def _counter_at(self, key: str) -> Counter:
        return self.counters.get(key, Counter())

    async def _change(self, key: str, change: Callable[[Counter], Counter | None]) -> bool:
        current = self.counters.get(key, Counter())
        changed = change(current)
        if changed is None:
            return False
        if changed != current:  # as the bucket: nothing to change writes nothing
            self.counters[key] = changed
        return True

    async def holds(self, key: str, intent_id: str) -> bool:
        """True while ``intent_id``'s hold on the counter ``key`` is in place."""
        return intent_id in self.counters.get(key, Counter()).holds


@dataclass(frozen=True)
class Admission:
    """What intake's limits made of a candidate: the holds it took, or the refusal."""

    holds: tuple[str, ...] = ()
    refused: Refusal | None = None


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


_flood_state = msgspec.json.Decoder(FloodState)
#: Compare-and-set attempts on a limit counter before the candidate is tried again later.
LIMIT_CAS_TRIES = 32
#: Limit keys a process keeps a lock and a last-seen state for (one a tenant).
KEYS_KEPT = 10_000


_Change = Callable[[FloodState], FloodState | Refusal]


class LimitLedger:
    """Intake's flood limits in ``LG_BUDGETS``, changed only by compare-and-set.

    One key per tenant (``lockgate.authz.limits.flood_key``). Round trips: one write per candidate
    admitted, starting from the state this process last wrote (or, for a key it never
    saw, from none: a create); a read and a write more when another writer (a replica)
    got in between; none for a candidate over a rate: a rate's arrival time only ever
    grows, so a refusal computed from the last state this process saw is the refusal the
    bucket's state would give. Within one process the updates of a key are serialized,
    so a process never races itself; replicas race only each other. Under load the
    updates that queue up behind a key's write go in the next write together, so a
    tenant's counter costs at most two round trips per candidate (its admission and its
    release), whatever its limits.

    A release is written at once, not held back for the next admission's write to carry
    it: the model is answered only after its intent's place is given back (so that its
    next call is never refused for a place it no longer holds), and a release held back
    was measured to add up to the whole wait (10 ms) to the answer at 20 candidates/s.
    """

    def __init__(
        self, kv: KeyValue, clock_s: Callable[[], float] = time.time, js: JetStreamContext | None = None,
    ) -> None:
        """``js``: where the bucket's leader is asked before a refusal or a change with
        nothing to change is believed (``None``: the bucket is not replicated)."""
        self._kv = kv
        self._clock_s = clock_s
        self._js = js
        self._lock = KeyedLocks(KEYS_KEPT)
        #: The last state and revision seen of each key: where the next compare-and-set
        #: starts, and what refuses a candidate over a rate without a round trip.
        self._seen: OrderedDict[str, tuple[FloodState, int | None]] = OrderedDict()
        #: Changes waiting for the write of their key in flight (``_commit``).
        self._pending: dict[str, list[tuple[_Change, asyncio.Future[Refusal | None]]]] = {}

    def _saw(self, key: str, state: FloodState, revision: int | None) -> None:
        keep(self._seen, key, (state, revision), KEYS_KEPT)

    async def _change(self, key: str, change: _Change) -> Refusal | None:
        """Apply ``change`` to the key's counter with compare-and-set; the refusal, if any.

        Changes of one key that arrive while a write of it is in flight wait and are then
        written together (a group commit): the counter is a hot key under load (every
        candidate of a tenant passes it), and one compare-and-set then settles a whole
        batch. A successful write proves the state it started from was current, so every
        answer computed in the batch, refusals included, is exact.
        """
        done: asyncio.Future[Refusal | None] = asyncio.get_running_loop().create_future()
        self._pending.setdefault(key, []).append((change, done))
        try:
            async with self._lock(key):
                if not done.done():
                    await self._commit(key)
        except BaseException:
            if not done.done():
                done.cancel()
            elif not done.cancelled():
                done.exception()  # answered meanwhile; its caller is gone, so it is read here
            raise
        return done.result()

    async def _commit(self, key: str) -> None:
        """Write every change waiting on ``key`` in one compare-and-set, and answer each."""
        batch = self._pending.pop(key, [])
        batch = [(change, done) for change, done in batch if not done.done()]
        try:
            answers = await self._write_all(key, [change for change, _ in batch])
        except Exception as exc:  # the batch's failure: each change's caller sees it
            for _, done in batch:
                if not done.done():
                    done.set_exception(exc)
            return
        except BaseException:
            # Cancelled: the others' changes go to the next writer. Should this write have
            # landed all the same, that writer's compare-and-set fails and it starts again
            # from the bucket, where a hold is taken once however often it is applied.
            self._pending.setdefault(key, [])[:0] = [(c, d) for c, d in batch if not d.done()]
            raise
        for (_, done), answer in zip(batch, answers, strict=True):
            if not done.done():
                done.set_result(answer)

    async def _write_all(self, key: str, changes: Sequence[_Change]) -> list[Refusal | None]:
        """Apply ``changes`` in order to the key's counter; one compare-and-set for all.

        The first try starts from the state and revision this process last saw (its own
        last write, usually): when nobody wrote the key since, that is one round trip.
        A key this process never saw is first taken to be absent (a new tenant's): the
        write is then a create, which fails when the key exists after all, and only
        then is the bucket read. What a state that may be old or assumed says alone is
        never believed: refusals, or nothing to change, are asked of the bucket first.
        """
        seen = self._seen.get(key)
        if seen is None:
            seen = (FloodState(), None)
        leader: JetStreamContext | None = None
        for attempt in range(LIMIT_CAS_TRIES):
            if seen is not None:
                (current, revision), fresh, read, seen = seen, False, False, None
            else:
                if attempt:
                    # Replicas that keep meeting on a hot key (a tenant's) take turns.
                    await asyncio.sleep(random.uniform(0, 0.001 * attempt))
                current, revision = await _read(self._kv, key, _flood_state, FloodState(), leader)
                # A direct get may come from a replica behind the leader.
                fresh, read = leader is not None or self._js is None, True
                self._saw(key, current, revision)
            state = current
            answers: list[Refusal | None] = []
            for change in changes:
                changed = change(state)
                if isinstance(changed, Refusal):
                    answers.append(changed)
                else:
                    answers.append(None)
                    state = changed
            if state == current:
                if fresh:
                    return answers
                # What this process saw last, then a direct get, then the leader.
                leader = self._js if read else None
                continue
            try:
                self._saw(key, state, await _write(self._kv, key, state, revision))
                return answers
            except KeyWrongLastSequenceError:
                leader = self._js
                continue
        raise BudgetContention(f"limit counter {key} kept changing", code="budget.contention")

    async def admit(
        self, limits: Sequence[Limit], *, tenant: str, actor: str, run_id: str, intent_id: str,
    ) -> Admission:
        """Admit a candidate under every limit, or under none: the holds taken, or the refusal."""
        early = self.over_rate(limits, tenant=tenant, actor=actor, run_id=run_id, intent_id=intent_id)
        if early is not None:
            return Admission((), early)  # over a rate: refused without a round trip
        key = flood_key(tenant)
        refused = await self._change(key, _admitting(tuple(limits), actor, run_id, intent_id, self._clock_s))
        if refused is not None:
            return Admission((), refused)
        return Admission((key,) if any(lim.max_in_flight is not None for lim in limits) else ())

    def over_rate(
        self, limits: Sequence[Limit], *, tenant: str, actor: str, run_id: str, intent_id: str,
    ) -> Refusal | None:
        """The refusal the last state this process saw gives, without asking the bucket.

        Exact for a rate (``limits.over_rate``). Never for an in-flight cap: a hold may
        have been released a moment ago, and the next candidate is then admitted at once.
        ``None`` says nothing (ask the bucket).
        """
        seen = self._seen.get(flood_key(tenant))
        if seen is None:
            return None
        return limiting.over_rate(seen[0], limits, actor=actor, run_id=run_id, intent_id=intent_id,
                         now_s=self._clock_s())

    async def release(self, keys: Sequence[str], intent_id: str) -> None:
        """Give back this intent's places (it ended, or was not admitted after all).

        Keys of the counters before one per tenant are passed over: nothing counts them.
        """
        await asyncio.gather(*(self._change(key, functools.partial(limiting.release, intent_id=intent_id))
                               for key in keys if is_flood_key(key)))

    def keys(self, limits: Sequence[Limit], *, tenant: str, actor: str, run_id: str) -> list[str]:
        """The keys a candidate of this scope would hold a place in."""
        return [flood_key(tenant)] if any(lim.max_in_flight is not None for lim in limits) else []


def _admitting(
    limits: tuple[Limit, ...], actor: str, run_id: str, intent_id: str, clock_s: Callable[[], float],
) -> _Change:
    """The admission of ``intent_id``, dated when it is applied to the counter, not when it
    was asked for: a write that waited (behind a key's write in flight, a leader election)
    would otherwise arrive with a time before the arrival times other writers set
    meanwhile, and be refused as early by as long as it waited."""
    return lambda state: limiting.admit(state, limits, actor=actor, run_id=run_id, intent_id=intent_id,
                               now_s=clock_s())


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
