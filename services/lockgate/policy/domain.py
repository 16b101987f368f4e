"""Policy's pure decisions."""

from __future__ import annotations

from datetime import datetime

from lockgate.authz import Decision, PolicyBundle
from lockgate.authz.intents import judge
from lockgate.contracts.messages import Facts
from lockgate.core.ids import derived_id
from lockgate.intent.aggregate import EffectIntent, Event, State


def decide(
    intent: EffectIntent,
    bundle: PolicyBundle,
    facts: Facts | None,
    *,
    cause: str,
    now: datetime,
) -> list[Event]:
    """``PolicyDecided`` for a normalized intent; missing facts pause it."""
    if not (intent.state is State.NORMALIZED and intent.decision is None) and (
        intent.state is not State.PAUSED
    ):
        return []
    if facts is None:
        decision = Decision("pause", bundle.revision, ("facts.unavailable",), ())
        used: dict[str, str | int | bool] = {}
    else:
        decision = judge(bundle, intent, facts)
        used = dict(facts.facts)
    return [
        EffectIntent.PolicyDecided.next(
            intent,
            now=now,
            event_id=derived_id("policy", cause),
            causation_id=cause,
            outcome=decision.outcome,
            policy_revision=decision.revision,
            reasons=list(decision.reasons),
            determining=list(decision.determining)[:16],
            facts=used,
            digest=intent.digest or "",
        )
    ]
