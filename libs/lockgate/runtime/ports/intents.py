"""The intent store port: decide on an intent and append, load it, record what was given up.

``IntentStore`` is what a handler changes and reads intents through. ``StoredIntents`` is its
one implementation, over any ``EventStore`` and this process's ``AggregateCache``: over the
JetStream store in a service, over ``MemoryEventStore`` in a unit test (``StoredIntents.memory``),
so a fake decides exactly as the real thing does (the cache, ``assume_new``, ``latest``,
``at_least``, the trigger; ``lockgate.runtime.intents`` says what each means).
"""

from __future__ import annotations

from typing import Protocol, TypeVar

from lockgate.eventstore.base import EventStore, RecordedEvent, TenantLookup
from lockgate.eventstore.memory import MemoryEventStore
from lockgate.intent.aggregate import EffectIntent, Event
from lockgate.intent.cache import AggregateCache
from lockgate.intent.codec import fold
from lockgate.runtime import intents
from lockgate.runtime.intents import Clock, Decision, Step, StepWith
from lockgate.runtime.settlement import Abandonment

R = TypeVar("R")

__all__ = ["Decision", "IntentStore", "Step", "StepWith", "StoredIntents"]


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
        """Let ``step`` decide on the intent and append its events (``lockgate.runtime.intents.decide``).

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
        return await self.decide_with(tenant, intent_id, intents.finding_nothing(step),
                                      assume_new=assume_new, trigger=trigger, at_least=at_least,
                                      latest=latest, conflicts=conflicts)

    async def decide_with(
        self, tenant: str, intent_id: str, step: StepWith[R], *, assume_new: bool = False,
        trigger: RecordedEvent | None = None, at_least: int = 0, latest: bool = False,
        conflicts: int = 5,
    ) -> Decision[R]:
        """As ``decide``, for a step that also returns what it found."""
        return await intents.decide(self.store, tenant, intent_id, step, conflicts=conflicts,
                                    assume_new=assume_new, trigger=trigger, cache=self.cache,
                                    at_least=at_least, latest=latest)

    async def load(
        self, tenant: str, intent_id: str, *, trigger: RecordedEvent | None = None,
        at_least: int = 0, latest: bool = False,
    ) -> EffectIntent | None:
        """The intent (``None``: no events), never before ``trigger`` or ``at_least``."""
        if latest or at_least:
            known = await intents.load_known(self.store, tenant, intent_id, self.cache,
                                             at_least=max(at_least, trigger.version if trigger else 0),
                                             latest=latest)
            return fold(known.events)
        return await intents.load_intent(self.store, tenant, intent_id, trigger=trigger,
                                         cache=self.cache)

    async def events(self, tenant: str, intent_id: str, *, at_least: int = 0) -> tuple[Event, ...]:
        """The intent's events as this process last knew them, loaded when it knows none."""
        known = self.cache.peek(tenant, intent_id) if self.cache is not None else None
        if known is None:
            known = await intents.load_known(self.store, tenant, intent_id, self.cache,
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
        await intents.record_abandonment(self.store, tenant, intent_id, why, trigger, clock)
