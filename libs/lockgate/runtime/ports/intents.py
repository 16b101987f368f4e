"""The intent store port: decide on an intent and append, load it, record what was given up.

``IntentStore`` is what a handler changes and reads intents through. ``StoredIntents`` is its
one implementation, over any ``EventStore`` and this process's ``AggregateCache``: over the
JetStream store in a service, over ``MemoryEventStore`` in a unit test (``StoredIntents.memory``),
so a fake decides exactly as the real thing does (the cache, ``assume_new``, ``latest``,
``at_least``, the trigger: ``decide`` below says what each means).

Below the port, the mechanism: ``decide`` is the one way a service changes an intent (load
or recall from this process's cache, let a pure step decide, append what it decided with
the history's version as the expectation, run the step again on a conflict) and answers
with a ``Decision``; ``record_abandonment`` puts a message a consumer gave up on the record.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Generic, Protocol, TypeVar
from uuid import UUID

from lockgate.core.clock import Clock
from lockgate.core.ids import derived_id
from lockgate.eventstore.base import (
    AggregateHistory,
    ConcurrencyConflict,
    EventStore,
    EventStoreUnavailable,
    RecordedEvent,
    TenantLookup,
)
from lockgate.eventstore.memory import MemoryEventStore
from lockgate.intent.aggregate import EffectIntent, Event, Stamp
from lockgate.intent.cache import AggregateCache, Known
from lockgate.intent.codec import decode_event, encode_event, fold
from lockgate.intent.events import ProcessingAbandoned
from lockgate.intent.evolve import evolve
from lockgate.runtime import metrics
from lockgate.runtime.settlement import Abandonment

R = TypeVar("R")

__all__ = ["Decision", "IntentStore", "Step", "StepWith", "StoredIntents", "decide", "load_intent", "load_known"]


class IntentStore(Protocol):
    """Intents as a handler sees them: decided on, appended to, loaded.

    Every append names the version decided on; a conflict runs the step again on the fresh
    history (``ConcurrencyConflict`` once ``conflicts`` tries conflicted). A store that cannot
    answer raises ``EventStoreUnavailable`` (retryable).
    """

    async def decide(
        self, tenant: str, intent_id: str, step: Step, *, assume_new: bool = False,
        trigger: RecordedEvent | None = None, at_least: int = 0, latest: bool = False,
        conflicts: int = 5,
    ) -> Decision[None]:
        """Let ``step`` decide on the intent and append its events (``decide`` below).

        Raises:
            ConcurrencyConflict: still conflicting after ``conflicts`` tries.
            EventStoreUnavailable: the store did not answer, or answered behind ``at_least``.
        """
        ...

    async def decide_with(
        self, tenant: str, intent_id: str, step: StepWith[R], *, assume_new: bool = False,
        trigger: RecordedEvent | None = None, at_least: int = 0, latest: bool = False,
        conflicts: int = 5,
    ) -> Decision[R]:
        """As ``decide``, for a step that also returns what it found (``Decision.result``).

        Raises:
            ConcurrencyConflict: still conflicting after ``conflicts`` tries.
            EventStoreUnavailable: the store did not answer, or answered behind ``at_least``.
        """
        ...

    async def load(
        self, tenant: str, intent_id: str, *, trigger: RecordedEvent | None = None,
        at_least: int = 0, latest: bool = False,
    ) -> EffectIntent | None:
        """The intent (``None``: no events): never before ``trigger`` or ``at_least``; with
        ``trigger``, as it was when the trigger was stored when this process knows exactly
        that; ``latest``: as the store's leader has it.

        Raises:
            EventStoreUnavailable: the store did not answer, or answered behind ``at_least``.
        """
        ...

    async def events(self, tenant: str, intent_id: str, *, at_least: int = 0) -> tuple[Event, ...]:
        """The intent's events as this process last knew them, loaded when it knows none.

        Raises:
            EventStoreUnavailable: the store did not answer, or answered behind ``at_least``.
        """
        ...

    async def tenant_of(self, intent_id: str) -> str | None:
        """The tenant whose record holds ``intent_id`` (``None``: none, or the store cannot say)."""
        ...

    async def record_abandonment(
        self, tenant: str, intent_id: str, why: Abandonment, trigger: str, clock: Clock,
    ) -> None:
        """Put on the intent's record that a consumer gave up ``trigger`` (once per consumer
        and message; nothing for an intent with no events)."""
        ...


class StoredIntents:
    """``IntentStore`` over an event store and this process's cache of histories."""

    def __init__(self, store: EventStore, cache: AggregateCache | None = None) -> None:
        self.store = store
        #: Histories this process loaded or appended lately (``lockgate.intent.cache``;
        #: ``None``: every decision loads).
        self.cache = cache

    @classmethod
    def memory(cls) -> StoredIntents:
        """The fake: the same store logic, and a cache, over an empty ``MemoryEventStore``."""
        return cls(MemoryEventStore(), AggregateCache())

    async def decide(
        self, tenant: str, intent_id: str, step: Step, *, assume_new: bool = False,
        trigger: RecordedEvent | None = None, at_least: int = 0, latest: bool = False,
        conflicts: int = 5,
    ) -> Decision[None]:
        """Let ``step`` decide on the intent and append its events."""
        return await self.decide_with(tenant, intent_id, finding_nothing(step),
                                      assume_new=assume_new, trigger=trigger, at_least=at_least,
                                      latest=latest, conflicts=conflicts)

    async def decide_with(
        self, tenant: str, intent_id: str, step: StepWith[R], *, assume_new: bool = False,
        trigger: RecordedEvent | None = None, at_least: int = 0, latest: bool = False,
        conflicts: int = 5,
    ) -> Decision[R]:
        """As ``decide``, for a step that also returns what it found."""
        return await decide(self.store, tenant, intent_id, step, conflicts=conflicts,
                                    assume_new=assume_new, trigger=trigger, cache=self.cache,
                                    at_least=at_least, latest=latest)

    async def load(
        self, tenant: str, intent_id: str, *, trigger: RecordedEvent | None = None,
        at_least: int = 0, latest: bool = False,
    ) -> EffectIntent | None:
        """The intent (``None``: no events), never before ``trigger`` or ``at_least``."""
        if latest or at_least:
            known = await load_known(self.store, tenant, intent_id, self.cache,
                                             at_least=max(at_least, trigger.version if trigger else 0),
                                             latest=latest)
            return fold(known.events)
        return await load_intent(self.store, tenant, intent_id, trigger=trigger,
                                         cache=self.cache)

    async def events(self, tenant: str, intent_id: str, *, at_least: int = 0) -> tuple[Event, ...]:
        """The intent's events as this process last knew them, loaded when it knows none."""
        known = self.cache.peek(tenant, intent_id) if self.cache is not None else None
        if known is None:
            known = await load_known(self.store, tenant, intent_id, self.cache,
                                             at_least=at_least)
        return known.events

    async def tenant_of(self, intent_id: str) -> str | None:
        """The tenant whose record holds ``intent_id``, when the store can look it up."""
        if isinstance(self.store, TenantLookup):
            return await self.store.tenant_of(intent_id)
        return None

    async def record_abandonment(
        self, tenant: str, intent_id: str, why: Abandonment, trigger: str, clock: Clock,
    ) -> None:
        """Put on the intent's record that a consumer gave up ``trigger``."""
        await record_abandonment(self.store, tenant, intent_id, why, trigger, clock)


