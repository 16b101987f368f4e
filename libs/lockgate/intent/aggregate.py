"""The public face of ``lockgate.intent``: the intent's state, its events, and how to build them.

An intent is Lockgate's own decider: its events (``lockgate.intent.events``), its
immutable state (``lockgate.intent.state``) and ``evolve`` (``lockgate.intent.evolve``);
the codec (``lockgate.intent.codec``) stores the events in Lockgate's JetStream store.
Deciders import the names below from here; this module defines nothing of its own.
"""

from lockgate.intent.events import INTENT_TOPIC, Created, Event, Stamp
from lockgate.intent.state import (
    MAY_HAVE_BEEN_SENT,
    Attempt,
    EffectIntent,
    Settlement,
    State,
    Withdrawal,
    intent_uuid,
)

__all__ = [
    "INTENT_TOPIC", "MAY_HAVE_BEEN_SENT", "Attempt", "Created", "EffectIntent", "Event",
    "Settlement", "Stamp", "State", "Withdrawal", "intent_uuid",
]
