"""The executor's handlers: gate, dispatch, reports, deadlines."""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace

import msgspec

from lockgate.authz.intents import judge, keeps_history
from lockgate.authz.source import BundleSource
from lockgate.contracts.messages import AttemptReport, FactsRequest, Refusal, Withdraw
from lockgate.contracts.subjects import NotACommandSubject, parse_report_subject, parse_withdraw
from lockgate.contracts.vocabulary import DecisionOutcome, ReportStage, Resolution
from lockgate.core.bounded import keep
from lockgate.core.clock import Clock
from lockgate.core.ids import derived_id, is_subject_token
from lockgate.eventstore.base import RecordedEvent
from lockgate.executor.claims import answer_claim
from lockgate.executor.domain import (
    check_report,
    decided_before,
    gate,
    on_deadline,
    on_report,
    order_for,
    refuse_report,
    timed_attempt,
    withdraw,
)
from lockgate.intent.aggregate import EffectIntent, Event, State
from lockgate.intent.codec import decode_event
from lockgate.intent.disclosure import model_view
from lockgate.intent.events import (
    ExecutionAuthorized,
    InterruptionRequested,
    PolicyDecided,
    Reconciled,
)
from lockgate.intent.locks import lock_key, may_hold
from lockgate.runtime.context import Ports
from lockgate.runtime.evidence import authorized_in_history, brings_in, gather, read_history
from lockgate.runtime.ports.adapters import AdapterUnavailable
from lockgate.runtime.ports.history import is_history_key
from lockgate.runtime.ports.intents import Decision
from lockgate.runtime.service import Retry, Unaddressed

log = logging.getLogger("lockgate.executor")


class AttemptDue(Retry):
    """The trigger of an attempt still open, asked for again at the attempt's deadline.

    A timer, not a failure: the gate's durable holds one such message per open attempt.
    """

    def __init__(self, delay_s: float) -> None:
        super().__init__(delay_s, "attempt deadline not reached")


#: The run an operator names to withdraw any candidate of its tenants.
ANY_RUN = "_"
#: Agent runtimes' users (``agent-<tenant>``) may withdraw only within a run they name.
AGENT_USER_PREFIX = "agent-"
#: Intents whose lock this process knows about, at most this many (oldest forgotten).
_LOCKS_KNOWN = 65_536


