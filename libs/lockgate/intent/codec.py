"""Lockgate's own mapping of ``EffectIntent`` events to stored bytes (msgspec JSON).

Services do not use the library's Application or recorders: JetStream is the store
(``lockgate.eventstore``). The envelope keeps the event's class version; older versions
are upcast with the event class's ``upcast_vN_vN+1`` static methods, as the library's
mapper would. A reader that uses the library's projection machinery goes through
``lockgate.intent.record``, whose mapper is this codec, and names event types by the
library's topics (``TOPICS``).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any
from uuid import UUID

import msgspec
from eventsourcing.utils import get_topic

from lockgate.eventstore.base import NewEvent, RecordedEvent
from lockgate.eventstore.subjects import NO_ROUTE
from lockgate.intent.aggregate import INTENT_TOPIC, EffectIntent, Event

EVENT_TYPES: dict[str, type[Event]] = {
    name: cls
    for name, cls in vars(EffectIntent).items()
    if isinstance(cls, type) and issubclass(cls, Event)
}
#: The library's topic of each event type (``module:Class.Event``, ``get_topic``).
TOPICS: dict[str, str] = {name: get_topic(cls) for name, cls in EVENT_TYPES.items()}
_TYPES_BY_TOPIC = {topic: name for name, topic in TOPICS.items()}
_TOPIC_PREFIX = INTENT_TOPIC + "."


def topic_of(event_type: str) -> str:
    """The library topic of a stored event type (of a type this code does not know too:
    it names no class, so mapping it to an event fails loudly instead of skipping it)."""
    return TOPICS.get(event_type) or _TOPIC_PREFIX + event_type


def event_type_of(topic: str) -> str | None:
    """The stored event type a library topic names; ``None`` for a topic that is not an
    ``EffectIntent`` event's (another application's)."""
    known = _TYPES_BY_TOPIC.get(topic)
    if known is not None:
        return known
    return topic[len(_TOPIC_PREFIX):] if topic.startswith(_TOPIC_PREFIX) else None


class _Envelope(msgspec.Struct):
    v: int
    data: dict[str, Any]


class _Stored(msgspec.Struct):
    v: int
    data: msgspec.Raw


_encoder = msgspec.json.Encoder()
_envelope = msgspec.json.Decoder(_Envelope)
_stored = msgspec.json.Decoder(_Stored)
#: Each event type read straight from its JSON, strictly: a value that needs the lax
#: reading (a number as a string, say) sends the event the long way, which reads it so.
_DECODERS = {name: msgspec.json.Decoder(cls) for name, cls in EVENT_TYPES.items()}


@functools.lru_cache(maxsize=4096)
def _uuid(intent_id: str) -> UUID:
    """The UUID of an intent id, made once: an intent's events are decoded together, and
    again in every process that reads them (UUID's constructor is Python code; a UUID is
    immutable, so every event of an intent may hold the same one)."""
    return UUID(hex=intent_id)


class EventDecodeError(ValueError):
    """Stored bytes that are not an event this code knows."""


def encode_event(event: Event) -> NewEvent:
    """Return the storable form of ``event``."""
    cls = type(event)
    return NewEvent(
        event_id=event.event_id,
        event_type=cls.__name__,
        # The event itself, not msgspec.to_builtins(event): the same bytes, without the
        # intermediate dictionary.
        data=_encoder.encode({"v": cls.class_version, "data": event}),
        route=route(event),
    )


def route(event: Event) -> str:
    """The last token of ``event``'s subject: the value its consumers filter on, or ``_``."""
    field = type(event).routed_by
    return str(getattr(event, field)) if field else NO_ROUTE


def decode_event(recorded: RecordedEvent) -> Event:
    """Return the event object of a stored event, upcast to the current class version.

    Raises:
        EventDecodeError: unknown type or bytes that do not fit it.
    """
    cls = EVENT_TYPES.get(recorded.event_type)
    if cls is None:
        raise EventDecodeError(f"unknown event type {recorded.event_type!r}")
    current = _decode_current(recorded, cls)
    if current is not None:
        return current
    try:
        envelope = _envelope.decode(recorded.data)
        state = envelope.data  # decoded for this call alone: the upcasters may change it
        version = envelope.v
        while version < cls.class_version:
            getattr(cls, f"upcast_v{version}_v{version + 1}")(state)
            version += 1
        # The subject is authoritative for identity and position.
        state["originator_id"] = _uuid(recorded.intent_id)
        state["originator_version"] = recorded.version
        return msgspec.convert(state, type=cls, strict=False)
    except (msgspec.ValidationError, msgspec.DecodeError, AttributeError, ValueError) as exc:
        raise EventDecodeError(f"{recorded.event_type} v{recorded.version}: {exc}") from exc


def _decode_current(recorded: RecordedEvent, cls: type[Event]) -> Event | None:
    """The event read straight from its JSON, when it was stored at ``cls``'s version and
    its own envelope fields read; else ``None``, and ``decode_event`` takes the long way.

    The long way decodes the data to a dictionary, upcasts it, puts the subject's identity
    and position in it and converts it (laxly): for an event of the current version whose
    values read strictly, the same event as this (unknown fields ignored either way), a
    third slower. Here the subject's identity and position replace the stored ones after
    the reading; stored ones that do not read (absent, not a UUID) send the event the long
    way, which never looks at them.
    """
    try:
        stored = _stored.decode(recorded.data)
        if stored.v != cls.class_version:
            return None
        event = _DECODERS[recorded.event_type].decode(stored.data)
        # The subject is authoritative for identity and position.
        object.__setattr__(event, "originator_id", _uuid(recorded.intent_id))
        object.__setattr__(event, "originator_version", recorded.version)
    except (msgspec.ValidationError, msgspec.DecodeError, TypeError, ValueError):
        return None
    return event


def fold(events: Iterable[Event]) -> EffectIntent | None:
    """Rebuild the aggregate from its events (``None`` when there are none)."""
    folded: EffectIntent | None = None
    for event in events:
        folded = event.mutate(folded)
    return folded
