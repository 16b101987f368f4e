"""The intent store as services use it: load an intent's history, decide, append.

``decide`` is the one way a service changes an intent: load (or recall from this
process's cache), let a pure step decide, append what it decided with the history's version
as the expectation, and run the step again on a conflict; it answers with a ``Decision`` (the intent before, the
events, what the step found, the intent after). ``record_abandonment`` puts a
message a consumer gave up on the intent's record.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Generic, TypeVar
from uuid import UUID

from lockgate.core.ids import derived_id
from lockgate.eventstore.base import (
    AggregateHistory,
    ConcurrencyConflict,
    EventStore,
    EventStoreUnavailable,
    RecordedEvent,
)
from lockgate.intent.aggregate import EffectIntent, Event, Stamp
from lockgate.intent.cache import AggregateCache, Known
from lockgate.intent.codec import decode_event, encode_event, fold
from lockgate.intent.events import ProcessingAbandoned
from lockgate.intent.evolve import evolve
from lockgate.runtime import metrics
from lockgate.runtime.settlement import Abandonment

Clock = Callable[[], datetime]

R = TypeVar("R")

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
