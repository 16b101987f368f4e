"""Normalization's handler: ask the adapter (for the facts too), decide, append."""

from __future__ import annotations

from lockgate.contracts.messages import NormalizeRequest, NormalizeResult
from lockgate.core.clock import Clock
from lockgate.eventstore.base import RecordedEvent
from lockgate.intent.aggregate import EffectIntent, Event, State
from lockgate.intent.events import CandidateNormalized
from lockgate.intent.lineage import place
from lockgate.normalization.domain import decide, placed
from lockgate.runtime.context import Ports
from lockgate.runtime.ports.adapters import AdapterUnavailable

#: After this many deliveries without an adapter answer the candidate is refused
#: as unavailable instead of waiting forever.
GIVE_UP_AFTER = 8


class NormalizationHandlers:
    """Reacts to ``CandidateReceived``."""

    def __init__(self, ports: Ports, clock: Clock) -> None:
        self.ports = ports
        self.clock = clock

    async def received(self, recorded: RecordedEvent, deliveries: int) -> None:
        """Normalize the candidate ``recorded`` introduced."""

        async def step(intent: EffectIntent | None) -> list[Event]:
            if intent is None or intent.state is not State.PROPOSED:
                return []
            contract = await self.ports.registry.get(intent.tool)
            result: NormalizeResult | None = None
            if contract is not None and contract.revision == intent.contract_revision:
                run = await self.ports.runs.get(intent.tenant, intent.run_id)
                request = NormalizeRequest(
                    tenant=intent.tenant,
                    actor=intent.actor,
                    arguments=intent.arguments,
                    context=run.context if run else {},
                    with_facts=True,  # policy's evidence in the same round trip
                )
                try:
                    result = await self.ports.adapters.normalize(intent.tool, request)
                except AdapterUnavailable:
                    if deliveries < GIVE_UP_AFTER:
                        raise
            events = decide(intent, contract, result, cause=recorded.event_id, now=self.clock())
            normalized = next((e for e in events if isinstance(e, CandidateNormalized)), None)
            if normalized is None or not intent.follows:
                return events

            async def load(intent_id: str) -> EffectIntent | None:
                return await self.ports.intents.load(intent.tenant, intent_id)

            where = await place(intent, load, digest=normalized.digest,
                                effect_class=normalized.effect_class, destination=normalized.destination,
                                resource=normalized.resource, arguments=normalized.arguments)
            return placed(events, where)

        await self.ports.intents.decide(recorded.tenant, recorded.intent_id, step, trigger=recorded)
