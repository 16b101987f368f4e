"""The executor's handlers: gate, dispatch, reports, deadlines."""

from __future__ import annotations

import contextlib
import logging
import re
from dataclasses import replace

import msgspec
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError

from lockgate.adapters.client import AdapterUnavailable
from lockgate.adapters.sdk import interrupt_subject
from lockgate.authz.intents import judge
from lockgate.authz.ledger import BudgetLedger
from lockgate.authz.source import BundleSource
from lockgate.contracts.disclosure import model_view
from lockgate.contracts.messages import AttemptReport, FactsRequest, Refusal, Withdraw
from lockgate.core.ids import derived_id, is_subject_token
from lockgate.eventstore.base import RecordedEvent
from lockgate.executor.domain import gate, on_deadline, on_report, order_for, withdraw
from lockgate.intent.aggregate import EffectIntent, Event, State
from lockgate.intent.codec import decode_event
from lockgate.runtime.context import Ports
from lockgate.runtime.evidence import gather
from lockgate.runtime.service import Clock, Retry, decide_and_append, load_intent

log = logging.getLogger("lockgate.executor")


def exec_subject(capability: str) -> str:
    """Where orders for ``capability`` are published."""
    return f"lg.exec.{capability}"


def lock_key(intent: EffectIntent) -> str:
    """The key of the intent's resource in the locks bucket."""
    raw = f"{intent.tenant}.{intent.resource.get('type', 'resource')}.{intent.resource.get('id', '')}"
    return _NOT_KEY.sub("_", raw)


_NOT_KEY = re.compile(r"[^-/_=.a-zA-Z0-9]")
#: States in which an intent still holds its resource: about to be sent, in flight,
#: or in flight with an unknown outcome (the resource's state is uncertain).
_HOLDING = frozenset({State.ALLOWED, State.AUTHORIZED, State.SENT, State.UNKNOWN})
#: Reports that end an attempt for good; the report handler releases the lock itself.
_ENDS_ATTEMPT = (
    EffectIntent.EffectCompleted, EffectIntent.AttemptRejected, EffectIntent.AttemptInterrupted,
)


