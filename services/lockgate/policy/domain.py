"""Policy's pure decisions."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from lockgate.authz import Decision, PolicyBundle
from lockgate.authz.config import Budget
from lockgate.authz.history import HistoryFacts
from lockgate.authz.intents import NO_EVIDENCE, Evidence, judge
from lockgate.contracts.messages import Facts
from lockgate.contracts.vocabulary import DecisionOutcome
from lockgate.core.ids import derived_id
from lockgate.intent.aggregate import EffectIntent, Event, Stamp, State
from lockgate.intent.events import PolicyDecided, ShadowDecision
from lockgate.intent.lineage import Kind

#: Outcomes that let an intent go on, and so take budget.
ADMITTED = frozenset({DecisionOutcome.ALLOW, DecisionOutcome.REQUIRE_APPROVAL})


def evaluate_for(
    intent: EffectIntent, bundle: PolicyBundle, facts: Facts | None, *, repeated_denials: int = 0,
    evidence: Evidence = NO_EVIDENCE,
) -> Decision:
    """Permission for an intent: pause without facts, stop a stalled run, else Cedar.

    ``repeated_denials``: how often this run already had this exact consequence denied
    on the same facts. Past the bundle's limit the answer is ``run.progress-stalled``
    without asking Cedar again: nothing has changed that could change the answer. The
    same limit stops a lineage that many refusals long (``lockgate.intent.lineage``),
    whatever the spelling of each attempt.
    """
    if not evidence.offered_now:
        # Offered when its turn opened, and valid against that turn; not offered now.
        return Decision(DecisionOutcome.DENY, bundle.revision, ("tool.no-longer-offered",), ("catalogue",))
    if intent.lineage == Kind.EQUIVALENT and intent.predecessor_denied:
        # A reviewer refused this very consequence earlier in the lineage: asked again,
        # it is the same answer (a denial flows to an equivalent successor, never further).
        return Decision(DecisionOutcome.DENY, bundle.revision, ("lineage.denied-before",), ("lineage",))
    limit = bundle.config.progress.max_repeated_denials
    if intent.lineage_denials >= limit:
        return Decision(DecisionOutcome.DENY, bundle.revision, ("run.progress-stalled",), ("bundle.progress",))
    if facts is None:
        return Decision(DecisionOutcome.PAUSE, bundle.revision, ("facts.unavailable",), ())
    if repeated_denials >= limit:
        return Decision(DecisionOutcome.DENY, bundle.revision, ("run.progress-stalled",), ("bundle.progress",))
    return judge(bundle, intent, facts, evidence)


def admit(decision: Decision, exhausted: Budget | None) -> Decision:
    """Admission after permission: an exhausted budget pauses or denies what was allowed."""
    if exhausted is None or decision.outcome not in ADMITTED:
        return decision
    return Decision(
        DecisionOutcome(exhausted.on_exhausted), decision.revision, (f"budget.{exhausted.name}.exhausted",),
        decision.determining,
    )


def record(
    intent: EffectIntent,
    decision: Decision,
    facts: Facts | None,
    *,
    reservations: Sequence[str] = (),
    history: HistoryFacts | None = None,
    shadow: Decision | None = None,
    cause: str,
    now: datetime,
) -> list[Event]:
    """``PolicyDecided`` for an intent still waiting for a decision (or paused), with the
    run's history it read and the shadow bundle's decision, if any."""
    if not (intent.state is State.NORMALIZED and intent.decision is None) and (
        intent.state is not State.PAUSED
    ):
        return []
    return [
        PolicyDecided.next(
            intent,
            Stamp(now=now, event_id=derived_id("policy", cause), causation_id=cause),
            outcome=decision.outcome,
            policy_revision=decision.revision,
            reasons=list(decision.reasons),
            determining=list(decision.determining)[:16],
            facts=dict(facts.facts) if facts is not None else {},
            digest=intent.digest or "",
            reservations=list(reservations),
            history=history.context() if history is not None else {},
            shadow=shadow_of(shadow) if shadow is not None else None,
        )
    ]


def shadow_of(decision: Decision) -> ShadowDecision:
    """A shadow bundle's decision as the record keeps it."""
    return ShadowDecision(revision=decision.revision, outcome=decision.outcome,
                          reasons=list(decision.reasons), determining=list(decision.determining)[:16])


def expire_pause(intent: EffectIntent, bundle: PolicyBundle, *, cause: str, now: datetime) -> list[Event]:
    """A pause whose evidence never came becomes a denial once the bundle's timeout passed."""
    if intent.state is not State.PAUSED or intent.paused_at is None:
        return []
    if (now - intent.paused_at).total_seconds() < bundle.config.pause.timeout_s:
        return []
    return [
        PolicyDecided.next(
            intent, Stamp(now=now, event_id=derived_id("pause-expired", cause), causation_id=cause),
            outcome=DecisionOutcome.DENY, policy_revision=bundle.revision,
            reasons=["policy.pause-expired"],
            determining=[], facts={}, digest=intent.digest or "", reservations=[],
        )
    ]
