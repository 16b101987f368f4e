"""Policy's handler: fresh facts (answered with the normalization, or asked for), Cedar,
append the decision."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Sequence
from dataclasses import replace
from datetime import datetime

from nats.errors import Error as NatsError

from lockgate.authz import Decision, PolicyBundle
from lockgate.authz.history import EXECUTED, NOTHING, REFUSED
from lockgate.authz.intents import Evidence, keeps_history
from lockgate.authz.source import BundleSource
from lockgate.contracts.messages import Facts, FactsRequest
from lockgate.contracts.vocabulary import DecisionOutcome
from lockgate.core.bounded import keep
from lockgate.core.canonical import digest
from lockgate.core.clock import Clock
from lockgate.eventstore.base import RecordedEvent
from lockgate.intent.aggregate import EffectIntent, Event, State
from lockgate.intent.codec import decode_event
from lockgate.intent.events import PolicyDecided
from lockgate.policy.bundles import BundleCommands
from lockgate.policy.domain import ADMITTED, admit, evaluate_for, expire_pause, record
from lockgate.runtime import metrics
from lockgate.runtime.context import Ports
from lockgate.runtime.evidence import gather, read_history
from lockgate.runtime.evidence import held as held_for
from lockgate.runtime.ports.adapters import AdapterUnavailable
from lockgate.runtime.ports.history import HistoryMoved, is_history_key
from lockgate.runtime.ports.ledger import BudgetContention
from lockgate.runtime.ports.policies import ShadowSource
from lockgate.runtime.service import Retry

#: Decisions made again when the run's history moved under them, before pausing.
HISTORY_TRIES = 5

#: Deliveries without facts before the intent is paused for missing evidence.
PAUSE_AFTER = 5

#: How old the facts answered with a normalization may be for policy to decide on them,
#: and how far ahead of policy's clock the normalization's stamp may be.
CARRIED_FACTS_FRESH_S = 5.0
CLOCK_SKEW_S = 0.5


def carried_facts(intent: EffectIntent, now: datetime) -> Facts | None:
    """The facts the adapter answered with the normalization, while they are fresh.

    They were read a hop ago, in the same round trip as the normalization; older than
    ``CARRIED_FACTS_FRESH_S`` (policy was down, the candidate waited in its durable) they
    are asked for again. Either way the final gate judges facts read under the lock.
    """
    if intent.normalized_facts is None or intent.normalized_at is None:
        return None
    age_s = (now - intent.normalized_at).total_seconds()
    # A normalization stamped ahead of this clock says nothing about how old its facts
    # are: beyond a little skew, they are asked for again.
    if not -CLOCK_SKEW_S <= age_s <= CARRIED_FACTS_FRESH_S:
        return None
    return Facts(facts=dict(intent.normalized_facts))


class PolicyHandlers:
    """Reacts to ``CandidateNormalized``."""

    def __init__(self, ports: Ports, bundles: BundleSource, clock: Clock,
                 shadows: ShadowSource | None = None) -> None:
        self.ports = ports
        self.bundles = bundles
        #: The shadow bundle decided beside the active one, if an operator started one.
        self.shadows = shadows if shadows is not None else ShadowSource(ports.policies)
        #: Operators' commands on the bundles.
        self._commands = BundleCommands(ports.policies, bundles, clock)
        self.clock = clock
        #: Intents whose decision, appended here, reserved no budget: their end settles
        #: nothing, so their events need no load (bounded, oldest forgotten).
        self._reserved_nothing: OrderedDict[str, None] = OrderedDict()

    def _decided(self, tenant: str, decided: Sequence[Event]) -> Awaitable[None]:
        """Note what this process's decisions reserved, then count denials.

        Only a final decision counts: a paused intent is decided again later, perhaps by
        another replica, perhaps with a budget.
        """
        for event in decided:
            if isinstance(event, PolicyDecided):
                if event.reservations or event.outcome is DecisionOutcome.PAUSE:
                    self._reserved_nothing.pop(event.originator_id.hex, None)
                else:
                    keep(self._reserved_nothing, event.originator_id.hex, None, _DECISIONS_KEPT)
        return self._count_denial(tenant, decided)

    async def commands(self, subject: str, body: bytes) -> bytes:
        """An operator's command on the policy bundles (``lockgate.policy.bundles``)."""
        return await self._commands.answer(subject, body)

    async def normalized(self, recorded: RecordedEvent, deliveries: int) -> None:
        """Decide on the intent ``recorded`` normalized."""

        async def step(intent: EffectIntent | None) -> list[Event]:
            if intent is None or intent.state is not State.NORMALIZED or intent.decision is not None:
                return []
            facts = carried_facts(intent, self.clock())
            if facts is None:
                try:
                    facts = await self.ports.adapters.facts(
                        intent.tool,
                        FactsRequest(tenant=intent.tenant, actor=intent.actor, resource=intent.resource),
                    )
                except AdapterUnavailable:
                    if deliveries < PAUSE_AFTER:
                        raise
            return await self._decide(intent, facts, recorded.event_id)

        decided = await self.ports.intents.decide(recorded.tenant, recorded.intent_id, step,
                                                  trigger=recorded)
        if decided.after is not None:
            metrics.shadowed(decided.after.tool, decided.events)
        await self._decided(recorded.tenant, decided.events)

    async def _decide(self, intent: EffectIntent, facts: Facts | None, cause: str) -> list[Event]:
        """Permission (Cedar, the progress checkpoint), then admission (budgets, the run's
        history), then the event.

        An admitted intent is held in the run's history at the revisions its decision read;
        when the history moved meanwhile (another call of the run, decided at the same
        moment), the decision is made again on the new history.
        """
        bundle = self.bundles.current()
        repeated = 0
        if facts is not None:
            progress = await self._progress(intent)
            if progress is not None and progress[0] == digest(dict(facts.facts)):
                repeated = progress[1]
        evidence = await gather(self.ports, intent, with_prior_effects=bundle.uses_prior_effects,
                                now=self.clock())
        for _ in range(HISTORY_TRIES):
            try:
                decision, held, evidence = await self._admitted(intent, bundle, facts, evidence, repeated)
                break
            except HistoryMoved:
                continue
        else:
            decision, held = Decision(DecisionOutcome.PAUSE, bundle.revision,
                                      ("history.contended",), ()), []
        shadow = await self.shadows.current()
        events = record(
            intent, decision, facts, reservations=held, cause=cause, now=self.clock(),
            history=evidence.history,
            # The same request under the shadow bundle: recorded beside, never enforced.
            shadow=evaluate_for(intent, shadow, facts, repeated_denials=repeated, evidence=evidence)
            if shadow is not None else None)
        if not events and held:
            await self._release(intent, held)
        return events

    async def _admitted(self, intent: EffectIntent, bundle: PolicyBundle, facts: Facts | None,
                        evidence: Evidence, repeated: int) -> tuple[Decision, list[str], Evidence]:
        """The decision on the history as read now, what it holds (budgets, history), and
        the evidence it was made on.

        Raises:
            HistoryMoved: the history changed after it was read (nothing is held then).
        """
        held: list[str] = []
        try:
            reading = await read_history(self.ports, intent, bundle, self.clock())
            if reading is not None:
                evidence = replace(evidence, history=reading.facts)
            if bundle.config.budgets:
                left = await self.ports.budgets.remaining(bundle.config.budgets, intent, self.clock())
                evidence = replace(evidence, budget_remaining=left)
            decision = evaluate_for(intent, bundle, facts, repeated_denials=repeated, evidence=evidence)
            if decision.outcome in ADMITTED and bundle.config.budgets:
                cost = evidence.contract.budget_cost if evidence.contract else 1
                held, exhausted = await self.ports.budgets.reserve(
                    bundle.config.budgets, intent, cost, self.clock())
                decision = admit(decision, exhausted)
            if decision.outcome in ADMITTED and reading is not None:
                try:
                    held += await self.ports.history.admit(reading, intent.intent_id,
                                                           held_for(intent, evidence))
                except HistoryMoved:
                    await self._release(intent, held)
                    raise
        except (BudgetContention, NatsError, TimeoutError):
            # Budgets and history are evidence too: without them nothing is admitted, and
            # nothing denied.
            if held:
                await self._release(intent, held)
            return (Decision(DecisionOutcome.PAUSE, bundle.revision, ("budgets.unavailable",), ()),
                    [], evidence)
        return decision, held, evidence

    async def _release(self, intent: EffectIntent, held: Sequence[str]) -> None:
        """Give back what a decision that was not recorded held."""
        budgets = [k for k in held if not is_history_key(k)]
        if budgets:
            await self.ports.budgets.settle(budgets, intent.intent_id, consumed=False)
        if len(budgets) < len(held):
            await self.ports.history.end(intent.tenant, intent.run_id, held, intent.intent_id,
                                         intent.tool, intent.effect_class, NOTHING)

    async def _progress(self, intent: EffectIntent) -> tuple[str, int] | None:
        """This consequence's denials in the run so far, on which facts.

        Read for every decision, though it usually finds nothing: any policy replica may
        have counted a denial, and a stalled consequence is denied whatever Cedar says
        now, so neither a miss kept in memory nor asking only after Cedar denies would
        give the same answers.
        """
        return await self.ports.progress.denials(intent.tenant, intent.run_id, intent.digest or "")

    async def _count_denial(self, tenant: str, decided: Sequence[Event]) -> None:
        """Count a policy denial of this consequence in this run (on these facts).

        Counted after the decision is stored: a crash in between loses one count,
        never adds one.
        """
        if not decided or not isinstance(decided[0], PolicyDecided):
            return
        event = decided[0]
        if event.outcome != DecisionOutcome.DENY or event.reasons[:1] == ["run.progress-stalled"]:
            return
        await self.ports.progress.count_denial(tenant, event.correlation_id, event.digest,
                                               digest(dict(event.facts)))

    async def paused(self, recorded: RecordedEvent) -> None:
        """Ask again for the evidence a paused decision lacks; deny once the pause times out."""
        trigger = decode_event(recorded)
        if not isinstance(trigger, PolicyDecided) or trigger.outcome != DecisionOutcome.PAUSE:
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
            events = await self._decide(intent, facts, recorded.event_id)
            again = [e for e in events
                     if isinstance(e, PolicyDecided) and e.outcome == DecisionOutcome.PAUSE]
            if again:  # still waiting (a budget, say): no new event, ask again later
                expired = expire_pause(intent, bundle, cause=recorded.event_id, now=self.clock())
                if expired:
                    return expired
                raise Retry(bundle.config.pause.recheck_s, "still paused")
            return events

        decided = await self.ports.intents.decide(recorded.tenant, recorded.intent_id, step,
                                                  trigger=recorded)
        if decided.after is not None:
            metrics.shadowed(decided.after.tool, decided.events)
        await self._decided(recorded.tenant, decided.events)

    async def settled(self, recorded: RecordedEvent) -> None:
        """Settle what an intent holds once its outcome is known, from the record.

        Budget holds are consumed when the effect happened and released when it did
        not. They are named on the intent's own events, so what is released never
        depends on the bundle being the one that took them.
        """
        current = self.bundles.current()
        if recorded.intent_id in self._reserved_nothing and not (
                current.uses_prior_effects or current.uses_history):
            return  # decided here, with nothing held: nothing to settle, nothing to count
        if recorded.event_type in _ONLY_IF_DENIED:
            trigger = decode_event(recorded)
            if not isinstance(trigger, PolicyDecided) or trigger.outcome != DecisionOutcome.DENY:
                return  # allowed, paused or waiting for a reviewer: nothing to settle yet
        intent = await self.ports.intents.load(recorded.tenant, recorded.intent_id, trigger=recorded)
        if intent is None:
            return
        bundle = self.bundles.current()
        budgets = [k for k in intent.reservations if not is_history_key(k)]
        if intent.state is State.COMPLETED:
            if bundle.uses_prior_effects:
                await self.ports.progress.count_effect(intent)  # for later decisions
            await self.ports.budgets.settle(budgets, intent.intent_id, consumed=True)
        elif intent.state in _GAVE_NOTHING:
            await self.ports.budgets.settle(budgets, intent.intent_id, consumed=False)
        else:
            return
        if len(budgets) < len(intent.reservations) or keeps_history(bundle, intent)[0]:
            ended = (EXECUTED if intent.state is State.COMPLETED
                     else REFUSED if intent.state in _REFUSALS else NOTHING)
            await self.ports.history.end(intent.tenant, intent.run_id, intent.reservations,
                                         intent.intent_id, intent.tool, intent.effect_class, ended)
        # Otherwise still in flight, or uncertain: the budget holds stay. (Intake's
        # in-flight holds are given back by intake, from the same record.)


#: Decisions a policy process remembers having reserved nothing for.
_DECISIONS_KEPT = 65_536

#: Events this consumer sees that end an intent only for one outcome.
_ONLY_IF_DENIED = frozenset({"PolicyDecided"})


#: Final states that refused the effect: policy or a reviewer denied it, the gate or the
#: remote system refused it.
_REFUSALS = frozenset({State.DENIED, State.REFUSED})

#: Final states in which no effect happened: their budget is given back.
_GAVE_NOTHING = frozenset({
    State.DENIED, State.REFUSED, State.FAILED, State.WITHDRAWN, State.INTERRUPTED, State.REJECTED,
})