class ExecutorHandlers:
    """The last service before the world."""

    def __init__(self, ports: Ports, bundles: BundleSource, clock: Clock) -> None:
        self.ports = ports
        self.bundles = bundles
        self.clock = clock

    async def ready(self, recorded: RecordedEvent) -> None:
        """Run the final gate for an intent that policy or a reviewer allowed."""
        trigger = decode_event(recorded)
        if isinstance(trigger, EffectIntent.PolicyDecided) and trigger.outcome != "allow":
            return  # denied, paused, or waiting for a reviewer: not the gate's turn
        if isinstance(trigger, EffectIntent.Reconciled) and trigger.resolution != "retry":
            return  # settled, or waiting for an operator

        async def step(intent: EffectIntent | None) -> list[Event]:
            if intent is None or intent.state is not State.ALLOWED:
                return []
            contract = await self.ports.registry.get(intent.tool)
            if contract is not None and contract.serialize_per_resource:
                await self._hold(intent)  # before the facts: they must be fresh under the lock
            try:
                facts = await self.ports.adapters.facts(
                    intent.tool,
                    FactsRequest(tenant=intent.tenant, actor=intent.actor, resource=intent.resource),
                )
            except AdapterUnavailable as exc:
                raise Retry(1.0, "no fresh facts for the final gate") from exc
            bundle = self.bundles.current()
            evidence = await gather(self.ports, intent, with_prior_effects=bundle.uses_prior_effects)
            if bundle.config.budgets:
                left = await BudgetLedger(self.ports.budgets).remaining(
                    bundle.config.budgets, intent, self.clock())
                evidence = replace(evidence, budget_remaining=left)
            decision = judge(bundle, intent, facts, evidence)
            return gate(intent, contract, facts, decision, cause=recorded.event_id, now=self.clock(),
                        budget_held=await self._budget_held(intent))

        await decide_and_append(self.ports.store, recorded.tenant, recorded.intent_id, step)

    async def _budget_held(self, intent: EffectIntent) -> bool:
        """True when every budget hold of the intent's decision is still in place."""
        for key in intent.reservations:
            try:
                entry = await self.ports.budgets.get(key)
            except KeyNotFoundError:
                return False
            if intent.intent_id.encode() not in (entry.value or b""):
                return False
        return True

    async def _hold(self, intent: EffectIntent) -> None:
        """Take the intent's resource lock, or ask to be tried again while another holds it.

        Raises:
            Retry: another intent holds the resource.
        """
        key = lock_key(intent)
        mine = intent.intent_id.encode()
        try:
            await self.ports.locks.create(key, mine)
            return
        except KeyWrongLastSequenceError:
            pass
        try:
            holder = (await self.ports.locks.get(key)).value
        except KeyNotFoundError:
            raise Retry(0.05, "resource lock just released") from None
        if holder != mine:
            raise Retry(0.25, "another effect on this resource is in flight")

    async def settled(self, recorded: RecordedEvent) -> None:
        """Release the resource lock of an intent that no longer needs it."""
        intent = await load_intent(self.ports.store, recorded.tenant, recorded.intent_id)
        if intent is None or intent.state in _HOLDING:
            return
        await self._release(intent)

    async def _release(self, intent: EffectIntent) -> None:
        """Free the intent's resource lock, if it holds it."""
        if not intent.resource:
            return
        key = lock_key(intent)
        try:
            entry = await self.ports.locks.get(key)
        except KeyNotFoundError:
            return
        if entry.value == intent.intent_id.encode():
            with contextlib.suppress(KeyWrongLastSequenceError):
                await self.ports.locks.delete(key, last=entry.revision)

    async def withdraw(self, tenant: str, intent_id: str, body: bytes) -> bytes:
        """Stop a candidate by its state (request/reply); the reply is what the model now sees."""
        try:
            cmd = msgspec.json.decode(body, type=Withdraw)
        except msgspec.MsgspecError as exc:
            return msgspec.json.encode(Refusal("withdraw.malformed", str(exc)[:200]))
        if not (is_subject_token(tenant) and is_subject_token(intent_id)):
            return msgspec.json.encode(Refusal("withdraw.unknown-intent"))
        cause = derived_id("withdraw", tenant, intent_id, cmd.by)

        async def step(intent: EffectIntent | None) -> list[Event]:
            if intent is None:
                return []
            return withdraw(intent, by=cmd.by[:64], why=cmd.why, cause=cause, now=self.clock())

        events = await decide_and_append(self.ports.store, tenant, intent_id, step)
        intent = await load_intent(self.ports.store, tenant, intent_id)
        if intent is None:
            return msgspec.json.encode(Refusal("withdraw.unknown-intent"))
        await self._ask_to_stop(intent, events)
        view = model_view(intent, await self.ports.registry.get(intent.tool))
        if view is None:
            return msgspec.json.encode(Refusal("withdraw.in-progress", intent.state.value))
        return msgspec.json.encode(view)

    async def _ask_to_stop(self, intent: EffectIntent, events: list[Event]) -> None:
        """Pass a recorded ``InterruptionRequested`` on to the workers of its capability.

        Best effort and on the record already: an adapter that cannot stop lets the
        attempt finish, and its report says how it ended.
        """
        for event in events:
            if isinstance(event, EffectIntent.InterruptionRequested):
                await self.ports.nc.publish(
                    interrupt_subject(intent.tool),
                    msgspec.json.encode(
                        {"intent_id": intent.intent_id, "attempt_id": event.attempt_id}),
                )

    async def dispatch(self, recorded: RecordedEvent) -> None:
        """Publish the order of an authorized attempt (deduplicated by attempt id)."""
        authorized = decode_event(recorded)
        if not isinstance(authorized, EffectIntent.ExecutionAuthorized):
            return
        intent = await load_intent(self.ports.store, recorded.tenant, recorded.intent_id)
        order = order_for(intent, authorized) if intent else None
        if order is None:
            return  # the attempt moved on (reported, refused, unknown): nothing to send
        await self.ports.js.publish(
            exec_subject(order.capability),
            msgspec.json.encode(order),
            headers={"Nats-Msg-Id": f"order-{order.attempt_id}"},
        )

    async def report(self, data: bytes, sequence: int) -> None:
        """Record an adapter's attempt report as an event."""
        try:
            report = msgspec.json.decode(data, type=AttemptReport)
        except msgspec.MsgspecError as exc:
            log.error("unreadable report at sequence %s dropped: %s", sequence, exc)
            return
        cause = derived_id("report", report.attempt_id, report.stage)

        seen: list[EffectIntent] = []

        async def step(intent: EffectIntent | None) -> list[Event]:
            if intent is None:
                log.warning("report for unknown intent %s", report.intent_id)
                return []
            seen[:] = [intent]
            contract = await self.ports.registry.get(intent.tool)
            return on_report(intent, report, contract, cause=cause, now=self.clock())

        events = await decide_and_append(self.ports.store, report.tenant, report.intent_id, step)
        if seen:
            await self._ask_to_stop(seen[0], events)
        if seen and any(isinstance(e, _ENDS_ATTEMPT) for e in events):
            # The attempt is over: free its resource here rather than by another load.
            await self._release(seen[0])

    async def deadline(self, recorded: RecordedEvent) -> None:
        """At an attempt's deadline, turn silence into ``OutcomeUnknown``."""
        authorized = decode_event(recorded)
        if not isinstance(authorized, EffectIntent.ExecutionAuthorized):
            return
        remaining = (authorized.deadline_at - self.clock()).total_seconds()
        if remaining > 0:
            raise Retry(remaining + 0.05, "attempt deadline not reached")

        async def step(intent: EffectIntent | None) -> list[Event]:
            if intent is None:
                return []
            return on_deadline(intent, authorized.attempt_id, cause=recorded.event_id, now=self.clock())

        await decide_and_append(self.ports.store, recorded.tenant, recorded.intent_id, step)
