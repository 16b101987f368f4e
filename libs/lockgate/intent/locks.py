"""The resource an intent's effect is serialized on, and the states in which it holds it.

Contracts that ask for it (``serialize_per_resource``) run one effect at a time per
resource: the executor's gate takes a key in the ``LG_LOCKS`` bucket (its value is the
intent id) and holds it until the intent reaches a state in which its effect is settled.
Release is driven by the record (invariant 8 of docs/design.md), so a crash between an append and the
release that follows it leaves no lock behind: the executor's gate and reports free the lock
an event of theirs ended before their trigger is acknowledged (a process that died in between
leaves the trigger to be handed again, and the next one finds the hold ended on the record),
and every event that ends a hold anywhere else is consumed by the ``executor-locks`` durable
(``lockgate.runtime.specs.ENDS_HOLD_ELSEWHERE``).
"""

from __future__ import annotations

import re

from lockgate.intent.aggregate import EffectIntent, State

#: States in which an intent still holds its resource: about to be sent, in flight, or
#: in flight with an unknown outcome (the resource's state is uncertain).
HOLDING = frozenset({State.ALLOWED, State.AUTHORIZED, State.SENT, State.UNKNOWN})

_NOT_KEY = re.compile(r"[^-/_=.a-zA-Z0-9]")


def lock_key(intent: EffectIntent) -> str:
    """The key of the intent's resource in the locks bucket."""
    raw = f"{intent.tenant}.{intent.resource.get('type', 'resource')}.{intent.resource.get('id', '')}"
    return _NOT_KEY.sub("_", raw)


def may_hold(intent: EffectIntent) -> bool:
    """True while the intent may hold its resource's lock."""
    return intent.state in HOLDING
