"""Policy's handler: fresh facts from the adapter, Cedar, append the decision."""

from __future__ import annotations

from lockgate.adapters.client import AdapterUnavailable
from lockgate.authz.source import BundleSource
from lockgate.contracts.messages import Facts, FactsRequest
from lockgate.eventstore.base import RecordedEvent
from lockgate.intent.aggregate import EffectIntent, Event, State
from lockgate.intent.codec import decode_event
from lockgate.policy.domain import decide, expire_pause
from lockgate.runtime.context import Ports
from lockgate.runtime.service import Clock, Retry, decide_and_append

#: Deliveries without facts before the intent is paused for missing evidence.
PAUSE_AFTER = 5


class PolicyHandlers:
    """Reacts to ``CandidateNormalized``."""

    def __init__(self, ports: Ports, bundles: BundleSource, clock: Clock) -> None:
        self.ports = ports
        self.bundles = bundles
        self.clock = clock

    async def normalized(self, recorded: RecordedEvent, deliveries: int) -> None:
        """Decide on the intent ``recorded`` normalized."""

        async def step(intent: EffectIntent | None) -> list[Event]:
            if intent is None or intent.state is not State.NORMALIZED or intent.decision is not None:
                return []
            facts: Facts | None = None
            try:
                facts = await self.ports.adapters.facts(
                    intent.tool,
                    FactsRequest(tenant=intent.tenant, actor=intent.actor, resource=intent.resource),
                )
            except AdapterUnavailable:
                if deliveries < PAUSE_AFTER:
                    raise
            return decide(intent, self.bundles.current(), facts, cause=recorded.event_id, now=self.clock())

        await decide_and_append(self.ports.store, recorded.tenant, recorded.intent_id, step)

    async def paused(self, recorded: RecordedEvent) -> None:
        """Ask again for the evidence a paused decision lacks; deny once the pause times out."""
        decided = decode_event(recorded)
        if not isinstance(decided, EffectIntent.PolicyDecided) or decided.outcome != "pause":
            return
        bundle = self.bundles.current()

        async def step(intent: EffectIntent | None) -> list[Event]:
            if intent is None or intent.state is not State.PAUSED:
                return []
            try:
                facts = await self.ports.adapters.facts(
                    intent.tool,
                    FactsRequest(tenant=intent.tenant, actor=intent.actor, resource=intent.resource),
                )
            except AdapterUnavailable:
                expired = expire_pause(intent, bundle, cause=recorded.event_id, now=self.clock())
                if expired:
                    return expired
                raise Retry(bundle.config.pause.recheck_s, "evidence still missing") from None
            return decide(intent, bundle, facts, cause=recorded.event_id, now=self.clock())

        await decide_and_append(self.ports.store, recorded.tenant, recorded.intent_id, step)
