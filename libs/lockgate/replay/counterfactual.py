"""What would this bundle have decided? Recorded consequences and facts, under another bundle.

The policy service decides with ``lockgate.policy.domain.evaluate_for`` on the intent as
normalization left it, the adapter's facts and the evidence of the run and contract.
The record keeps all of it: the ``CandidateNormalized`` consequence (folded, it is the
intent the service decided on) and the facts each ``PolicyDecided`` used. Evaluating the
same function on them under another bundle gives that bundle's decision on the same
history, with the policies that determined it, without asking any world anything.

It is permission only: Cedar, the lineage rules and the progress checkpoint as the
recorded intent carries them. Budgets and flood limits are counters of a live
deployment; the full replay (``lockgate.replay.world``) runs those in its own world.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from lockgate.authz import PolicyBundle
from lockgate.authz.intents import Evidence
from lockgate.contracts.messages import Facts
from lockgate.contracts.vocabulary import DecisionOutcome
from lockgate.intent.aggregate import EffectIntent, Event, State
from lockgate.intent.codec import fold
from lockgate.policy.domain import evaluate_for
from lockgate.replay.record import Candidate, Deployment


@dataclass(frozen=True)
class Decided:
    """One recorded policy decision beside the one another bundle makes on the same evidence."""

    intent_id: str
    tenant: str
    run_id: str
    tool: str
    resource: str
    digest: str
    recorded: str
    recorded_reasons: tuple[str, ...]
    recorded_determining: tuple[str, ...]
    recorded_revision: str
    outcome: str
    reasons: tuple[str, ...]
    determining: tuple[str, ...]
    revision: str

    @property
    def changed(self) -> bool:
        """Whether the other bundle decides otherwise (another outcome, or another reason)."""
        return (self.outcome, self.reasons) != (self.recorded, self.recorded_reasons)

    @property
    def entered(self) -> tuple[str, ...]:
        """Policies that determine the other bundle's decision and did not determine the recorded one."""
        return tuple(p for p in self.determining if p not in self.recorded_determining)

    @property
    def left(self) -> tuple[str, ...]:
        """Policies that determined the recorded decision and no longer determine it."""
        return tuple(p for p in self.recorded_determining if p not in self.determining)

    def as_json(self) -> dict[str, object]:
        """The row as JSON."""
        return {
            "intent_id": self.intent_id, "tenant": self.tenant, "run_id": self.run_id, "tool": self.tool,
            "resource": self.resource, "digest": self.digest,
            "recorded": {"outcome": self.recorded, "reasons": list(self.recorded_reasons),
                         "determining": list(self.recorded_determining), "revision": self.recorded_revision},
            "counterfactual": {"outcome": self.outcome, "reasons": list(self.reasons),
                               "determining": list(self.determining), "revision": self.revision},
            "changed": self.changed, "entered": list(self.entered), "left": list(self.left),
        }


def _decided_on(candidate: Candidate) -> tuple[EffectIntent, EffectIntent.PolicyDecided] | None:
    """The intent policy decided on, and its recorded decision (the last one that was not a pause)."""
    before: list[Event] = []
    normalized: EffectIntent | None = None
    decision: EffectIntent.PolicyDecided | None = None
    for event in candidate.events:
        if normalized is None:
            before.append(event)
            if isinstance(event, EffectIntent.CandidateNormalized):
                normalized = fold(before)
        elif isinstance(event, EffectIntent.PolicyDecided) and (
                decision is None or event.outcome != DecisionOutcome.PAUSE):
            decision = event
    if normalized is None or decision is None or normalized.state is not State.NORMALIZED:
        return None
    return normalized, decision


async def counterfactual(
    candidates: Sequence[Candidate], bundle: PolicyBundle, deployment: Deployment,
) -> list[Decided]:
    """Every recorded policy decision among ``candidates``, beside ``bundle``'s on the same evidence.

    Prior effects (for a bundle whose policies read them) are the effects of the same
    capability the selection's earlier candidates of the run completed.
    """
    done: Counter[tuple[str, str, str]] = Counter()
    rows = []
    for candidate in candidates:
        found = _decided_on(candidate)
        final = candidate.final()
        if found is not None:
            intent, recorded = found
            evidence = Evidence(
                run=await deployment.run(intent.tenant, intent.run_id),
                contract=await deployment.contract(intent.tool),
                prior_effects=done[(intent.tenant, intent.run_id, intent.tool)],
            )
            facts = Facts(facts=dict(recorded.facts)) if recorded.facts else None
            decision = evaluate_for(intent, bundle, facts, evidence=evidence)
            rows.append(Decided(
                intent_id=intent.intent_id, tenant=intent.tenant, run_id=intent.run_id, tool=intent.tool,
                resource="/".join(v for v in (intent.resource.get("type"), intent.resource.get("id")) if v),
                digest=intent.digest or "", recorded=str(recorded.outcome),
                recorded_reasons=tuple(recorded.reasons), recorded_determining=tuple(recorded.determining),
                recorded_revision=recorded.policy_revision, outcome=str(decision.outcome),
                reasons=tuple(decision.reasons), determining=tuple(decision.determining)[:16],
                revision=decision.revision))
        if final is not None and final.state is State.COMPLETED:
            done[(final.tenant, final.run_id, final.tool)] += 1
    return rows
