"""What policy and the final gate know besides the intent: the run, the contract, prior effects."""

from __future__ import annotations

from datetime import UTC, datetime

from lockgate.authz.intents import Evidence
from lockgate.contracts.offer import alive
from lockgate.intent.aggregate import EffectIntent
from lockgate.runtime.context import Ports


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
