"""The reconciler's handlers: queries by identity, and operators' resolutions."""

from __future__ import annotations

import msgspec

from lockgate.contracts.messages import (
    NotResolved,
    QueryRequest,
    Recorded,
    Refusal,
    ResolveOutcome,
)
from lockgate.contracts.subjects import NotACommandSubject, parse_resolve
from lockgate.contracts.vocabulary import QueryFinding
from lockgate.core.clock import Clock
from lockgate.core.ids import derived_id
from lockgate.eventstore.base import ConcurrencyConflict, EventStoreUnavailable, RecordedEvent
from lockgate.intent.aggregate import EffectIntent, Event, State
from lockgate.intent.codec import decode_event
from lockgate.intent.events import OutcomeUnknown
from lockgate.reconciler.domain import (
    ResolutionRefused,
    not_resolved,
    reconcile,
    resolution_id,
    resolve,
)
from lockgate.runtime.context import Ports
from lockgate.runtime.ports.adapters import AdapterUnavailable
from lockgate.runtime.service import Retry
from lockgate.runtime.settlement import backoff_s


class ReconcilerHandlers:
    """Works every ``OutcomeUnknown``; records operators' resolutions."""

    def __init__(self, ports: Ports, clock: Clock) -> None:
        self.ports = ports
        self.clock = clock

    async def unknown(self, recorded: RecordedEvent, deliveries: int) -> None:
        """Query the adapter by the intent's identity and record the finding."""
        event = decode_event(recorded)
        if not isinstance(event, OutcomeUnknown):
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
            if QueryFinding(found.finding) is QueryFinding.UNKNOWN:
                # Wait and ask again: an inconclusive answer is not evidence either way.
                raise Retry(backoff_s(deliveries, base_s=1.0, cap_s=60.0), "query inconclusive")
            contract = await self.ports.registry.get(intent.tool)
            return reconcile(
                intent, event.attempt_id, found, contract, cause=recorded.event_id, now=self.clock()
            )

        await self.ports.intents.decide(recorded.tenant, recorded.intent_id, step, trigger=recorded)

    async def resolve(self, subject: str, body: bytes) -> bytes:
        """An operator's resolution (request/reply); the reply says what was recorded.

        The operator is the subject's last token: the broker lets each operator publish
        only subjects that end in its own name. Never lost silently: the reply is
        ``Recorded``, or ``NotResolved`` with its code; when the reconciler (or a late
        report, or another operator) settled the outcome first, even while this command
        was being decided, ``NotResolved`` carries that finding, its receipt and who
        recorded it.
        """
        try:
            command = parse_resolve(subject)
            cmd = msgspec.json.decode(body, type=ResolveOutcome)
        except NotACommandSubject:
            return msgspec.json.encode(Refusal("reconcile.unknown-intent"))
        except msgspec.MsgspecError as exc:
            return msgspec.json.encode(Refusal("reconcile.malformed", str(exc)[:200]))
        tenant, intent_id, by = command.tenant, command.intent_id, command.principal
        cause = derived_id("resolve", tenant, intent_id, cmd.finding, by, cmd.why)

        async def step(intent: EffectIntent | None) -> list[Event]:
            contract = await self.ports.registry.get(intent.tool) if intent else None
            return resolve(intent, finding=cmd.finding, by=by, why=cmd.why,
                           receipt=cmd.receipt, contract=contract, cause=cause, now=self.clock())

        try:
            events = (await self.ports.intents.decide(tenant, intent_id, step)).events
        except ResolutionRefused as refused:
            settled = refused.intent.settlement if refused.intent is not None else None
            if settled is not None and settled.event_id == resolution_id(cause):
                # This very command, recorded before: its first reply was lost.
                return msgspec.json.encode(Recorded(settled.event))
            return msgspec.json.encode(not_resolved(refused))
        except ConcurrencyConflict:
            return msgspec.json.encode(NotResolved(
                error="reconcile.contended", detail="the intent kept changing; ask again"))
        except EventStoreUnavailable as exc:
            return msgspec.json.encode(NotResolved(error="reconcile.unavailable", detail=str(exc)[:200]))
        if not events:  # pragma: no cover - resolve decides an event or refuses
            return msgspec.json.encode(NotResolved(error="reconcile.nothing-open"))
        return msgspec.json.encode(Recorded(type(events[0]).__name__))
