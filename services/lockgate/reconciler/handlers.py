"""The reconciler's handler."""

from __future__ import annotations

from lockgate.adapters.client import AdapterUnavailable
from lockgate.contracts.messages import QueryRequest
from lockgate.eventstore.base import RecordedEvent
from lockgate.intent.aggregate import EffectIntent, Event, State
from lockgate.intent.codec import decode_event
from lockgate.reconciler.domain import reconcile
from lockgate.runtime.context import Ports
from lockgate.runtime.service import Clock, Retry, backoff_s, decide_and_append


class ReconcilerHandlers:
    """Works every ``OutcomeUnknown``."""

    def __init__(self, ports: Ports, clock: Clock) -> None:
        self.ports = ports
        self.clock = clock

    async def unknown(self, recorded: RecordedEvent, deliveries: int) -> None:
        """Query the adapter by the intent's identity and record the finding."""
        event = decode_event(recorded)
        if not isinstance(event, EffectIntent.OutcomeUnknown):
            return

        async def step(intent: EffectIntent | None) -> list[Event]:
            if intent is None or intent.state is not State.UNKNOWN or not intent.intent_key:
                return []
            request = QueryRequest(
                tenant=intent.tenant,
                intent_id=intent.intent_id,
                intent_key=intent.intent_key,
                arguments=intent.normalized_arguments,
            )
            try:
                found = await self.ports.adapters.query(intent.tool, request)
            except AdapterUnavailable as exc:
                raise Retry(backoff_s(deliveries, base_s=1.0, cap_s=60.0), "query unanswered") from exc
            if found.finding not in ("found", "absent"):
                raise Retry(backoff_s(deliveries, base_s=1.0, cap_s=60.0), "query inconclusive")
            return reconcile(intent, event.attempt_id, found, cause=recorded.event_id, now=self.clock())

        await decide_and_append(self.ports.store, recorded.tenant, recorded.intent_id, step)