# -- the mechanism ----------------------------------------------------------------------



Step = Callable[[EffectIntent | None], Awaitable[Sequence[Event]]]
#: A step that says, besides its events, what it found (a lock it took, a refusal, an answer).
StepWith = Callable[[EffectIntent | None], Awaitable[tuple[Sequence[Event], R]]]


@dataclass(frozen=True)
class Decision(Generic[R]):
    """What one decision found and did: the intent before, its events, the step's result.

    ``after`` is the intent with the events applied, worked out only when asked.
    """

    #: The intent the (last run of the) step decided on; ``None``: it had no events.
    before: EffectIntent | None
    #: What was appended (none: nothing to do).
    events: tuple[Event, ...]
    #: What the step returned besides its events (``None`` for a plain step).
    result: R

    @cached_property
    def after(self) -> EffectIntent | None:
        """The intent as the record has it after this decision's events."""
        after = self.before
        for event in self.events:  # the state is immutable: ``before`` stays as it was
            after = evolve(after, event)
        return after


def finding_nothing(step: Step) -> StepWith[None]:
    """``step`` as a step that finds nothing besides its events (``Decision.result`` is ``None``)."""

    async def with_nothing(intent: EffectIntent | None) -> tuple[Sequence[Event], None]:
        return await step(intent), None

    return with_nothing


