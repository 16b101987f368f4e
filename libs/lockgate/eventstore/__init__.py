"""The event store: one event-sourced history per effect intent, with optimistic concurrency.

``JetStreamEventStore`` keeps histories in a JetStream stream, one subject per event;
``MemoryEventStore`` is a fake with the same semantics for unit tests. Both satisfy
``EventStore`` and pass one contract suite.
"""

from lockgate.eventstore.base import (
    AggregateHistory,
    ConcurrencyConflict,
    EventStore,
    EventStoreError,
    EventStoreUnavailable,
    NewEvent,
    RecordedEvent,
)
from lockgate.eventstore.memory import MemoryEventStore
from lockgate.eventstore.subjects import aggregate_filter, event_subject, parse_event_subject

__all__ = [
    "AggregateHistory",
    "ConcurrencyConflict",
    "EventStore",
    "EventStoreError",
    "EventStoreUnavailable",
    "MemoryEventStore",
    "NewEvent",
    "RecordedEvent",
    "aggregate_filter",
    "event_subject",
    "parse_event_subject",
]
