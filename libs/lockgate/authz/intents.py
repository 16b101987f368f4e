"""Cedar requests for effect intents: facts come from the adapter, never from the model.

Nothing of the candidate's text reaches a decision except through the typed,
normalized request: the actor and its roles come from the run the trusted host
opened, the resource's attributes from the adapter's fresh facts, the context from
the contract and the record.
"""

from __future__ import annotations

from dataclasses import dataclass

from lockgate.authz.budgets import NO_LIMIT
from lockgate.authz.engine import (
    AuthzRequest,
    Decision,
    PolicyBundle,
    evaluate,
    evaluate_approval,
)
from lockgate.authz.history import HistoryFacts, amount_of, destinations_of, untrusted
from lockgate.contracts.capability import CapabilityContract
from lockgate.contracts.messages import Facts, RunContext
from lockgate.intent.aggregate import EffectIntent


@dataclass(frozen=True)
class Evidence:
    """What a decision may use besides the intent and the resource's facts."""

    run: RunContext | None = None
    contract: CapabilityContract | None = None
    prior_effects: int = 0
    budget_remaining: int = NO_LIMIT
    #: The capability's adapter is alive now (it was when the turn offered it).
    offered_now: bool = True
    #: What the run has done and seen, as of this decision (``lockgate.authz.history``);
    #: ``None`` where no policy that reads it applies: the request then carries none (a
    #: policy that read it anyway would meet an evaluation error, which denies).
    history: HistoryFacts | None = None


#: No run, no contract, no prior effects: what a bare evaluation knows.
NO_EVIDENCE = Evidence()


def resource_type(intent: EffectIntent) -> str:
    """The Cedar entity type of the intent's resource (its first letter upper-cased)."""
    kind = intent.resource.get("type", "resource")
    return kind[:1].upper() + kind[1:]


def keeps_history(bundle: PolicyBundle, intent: EffectIntent) -> tuple[bool, bool]:
    """Whether the bundle reads the run's history for this intent, and any window beyond the run."""
    return bundle.history_for(intent.tool, resource_type(intent))


def authz_request(intent: EffectIntent, facts: Facts, evidence: Evidence = NO_EVIDENCE, *,
                  history_reads: frozenset[str] | None = None) -> AuthzRequest:
    """The Cedar request for an intent (``history_reads``: the attributes of the run's history
    it carries, ``None``: all; see ``PolicyBundle.history_reads``)."""
    run = evidence.run
    contract = evidence.contract
    destinations = destinations_of(intent.normalized_arguments,
                                   contract.destination_arguments if contract else ())
    return AuthzRequest(
        tenant=intent.tenant,
        actor=intent.actor,
        capability=intent.tool,
        resource_type=resource_type(intent),
        resource_id=intent.resource.get("id", ""),
        resource_facts=dict(facts.facts),
        context={
            "effect_class": intent.effect_class,
            "digest": intent.digest or "",
            "destination": intent.destination,
            "data_classes": sorted(contract.data_classes) if contract else [],
            "stage": run.stage if run else "",
            "prior_effects": evidence.prior_effects,
            "budget_remaining": evidence.budget_remaining,
            "destinations": list(destinations),
            "untrusted_destinations": list(untrusted(destinations, run.context.values() if run else ())),
            "amount": amount_of(intent.normalized_arguments, contract.amount_argument if contract else None),
            **({"history": evidence.history.context(history_reads)}
               if evidence.history is not None else {}),
        },
        roles=tuple(run.roles) if run else (),
        delegation=(run.delegation or "") if run else "",
    )


def judge(
    bundle: PolicyBundle, intent: EffectIntent, facts: Facts, evidence: Evidence = NO_EVIDENCE
) -> Decision:
    """Evaluate the bundle for an intent on the given facts and evidence."""
    return evaluate(bundle, authz_request(intent, facts, evidence, history_reads=bundle.history_reads))


def approval_request(intent: EffectIntent, reviewer: str, evidence: Evidence = NO_EVIDENCE) -> AuthzRequest:
    """The Cedar request for ``reviewer`` approving ``intent``.

    The principal is the reviewer as an actor of the intent's tenant; the resource
    carries the facts the policy decision recorded; the context is the decision's,
    plus who proposed it and whether the reviewer is that person (or whom it acts for).
    """
    base = authz_request(intent, Facts(facts=dict(intent.facts)), evidence)
    delegation = (evidence.run.delegation or "") if evidence.run else ""
    return AuthzRequest(
        tenant=base.tenant,
        actor=reviewer,
        capability=base.capability,
        resource_type=base.resource_type,
        resource_id=base.resource_id,
        resource_facts=base.resource_facts,
        context=review_context(base.context, reviewer, intent.actor, delegation),
    )


def review_context(
    context: dict[str, object], reviewer: str, proposer: str, delegation: str = ""
) -> dict[str, object]:
    """``context`` with what a review decision adds: the proposer, and whether it is the reviewer."""
    return {
        **context,
        "proposer": proposer,
        "self_approval": reviewer in {proposer, delegation} - {""},
    }


def judge_approval(
    bundle: PolicyBundle, intent: EffectIntent, reviewer: str, evidence: Evidence = NO_EVIDENCE
) -> Decision:
    """May ``reviewer`` approve ``intent`` under ``bundle``?"""
    return evaluate_approval(bundle, approval_request(intent, reviewer, evidence))