async def decide_and_append(
    store: EventStore, tenant: str, intent_id: str, step: Step, *, conflicts: int = 5,
    assume_new: bool = False, trigger: RecordedEvent | None = None,
    cache: AggregateCache | None = None, at_least: int = 0, latest: bool = False,
) -> list[Event]:
    """``decide`` for a step that returns only events; the events appended."""
    decision = await decide(store, tenant, intent_id, finding_nothing(step), conflicts=conflicts,
                            assume_new=assume_new, trigger=trigger, cache=cache, at_least=at_least,
                            latest=latest)
    return list(decision.events)


async def decide(
    store: EventStore, tenant: str, intent_id: str, step: StepWith[R], *, conflicts: int = 5,
    assume_new: bool = False, trigger: RecordedEvent | None = None,
    cache: AggregateCache | None = None, at_least: int = 0, latest: bool = False,
) -> Decision[R]:
    """Load the aggregate, let ``step`` decide, append what it decided.

    On a concurrency conflict the whole step runs again on the fresh history; a step
    that finds the aggregate past its own stage returns no events. ``assume_new`` skips
    the first load: the step decides for an aggregate with no events and the append
    expects none (sequence 0), so if there were some the server refuses it and the
    step runs again on what was there. For a consumer of first messages (intake) that
    saves a load per message; a repeat costs one wasted decision.

    With a ``cache``, the first decision is made on the history this process knows
    (``lockgate.intent.cache``): exactly the one at ``trigger`` when it holds the one
    before it, and no load at all. A history that may be behind the store decides only
    optimistically: should it find nothing to do, the store is asked before that is
    believed, unless the intent is already in a terminal state there (final: a timer
    that comes due after the effect settled costs no load). The cache learns every
    history loaded and appended here. ``at_least``: a version the caller knows is stored
    (besides the trigger's); no load is taken for less. ``latest``: every history decided
    on is the leader's (``EventStore.load_latest``), save one the cache knows ended, for
    a step with effects outside the store that an old view must not cause (a trigger
    handed again long after it was first stored).

    Returns:
        The intent the step last decided on, the events appended and the step's result.

    Raises:
        ConcurrencyConflict: still conflicting after ``conflicts`` tries.
    """
    recall = cache.recall(tenant, intent_id, trigger) if cache is not None else None
    if latest and recall is not None and not _ended(recall.known):
        recall = None
    first, conflicted = True, 0
    # What the store is known to hold: the trigger's version, and after a conflict one
    # past the history that conflicted. A load is never taken for less (on a replicated
    # stream a lagging replica would answer with a history before the trigger, and a
    # step finding nothing to do there would settle the message unanswered).
    at_least = max(at_least, trigger.version if trigger is not None else 0)
    while True:
        if first and assume_new:
            known, trusted = Known(AggregateHistory(tenant, intent_id), ()), True
        elif first and recall is not None and recall.known.history.version >= at_least:
            known, trusted = recall.known, recall.exact
        else:
            known = await load_known(store, tenant, intent_id, cache, at_least=at_least, latest=latest)
            trusted = True
        first = False
        intent = fold(known.events)
        # A terminal state is final (only neutral events follow it), so what a step finds
        # nothing to do about there it would find nothing to do about on any later history.
        trusted = trusted or (intent is not None and intent.state.terminal)
        decided, result = await step(intent)
        events = tuple(decided)
        if not events:
            if trusted:
                return Decision(intent, (), result)
            continue  # nothing to do on a history that may be behind: ask the store
        try:
            history = await store.append(known.history, [encode_event(e) for e in events])
        except ConcurrencyConflict:
            if cache is not None:
                cache.forget(tenant, intent_id)
            conflicted += 1
            if conflicted >= conflicts:
                raise
            at_least = max(at_least, known.history.version + 1)
            continue
        metrics.appended(events)
        if cache is not None:
            cache.remember(history, (*known.events, *events))
        return Decision(intent, events, result)


def _ended(known: Known) -> bool:
    intent = fold(known.events)
    return intent is not None and intent.state.terminal


