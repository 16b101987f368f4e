"""The intents a process saw lately, so that most deliveries need no load.

A consumer is handed event *N* of an intent; to decide, it needs the intent's history
up to at least *N*. When this process holds the history up to *N - 1* (it loaded or
appended it a moment ago, the usual case on a pipeline), the history up to *N* is
exactly that plus the delivered event: versions are contiguous, so nothing can sit in
between. That is the state a load at the moment *N* was stored would have returned,
and the decision is made on it without a round trip (``Recall.exact``).

A history that ends at *N* (this process appended *N* itself) is exact too. One that
goes past *N* (a redelivery; this process appended more since) may be behind the store:
it is a snapshot of a later moment than *N* but perhaps not the latest, good for
deciding optimistically but not for concluding that there is nothing to do
(``Recall.exact`` is false; ``lockgate.runtime.ports.intents.decide_and_append`` reloads before it returns
no events). Either way every append is still guarded by the store's optimistic
concurrency, so a stale history costs a conflict and a reload, never a wrong write.

Kept per process, bounded (least recently used go first); decoded events are kept
beside their stored form, so a hit costs neither a decode nor a round trip.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from lockgate.core.bounded import keep
from lockgate.eventstore.base import AggregateHistory, RecordedEvent
from lockgate.intent.aggregate import Event
from lockgate.intent.codec import decode_event

#: Intents a process keeps (a few KB each).
CAPACITY = 8192


@dataclass(frozen=True, slots=True)
class Known:
    """An intent's history as stored, and its events decoded."""

    history: AggregateHistory
    events: tuple[Event, ...]


@dataclass(frozen=True, slots=True)
class Recall:
    """A history this process knows, and whether it is exactly the one at the trigger."""

    known: Known
    exact: bool


class AggregateCache:
    """Histories this process loaded or appended lately, by tenant and intent."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self._capacity = capacity
        self._known: OrderedDict[tuple[str, str], Known] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def recall(self, tenant: str, intent_id: str, trigger: RecordedEvent | None = None) -> Recall | None:
        """The history to decide on for ``trigger`` (or for none), or ``None``: load it.

        Raises:
            EventDecodeError: the trigger is not an event this code knows.
        """
        key = (tenant, intent_id)
        if trigger is not None and trigger.version == 1:
            # A first event is a whole history on its own.
            self.hits += 1
            return Recall(self._keep(key, Known(
                AggregateHistory(tenant, intent_id, (trigger,)), (decode_event(trigger),))), True)
        known = self._known.get(key)
        if known is None:
            self.misses += 1
            return None
        history = known.history
        if trigger is None:
            self.hits += 1
            self._known.move_to_end(key)
            return Recall(known, False)
        if trigger.version == history.version + 1 and trigger.sequence > history.last_sequence:
            self.hits += 1
            return Recall(self._keep(key, Known(
                AggregateHistory(tenant, intent_id, (*history.events, trigger)),
                (*known.events, decode_event(trigger)))), True)
        if trigger.version <= history.version:
            held = history.events[trigger.version - 1]
            if held.sequence == trigger.sequence:
                self.hits += 1
                self._known.move_to_end(key)
                return Recall(known, trigger.version == history.version)
        # A gap (events this process never saw) or a history that is not the store's.
        self.misses += 1
        self._known.pop(key, None)
        return None

    def peek(self, tenant: str, intent_id: str) -> Known | None:
        """What is known of an intent, as kept (no hit or miss is counted)."""
        return self._known.get((tenant, intent_id))

    def at(self, tenant: str, intent_id: str, trigger: RecordedEvent) -> Known | None:
        """The history exactly as it was when ``trigger`` was stored, if this process knows it.

        A history known past the trigger is cut at it: its first events are that history.

        Raises:
            EventDecodeError: the trigger is not an event this code knows.
        """
        recall = self.recall(tenant, intent_id, trigger)
        if recall is None:
            return None
        if recall.exact:
            return recall.known
        n = trigger.version
        known = recall.known
        return Known(AggregateHistory(tenant, intent_id, known.history.events[:n]), known.events[:n])

    def remember(self, history: AggregateHistory, events: tuple[Event, ...]) -> None:
        """Keep ``history`` (as loaded or appended) with its decoded ``events``.

        A history behind the one kept (a load that was overtaken by an append of this
        process) is not kept.
        """
        if not history.events:
            return
        kept = self._known.get((history.tenant, history.intent_id))
        if kept is not None and kept.history.version > history.version:
            return
        self._keep((history.tenant, history.intent_id), Known(history, events))

    def forget(self, tenant: str, intent_id: str) -> None:
        """Drop what is known of an intent (it was found stale)."""
        self._known.pop((tenant, intent_id), None)

    def _keep(self, key: tuple[str, str], known: Known) -> Known:
        return keep(self._known, key, known, self._capacity)