class ExecutorHandlers:
    """The last service before the world."""

    def __init__(
        self, ports: Ports, bundles: BundleSource, clock: Clock, *, report_key: bytes
    ) -> None:
        self.ports = ports
        self.bundles = bundles
        self.clock = clock
        #: Signs each order's report token; never logged, never in an event.
        self._report_key = report_key
        #: intent id → the lock key it took in this process, or None once this process
        #: knows it holds none (released here, or its contract does not serialize). Lets
        #: the lock durable skip a load for most events; an unknown intent is loaded.
        self._locks: OrderedDict[str, str | None] = OrderedDict()
        self._releasing: set[str] = set()
        #: Attempts whose order this process published (a trigger handed again sends the rest).
        self._sent: OrderedDict[str, None] = OrderedDict()
        #: attempt id → where to acknowledge the trigger this process holds as its timer.
        self._timers: OrderedDict[str, str] = OrderedDict()
        #: Attempts this process saw end the intent (a report): nothing left to time.
        self._ended: OrderedDict[str, None] = OrderedDict()

    async def ready(self, recorded: RecordedEvent, deliveries: int = 1, *, timer: str = "") -> None:
        """Run the final gate for an intent that policy or a reviewer allowed, and time what
        it authorized.

        The trigger of an attempt the gate authorized is that attempt's timer: it is asked
        for again (``AttemptDue``) until the attempt's deadline, where an attempt still
        open becomes ``OutcomeUnknown``. Handed again before then (the process died after
        the authorization was appended), it sends the order if this process has not.

        A trigger handed again (``deliveries`` > 1: the timer, or a delivery that failed or
        died) is decided on the leader's record: the gate takes a lock before it decides,
        and an old view (a replica behind the leader, what this process knew long ago) that
        shows the intent allowed while it has long settled would take its lock for nothing.

        ``timer``: where the trigger is acknowledged (its reply subject). When this process
        records the end of the attempt the trigger times (the adapter's report), it
        acknowledges the trigger there and then, instead of having it handed back at the
        deadline for nothing: at steady load that is a delivery, a lock check and an
        acknowledgement fewer per effect, and no timer waiting per effect of the last
        deadline's worth. Another replica's report leaves the timer to run out as before.

        Raises:
            AttemptDue: the attempt this trigger authorized is open and not yet due.
        """
        trigger = decode_event(recorded)
        if isinstance(trigger, PolicyDecided) and trigger.outcome != DecisionOutcome.ALLOW:
            return  # denied, paused, or waiting for a reviewer: not the gate's turn
        if isinstance(trigger, Reconciled) and trigger.resolution != Resolution.RETRY:
            return  # settled, or waiting for an operator

        # A lock taken by a run of the step stays taken when a conflict runs it again.
        took = False

        async def step(intent: EffectIntent | None) -> tuple[list[Event], bool]:
            """The gate's events, and whether this decision took the intent's lock."""
            nonlocal took
            if intent is None or intent.state is not State.ALLOWED:
                return [], took
            contract = await self.ports.registry.get(intent.tool)
            if contract is not None and contract.serialize_per_resource:
                await self._hold(intent)  # before the facts: they must be fresh under the lock
                took = True
            else:
                self._know(intent.intent_id, None)
            try:
                facts = await self.ports.adapters.facts(
                    intent.tool,
                    FactsRequest(tenant=intent.tenant, actor=intent.actor, resource=intent.resource),
                )
            except AdapterUnavailable as exc:
                raise Retry(1.0, "no fresh facts for the final gate") from exc
            bundle = self.bundles.current()
            decision = decided_before(bundle, intent, facts)
            if decision is None:
                evidence = await gather(self.ports, intent, with_prior_effects=bundle.uses_prior_effects,
                                        now=self.clock())
                if bundle.config.budgets:
                    left = await self.ports.budgets.remaining(bundle.config.budgets, intent, self.clock())
                    evidence = replace(evidence, budget_remaining=left)
                reading = await read_history(self.ports, intent, bundle, self.clock())
                if reading is not None:  # as of now: an effect completed meanwhile counts
                    evidence = replace(evidence, history=reading.facts)
                decision = judge(bundle, intent, facts, evidence)
            return gate(intent, contract, facts, decision, cause=recorded.event_id, now=self.clock(),
                        budget_held=await self._budget_held(intent)), took

        decided = await self.ports.intents.decide_with(
            recorded.tenant, recorded.intent_id, step, trigger=recorded, latest=deliveries > 1)
        after = await self._after_gate(decided)
        if after is not None:
            await self._time(recorded, after, timer)

    async def _after_gate(self, decided: Decision[bool]) -> EffectIntent | None:
        """Send the order the gate authorized; free a lock the gate took for nothing, or
        one a refusal ended; return the intent as it is now on the record."""
        after, events, held = decided.after, decided.events, decided.result
        if after is None:
            return None
        authorized = next((e for e in events if isinstance(e, ExecutionAuthorized)), None)
        if authorized is not None:
            await self._send_order(after, authorized)
        elif held and not events and may_hold(after):
            # The lock was taken on a view that showed the intent allowed, and the step ran
            # again (a conflict) on one that shows it past the gate: both may be a replica's
            # view behind the leader, where the effect has settled and its lock was freed
            # (the trigger handed again at its attempt's deadline, say). Only the leader's
            # record says whether the lock just taken is this intent's to keep.
            after = await self._latest(after)
        ended = bool(held) or after.state is State.REFUSED
        if not may_hold(after) and (ended or await self._serializes(after)):
            # Refused (now, or before a crash that left the lock: this trigger is handed
            # again, and the lock durable is not handed GateRefused), or found past the
            # gate after the lock was taken (withdrawn meanwhile, or settled long ago on
            # the leader), or a trigger handed again after a delivery that took the lock
            # and then failed or died (a sweep: once per serialized effect, at its deadline,
            # mostly for a lock another process freed long ago, so the lock's leader is
            # asked at once).
            await self._release_if_done(after, (), sweep=not ended)
        return after

    async def _latest(self, intent: EffectIntent) -> EffectIntent:
        """The intent as the store's leader has it now."""
        return await self.ports.intents.load(intent.tenant, intent.intent_id, latest=True) or intent

    async def _serializes(self, intent: EffectIntent) -> bool:
        """True when ``intent`` has ended for good and may hold a lock: its contract
        serializes its resource (and is still registered to say so). Only a terminal state is final: an intent waiting for an operator, say, may be
        allowed again and take its lock again, which a sweep on an old view must not free."""
        if not intent.state.terminal or not intent.resource:
            return False
        contract = await self.ports.registry.get(intent.tool)
        return contract is not None and contract.serialize_per_resource

    async def _time(self, recorded: RecordedEvent, intent: EffectIntent, timer: str = "") -> None:
        """Hold the trigger of the attempt it authorized until that attempt's deadline;
        there, turn an attempt still open into ``OutcomeUnknown``.

        Raises:
            AttemptDue: the attempt is open and not yet due.
        """
        attempt = timed_attempt(intent, recorded.event_id)
        if attempt is None or attempt.deadline_at is None:
            return  # settled, or authorized on another trigger: nothing to time here
        if attempt.attempt_id in self._ended:
            return  # its report was recorded here while the gate finished: nothing to time
        remaining = (attempt.deadline_at - self.clock()).total_seconds()
        if remaining > 0:
            if attempt.attempt_id not in self._sent:
                # Handed again after the authorization was appended, by a process that
                # died before its order went out (or another replica's): the order goes
                # now. The broker drops a second publish of it within its duplicate
                # window, and an adapter's check of each order stops one past it.
                authorized = await self._authorization(recorded, attempt.attempt_id)
                if authorized is not None:
                    await self._send_order(intent, authorized)
            if timer:
                keep(self._timers, attempt.attempt_id, timer, _LOCKS_KNOWN)
            raise AttemptDue(remaining + 0.05)

        async def step(current: EffectIntent | None) -> list[Event]:
            if current is None:
                return []
            return on_deadline(current, attempt.attempt_id, cause=recorded.event_id, now=self.clock())

        await self.ports.intents.decide(recorded.tenant, recorded.intent_id, step, trigger=recorded)

    async def _authorization(
        self, recorded: RecordedEvent, attempt_id: str
    ) -> ExecutionAuthorized | None:
        """The ``ExecutionAuthorized`` of ``attempt_id`` on the record."""
        events = await self.ports.intents.events(recorded.tenant, recorded.intent_id,
                                                 at_least=recorded.version)
        return next((e for e in events if isinstance(e, ExecutionAuthorized)
                     and e.attempt_id == attempt_id), None)

    async def _budget_held(self, intent: EffectIntent) -> bool:
        """True when every budget hold of the intent's decision is still in place (its
        holds in the run's history are no budget's: the gate reads that history itself)."""
        for key in intent.reservations:
            if not is_history_key(key) and not await self.ports.budgets.holds(key, intent.intent_id):
                return False
        return True

    async def _hold(self, intent: EffectIntent) -> None:
        """Take the intent's resource lock, or ask to be tried again while another holds it.

        Raises:
            Retry: another intent holds the resource.
        """
        key = lock_key(intent)
        if not await self.ports.locks.take(key, intent.intent_id.encode()):
            raise Retry(0.25, "another effect on this resource is in flight")
        self._know(intent.intent_id, key)

    def _know(self, intent_id: str, key: str | None) -> None:
        keep(self._locks, intent_id, key, _LOCKS_KNOWN)

    async def settled(self, recorded: RecordedEvent) -> None:
        """Release the lock of an intent whose hold the recorded event may have ended.

        The lock durable consumes every event that can end a hold outside the executor's
        own triggers (``ENDS_HOLD_ELSEWHERE``), so a process killed between such an append
        and its own release leaves nothing behind; the gate and the reports free the others
        before their trigger is acknowledged, and again when it is handed again.
        Idempotent: the lock is deleted only while this intent is its holder, and only when
        the intent, as the record has it now, no longer holds its resource.
        """
        if recorded.intent_id in self._locks and self._locks[recorded.intent_id] is None:
            return  # this process released it already, or never took one
        intent = await self.ports.intents.load(recorded.tenant, recorded.intent_id, trigger=recorded)
        if intent is None or may_hold(intent):
            return
        await self._release(intent)

    async def _release_if_done(
        self, intent: EffectIntent, events: Sequence[Event], *, sweep: bool = False
    ) -> None:
        """The fast path: free the lock right after an append that ended the intent's hold.

        ``intent``: as the record has it after ``events`` were appended (none: as it was
        decided on); the lock goes if it no longer holds its resource. ``events`` name the
        moment between an append and its release (``lockgate.testing.crashpoints`` dies
        there). ``sweep``: as ``Locks.release``.
        """
        if self._locks.get(intent.intent_id, "") is None:
            return
        if not may_hold(intent):
            await self._release(intent, sweep=sweep)

    async def _release(self, intent: EffectIntent, *, sweep: bool = False) -> None:
        """Free the intent's resource lock, if it holds it.

        The fast path and the lock durable may both get here for one intent at once;
        the second waits for nothing (the first releases, or fails and is redelivered).
        """
        if not intent.resource or intent.intent_id in self._releasing:
            return
        self._releasing.add(intent.intent_id)
        try:
            await self.ports.locks.release(lock_key(intent), intent.intent_id.encode(), sweep=sweep)
        finally:
            self._releasing.discard(intent.intent_id)
        self._know(intent.intent_id, None)

    async def withdraw(self, subject: str, body: bytes) -> bytes:
        """Stop a candidate by its state (request/reply); the reply is what the model now sees.

        Who asks is the subject's last token (the broker lets each user publish only its
        own). An agent runtime may stop only candidates of the run it names; an operator
        names the run ``_`` and may stop any candidate of the tenants it operates.
        """
        try:
            command = parse_withdraw(subject)
            cmd = msgspec.json.decode(body, type=Withdraw)
        except NotACommandSubject:
            return msgspec.json.encode(Refusal("withdraw.unknown-intent"))
        except msgspec.MsgspecError as exc:
            return msgspec.json.encode(Refusal("withdraw.malformed", str(exc)[:200]))
        tenant, intent_id, by = command.tenant, command.intent_id, command.principal
        cause = derived_id("withdraw", tenant, intent_id, by)

        def in_scope(intent: EffectIntent) -> bool:
            if command.run_id == intent.run_id:
                return True
            return command.run_id == ANY_RUN and not by.startswith(AGENT_USER_PREFIX)

        async def step(intent: EffectIntent | None) -> list[Event]:
            if intent is None or not in_scope(intent):
                return []
            return withdraw(intent, by=by, why=cmd.why, cause=cause, now=self.clock())

        decided = await self.ports.intents.decide(tenant, intent_id, step)
        intent, events = decided.after, decided.events
        if intent is None or not in_scope(intent):
            return msgspec.json.encode(Refusal("withdraw.unknown-intent"))
        if not may_hold(intent) and events:
            await self._release(intent)
        await self._ask_to_stop(intent, events)
        view = model_view(intent, await self.ports.registry.get(intent.tool))
        if view is None:
            return msgspec.json.encode(Refusal("withdraw.in-progress", intent.state.value))
        return msgspec.json.encode(view)

    async def _ask_to_stop(self, intent: EffectIntent, events: Sequence[Event]) -> None:
        """Pass a recorded ``InterruptionRequested`` on to the workers of its capability.

        Best effort and on the record already: an adapter that cannot stop lets the
        attempt finish, and its report says how it ended.
        """
        for event in events:
            if isinstance(event, InterruptionRequested):
                await self.ports.orders.interrupt(intent.tool, intent.intent_id, event.attempt_id)

    async def claim(self, subject: str, body: bytes) -> bytes:
        """Decide an adapter's claim of a send boundary on the record (request/reply).

        What the answer means is appended before it is given (``lockgate.adapters.claims``);
        a claim that ended the intent's hold (a withdrawal) frees its lock.
        """
        claimed = await answer_claim(self.ports.intents, subject, body, key=self._report_key,
                                     contracts=self.ports.registry.get, clock=self.clock)
        if claimed.intent is not None and claimed.events:
            await self._release_if_done(claimed.intent, claimed.events)
        return msgspec.json.encode(claimed.answer)

    async def _send_order(
        self, intent: EffectIntent, authorized: ExecutionAuthorized
    ) -> None:
        """Hand on the order of an authorized attempt (once per attempt id)."""
        order = order_for(intent, authorized, key=self._report_key)
        if order is None:
            return  # the attempt moved on (reported, refused, unknown): nothing to send
        bundle = self.bundles.current()
        if bundle.uses_history:
            # Before the order goes: what it reads may enter the run from then on, and a
            # later decision must know it before the model can have seen it. Content from
            # outside, or data read, is noted whatever policy decides this capability: a
            # policy on another one (a send) asks whether it entered.
            contract = await self.ports.registry.get(intent.tool)
            if keeps_history(bundle, intent)[0] or brings_in(contract):
                await self.ports.history.authorize(intent.tenant, intent.run_id,
                                                   authorized_in_history(intent, contract))
        await self.ports.orders.send(order)
        keep(self._sent, authorized.attempt_id, None, _LOCKS_KNOWN)

    async def report(self, data: bytes, subject: str, sequence: int) -> None:
        """Record an adapter's attempt report as an event, if it proves its order.

        A report must echo the token of the order it answers and come on the subject of
        the intent's own capability and id; one that does not is refused (nothing it says
        is believed) and put on the record as ``ReportRefused``. So is one that cannot be
        read, or whose body names no intent, on the intent its subject names.

        Raises:
            Unaddressed: the report can be put on no intent's record.
        """
        try:
            report = msgspec.json.decode(data, type=AttemptReport)
        except msgspec.MsgspecError as exc:
            log.warning("unreadable report at sequence %s: %s", sequence, exc)
            await self._refuse_unread(subject, sequence, "report.unreadable")
            return
        address = parse_report_subject(subject)
        if address is None or not (is_subject_token(report.tenant) and is_subject_token(report.intent_id)):
            log.warning("report at sequence %s names no intent in its body", sequence)
            await self._refuse_unread(subject, sequence, "report.unaddressed")
            return
        capability, subject_intent_id = address
        cause = derived_id("report", report.attempt_id, report.stage)

        async def step(intent: EffectIntent | None) -> tuple[list[Event], str | None]:
            """The report's events, and why it was refused (``None``: believed)."""
            if intent is None:
                log.warning("report for unknown intent %s", report.intent_id)
                return [], None
            problem = check_report(intent, report, capability=capability,
                                   subject_intent_id=subject_intent_id, key=self._report_key)
            if problem is not None:
                return refuse_report(intent, report, problem, cause=f"{cause}:{problem}",
                                     now=self.clock()), problem
            contract = await self.ports.registry.get(intent.tool)
            return on_report(intent, report, contract, cause=cause, now=self.clock(),
                             counts_effects=self.bundles.current().uses_prior_effects), None

        decided = await self.ports.intents.decide_with(report.tenant, report.intent_id, step)
        if decided.result is not None:
            log.warning("refused a %r report for %s/%r: %s (adapter %r)", report.stage[:32],
                        report.intent_id, report.attempt_id[:64], decided.result, report.adapter[:64])
            return
        if decided.before is not None and decided.after is not None:
            await self._release_if_done(decided.after, decided.events)
            await self._ask_to_stop(decided.before, decided.events)
            await self._end_timer(decided.after, report.attempt_id)

    async def _refuse_unread(self, subject: str, sequence: int, reason: str) -> None:
        """Put a report whose body says nothing believable on the record of the intent its
        subject names, as ``ReportRefused`` (it proves nothing and changes nothing; one per
        reason, however many come).

        Raises:
            Unaddressed: the subject names no intent the store holds.
        """
        address = parse_report_subject(subject)
        tenant = await self.ports.intents.tenant_of(address.intent_id) if address is not None else None
        if address is None or tenant is None:
            raise Unaddressed(subject, f"{reason}, and no stored intent has the subject's id")
        unread = AttemptReport(tenant=tenant, intent_id=address.intent_id, attempt_id="",
                               stage=ReportStage.OTHER)

        async def step(intent: EffectIntent | None) -> list[Event]:
            if intent is None:
                return []
            return refuse_report(intent, unread, reason, cause=f"report-{sequence}:{reason}",
                                 now=self.clock())

        await self.ports.intents.decide(tenant, address.intent_id, step)

    async def _end_timer(self, intent: EffectIntent, attempt_id: str) -> None:
        """Let go of the trigger that times ``attempt_id``, held here, once the intent (as the
        record has it now) has ended, its lock, if any, freed already: at the deadline it
        would find nothing to do. Best effort: a timer not let go runs out as before."""
        if not intent.state.terminal:
            return
        keep(self._ended, attempt_id, None, _LOCKS_KNOWN)
        timer = self._timers.pop(attempt_id, None)
        if timer is not None:
            await self.ports.timers.done(timer)