async def load_known(
    store: EventStore, tenant: str, intent_id: str, cache: AggregateCache | None = None,
    *, at_least: int = 0, latest: bool = False,
) -> Known:
    """Load an aggregate's history (at ``at_least`` or later) and decode it (and let
    ``cache`` keep it).

    Events ``cache`` already holds decoded are not decoded again: only the new ones.
    ``latest``: as the store's leader holds it (``EventStore.load_latest``), for the rare
    decision a replica behind the leader must not answer.
    """
    history = await (store.load_latest(tenant, intent_id) if latest
                     else store.load(tenant, intent_id, at_least=at_least))
    if history.version < at_least:
        # Even where no replica lags (a leader just deposed answered, say): acting on a
        # history before what is known to be stored would answer for an earlier state.
        raise EventStoreUnavailable(
            f"{tenant}/{intent_id} loaded at version {history.version}, before {at_least}")
    prior = cache.peek(tenant, intent_id) if cache is not None else None
    decoded: tuple[Event, ...] = ()
    if prior is not None and 0 < prior.history.version <= history.version \
            and history.events[prior.history.version - 1].sequence == prior.history.last_sequence:
        decoded = prior.events
    fresh = history.events[len(decoded):]
    known = Known(history, (*decoded, *(decode_event(e) for e in fresh)))
    if cache is not None:
        cache.remember(known.history, known.events)
    return known


async def load_intent(
    store: EventStore, tenant: str, intent_id: str, *, trigger: RecordedEvent | None = None,
    cache: AggregateCache | None = None,
) -> EffectIntent | None:
    """Return the folded aggregate, or ``None`` when it has no events.

    With a ``trigger``, never as it was before the trigger (the store reads again where
    no replica lags); with a ``cache`` too, as it was when the trigger was stored, when
    this process knows exactly that; otherwise as loaded now.
    """
    if cache is not None and trigger is not None:
        known = cache.at(tenant, intent_id, trigger)
        if known is not None:
            return fold(known.events)
    at_least = trigger.version if trigger is not None else 0
    return fold((await load_known(store, tenant, intent_id, cache, at_least=at_least)).events)


def abandonment(intent: EffectIntent, why: Abandonment, trigger: str, now: datetime) -> list[Event]:
    """``ProcessingAbandoned`` for ``intent``, once per consumer and message."""
    if f"{why.durable}:{trigger}" in intent.abandoned:
        return []
    return [
        ProcessingAbandoned.next(
            intent, Stamp(now=now, event_id=derived_id("abandoned", why.durable, trigger),
                          causation_id=trigger), durable=why.durable, trigger=trigger, cause=why.cause,
            deliveries=why.deliveries,
        )
    ]


async def record_abandonment(
    store: EventStore, tenant: str, intent_id: str, why: Abandonment, trigger: str, clock: Clock,
    *, conflicts: int = 5,
) -> None:
    """Record on the intent that a consumer gave up a message about it.

    Also when the intent's events cannot be folded (a stored event that decodes but does
    not apply, which may be exactly why the consumer failed): the event then goes after
    the last one stored, and the record says what was given up even if nothing can act
    on it.
    """
    at_least = 0
    for attempt in range(conflicts):
        history = await store.load(tenant, intent_id, at_least=at_least)
        if not history.events:
            return
        try:
            intent = fold(decode_event(e) for e in history.events)
        except Exception:  # noqa: BLE001 - an aggregate that does not fold is still recorded on
            intent = None
        if intent is not None:
            events = abandonment(intent, why, trigger, clock())
        elif any(e.event_id == derived_id("abandoned", why.durable, trigger) for e in history.events):
            events = []
        else:
            events = [ProcessingAbandoned(
                originator_id=UUID(hex=intent_id), originator_version=history.version + 1,
                timestamp=clock(), event_id=derived_id("abandoned", why.durable, trigger),
                correlation_id="", causation_id=trigger, durable=why.durable, trigger=trigger,
                cause=why.cause, deliveries=why.deliveries,
            )]
        if not events:
            return
        try:
            await store.append(history, [encode_event(e) for e in events])
        except ConcurrencyConflict:
            if attempt == conflicts - 1:
                raise
            at_least = history.version + 1
            continue
        metrics.appended(events)
        return
