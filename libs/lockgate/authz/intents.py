"""Cedar requests for effect intents: facts come from the adapter, never from the model."""

from __future__ import annotations

from lockgate.authz.engine import AuthzRequest, Decision, PolicyBundle, evaluate
from lockgate.contracts.messages import Facts
from lockgate.intent.aggregate import EffectIntent


def authz_request(intent: EffectIntent, facts: Facts) -> AuthzRequest:
    """The Cedar request for an intent: facts come from the adapter, never from the model."""
    kind = intent.resource.get("type", "resource")
    return AuthzRequest(
        tenant=intent.tenant,
        actor=intent.actor,
        capability=intent.tool,
        resource_type=kind[:1].upper() + kind[1:],
        resource_id=intent.resource.get("id", ""),
        resource_facts=dict(facts.facts),
        context={"effect_class": intent.effect_class, "digest": intent.digest or ""},
    )


def judge(bundle: PolicyBundle, intent: EffectIntent, facts: Facts) -> Decision:
    """Evaluate the bundle for an intent on the given facts."""
    return evaluate(bundle, authz_request(intent, facts))
