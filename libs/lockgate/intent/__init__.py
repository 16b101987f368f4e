"""The ``EffectIntent``: one candidate's history as events, its state folded by ``evolve``."""

from lockgate.intent.aggregate import EffectIntent, Event, Stamp, State, intent_uuid
from lockgate.intent.codec import decode_event, encode_event, fold

__all__ = [
    "EffectIntent", "Event", "Stamp", "State", "decode_event", "encode_event", "fold", "intent_uuid",
]
