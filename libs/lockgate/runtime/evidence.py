"""What policy and the final gate know besides the intent: the run, the contract, prior
effects, the run's history."""

from __future__ import annotations

from datetime import UTC, datetime

from lockgate.authz.engine import PolicyBundle
from lockgate.authz.history import Authorized, Held, amount_of, destinations_of
from lockgate.authz.intents import Evidence, keeps_history
from lockgate.contracts.capability import CapabilityContract, EffectClass
from lockgate.contracts.offer import alive
from lockgate.intent.aggregate import EffectIntent
from lockgate.runtime.context import Ports
from lockgate.runtime.ports.history import Reading


async def gather(ports: Ports, intent: EffectIntent, *, with_prior_effects: bool,
                 now: datetime | None = None) -> Evidence:
    """The run the trusted host opened, the capability's contract, the run's prior effects,
    and whether the capability is still offered (registered, and its adapter's last
    heartbeat recent at ``now``; a registration that names no heartbeat is not judged).

    Prior effects are read only when a policy of the bundle asks for them.
    """
    prior = 0
    if with_prior_effects:
        prior = await ports.progress.prior_effects(intent.tenant, intent.run_id, intent.tool)
    registration = await ports.registry.registration(intent.tool)
    return Evidence(
        run=await ports.runs.get(intent.tenant, intent.run_id),
        contract=registration.contract if registration else None,
        prior_effects=prior,
        offered_now=registration is not None and (
            registration.alive_at is None or alive(registration.alive_at, now or datetime.now(UTC))),
    )


async def read_history(ports: Ports, intent: EffectIntent, bundle: PolicyBundle,
                       now: datetime) -> Reading | None:
    """The run's history as of now, without the intent's own hold (``None``: the bundle
    reads none of it, so none is read)."""
    reads, windows = keeps_history(bundle, intent)
    if not reads:
        return None
    return await ports.history.read(intent.tenant, intent.run_id, intent.actor, intent.intent_id,
                                    now, windows=windows)


def held(intent: EffectIntent, evidence: Evidence) -> Held:
    """What the history holds for an admitted intent: its capability, class and amount."""
    contract = evidence.contract
    return Held(intent.tool, intent.effect_class,
                amount_of(intent.normalized_arguments, contract.amount_argument if contract else None))


def authorized_in_history(intent: EffectIntent, contract: CapabilityContract | None) -> Authorized:
    """What the run's history notes of an intent the gate let go: where its reads come from
    and what data they are, where its writes go, whether a reviewer approved it."""
    return Authorized(
        intent_id=intent.intent_id, capability=intent.tool, effect_class=intent.effect_class,
        outside_results=contract.outside_results if contract else False,
        data_classes=contract.data_classes if contract else (),
        destinations=destinations_of(intent.normalized_arguments,
                                     contract.destination_arguments if contract else ()),
        approved=intent.approval_digest is not None,
    )


def brings_in(contract: CapabilityContract | None) -> bool:
    """Whether what the capability returns enters the run's history however policy decides
    it: content from outside, or data of a declared class that it reads (a write's data
    classes are what it sends, not what the run learns)."""
    if contract is None:
        return False
    reads = contract.effect_class in (EffectClass.READ, EffectClass.DERIVE)
    return contract.outside_results or (reads and bool(contract.data_classes))
