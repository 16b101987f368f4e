"""Lockgate's mapping of ``EffectIntent`` events to stored bytes (msgspec JSON).

JetStream is the store (``lockgate.eventstore``). An event is stored as the envelope
``{"v": version, "data": {...}}``, ``data`` being the event's fields by name; older
versions are read through ``lockgate.intent.upcasters``. An event type is stored under
its class name, the last token of its subject.
"""

from __future__ import annotations

import functools
from typing import Any
from uuid import UUID

import msgspec
from msgspec.structs import force_setattr

from lockgate.eventstore.base import NewEvent, RecordedEvent
from lockgate.eventstore.subjects import NO_ROUTE
from lockgate.intent.events import EVENT_TYPES, Event
from lockgate.intent.evolve import fold
from lockgate.intent.upcasters import upcast

__all__ = ["EVENT_TYPES", "EventDecodeError", "decode_event", "encode_event", "fold", "route"]


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
        data=_encoder.encode({"v": cls.version, "data": event}),
        route=route(event),
    )


def route(event: Event) -> str:
    """The last token of ``event``'s subject: the value its consumers filter on, or ``_``."""
    field = type(event).routed_by
    return str(getattr(event, field)) if field else NO_ROUTE


def decode_event(recorded: RecordedEvent) -> Event:
    """Return the event object of a stored event, upcast to the current version.

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
        data = envelope.data  # decoded for this call alone: the upcasters may change it
        upcast(recorded.event_type, envelope.v, cls.version, data)
        # The subject is authoritative for identity and position.
        data["originator_id"] = _uuid(recorded.intent_id)
        data["originator_version"] = recorded.version
        return msgspec.convert(data, type=cls, strict=False)
    except (msgspec.ValidationError, msgspec.DecodeError, KeyError, ValueError) as exc:
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
        if stored.v != cls.version:
            return None
        event = _DECODERS[recorded.event_type].decode(stored.data)
    except (msgspec.ValidationError, msgspec.DecodeError, TypeError, ValueError):
        return None
    # The subject is authoritative for identity and position; the event is not shared yet.
    force_setattr(event, "originator_id", _uuid(recorded.intent_id))
    force_setattr(event, "originator_version", recorded.version)
    return event
