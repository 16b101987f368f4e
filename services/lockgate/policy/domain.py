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
    repeated_denials: int = 0,
) -> list[Event]:
    """``PolicyDecided`` for a normalized intent; missing facts pause it.

    ``repeated_denials``: how often this run already had this exact consequence denied
    on the same facts. Past the bundle's limit the answer is ``run.progress-stalled``
    without asking Cedar again: nothing has changed that could change the answer.
    """
    if not (intent.state is State.NORMALIZED and intent.decision is None) and (
        intent.state is not State.PAUSED
    ):
        return []
    if facts is None:
        decision = Decision("pause", bundle.revision, ("facts.unavailable",), ())
        used: dict[str, str | int | bool] = {}
    elif repeated_denials >= bundle.config.progress.max_repeated_denials:
        decision = Decision("deny", bundle.revision, ("run.progress-stalled",), ("bundle.progress",))
        used = dict(facts.facts)
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


def expire_pause(intent: EffectIntent, bundle: PolicyBundle, *, cause: str, now: datetime) -> list[Event]:
    """A pause whose evidence never came becomes a denial once the bundle's timeout passed."""
    if intent.state is not State.PAUSED or intent.paused_at is None:
        return []
    if (now - intent.paused_at).total_seconds() < bundle.config.pause.timeout_s:
        return []
    return [
        EffectIntent.PolicyDecided.next(
            intent, now=now, event_id=derived_id("pause-expired", cause), causation_id=cause,
            outcome="deny", policy_revision=bundle.revision, reasons=["policy.pause-expired"],
            determining=[], facts={}, digest=intent.digest or "",
        )
    ]
