"""The ``EffectIntent`` aggregate: one event-sourced history per candidate."""

from lockgate.intent.aggregate import EffectIntent, Event, Stamp, State, intent_uuid
from lockgate.intent.codec import decode_event, encode_event, fold

__all__ = [
    "EffectIntent", "Event", "Stamp", "State", "decode_event", "encode_event", "fold", "intent_uuid",
]
