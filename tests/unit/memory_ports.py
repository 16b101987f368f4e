"""What the handler tests on in-memory ports share: a stored history, an intent read back,
the case-notes world's facts about an open case."""

from __future__ import annotations

from lockgate.eventstore.base import RecordedEvent
from lockgate.intent.aggregate import EffectIntent
from lockgate.intent.codec import encode_event
from lockgate.runtime.context import MemoryPorts
from lockgate.testing.intents import History

#: The case-notes world's facts about an open case the actor may write to (what policy's
#: and approval's rules read of the case).
OPEN_FACTS: dict[str, str | int | bool] = {
    "exists": True, "tenant": "tenant-a", "status": "open", "writes_suspended": False,
    "actor_may_add_note": True, "sensitive": False, "version": 4}


async def store_history(ports: MemoryPorts, h: History) -> RecordedEvent:
    """Append ``h`` past what is stored already; its last event as stored (what a consumer is handed)."""
    history = await ports.store.load("tenant-a", h.intent_id)
    history = await ports.store.append(history, [encode_event(e) for e in h.events[history.version:]])
    return history.events[-1]


async def state_of(ports: MemoryPorts, h: History) -> EffectIntent:
    """The intent of ``h`` as the store has it now (it has events)."""
    intent = await ports.intents.load("tenant-a", h.intent_id)
    assert intent is not None
    return intent
