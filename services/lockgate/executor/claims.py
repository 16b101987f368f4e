"""The executor's side of a send boundary's claim: decided on the record, appended, answered.

The protocol is ``lockgate.adapters.claims``'s. ``decide_claim`` says, as a pure function of
the intent, the claim and the time, what a claim means:

- the order is the current attempt's, as authorized (attempt, key, digest, arguments,
  resource, actor, the gate's facts, the executor's token), no withdrawal was requested and
  the deadline is not (nearly) reached: ``AttemptSent`` naming the claimant; *crossed*;
- the attempt was claimed already: by the same claimant, *crossed* again; by another,
  *refused* (``order.boundary-claimed``), unless the capability's remote system
  deduplicates by the intent key (its contract declares idempotency): *crossed*;
- a withdrawal was requested: ``Withdrawn``; *refused* (``order.withdrawn``);
- the deadline is (nearly) reached: ``AttemptFailedBeforeSend`` (``order.expired``); the
  order does not match the authorization: the same (``order.mismatch``); *refused*;
- the attempt is no longer the current, open one: *refused* (``order.stale``), nothing
  recorded;
- the record does not hold the authorization yet: *unchecked*.

An adapter that returns without crossing (it forgot to, or found its effect done by an
earlier delivery) is claimed after the fact (``Claim.written``): the effect may exist, so
the attempt is recorded as sent if it still can be (with an interruption request when a
withdrawal was waiting), or stands as crossed where it was.

``answer_claim`` decides on a store and appends before it answers; ``serve_claims`` answers
every claim on a connection that way (what the executor does; for tests of adapters).
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import datetime

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from lockgate.adapters.api import bounded
from lockgate.contracts import subjects
from lockgate.contracts.capability import CapabilityContract
from lockgate.contracts.messages import Claim, ClaimAnswer, ExecutionOrder
from lockgate.contracts.proofs import report_token, too_late, write_by
from lockgate.contracts.vocabulary import AttemptStage, ClaimVerdict
from lockgate.core.clock import Clock
from lockgate.core.ids import derived_id, is_subject_token
from lockgate.eventstore.base import EventStore, EventStoreUnavailable
from lockgate.intent.aggregate import Attempt, EffectIntent, Event, Stamp, State
from lockgate.intent.events import (
    AttemptFailedBeforeSend,
    AttemptSent,
    InterruptionRequested,
    Withdrawn,
)
from lockgate.runtime.ports.intents import IntentStore, StoredIntents

#: Stages of an attempt past its send boundary, not yet settled.
_IN_FLIGHT = frozenset({AttemptStage.SENT, AttemptStage.ACKNOWLEDGED, AttemptStage.OBSERVED})


def mismatch(intent: EffectIntent, attempt: Attempt, order: ExecutionOrder) -> str | None:
    """How ``order`` differs from what the gate authorized for ``attempt``, or ``None``."""
    if order.authorized_version != attempt.authorized_version:
        return "the order names another authorization"
    if (order.intent_key, order.digest) != (attempt.intent_key, attempt.digest):
        return "intent key or digest differ from the authorization"
    if order.digest != intent.digest:
        return "digest differs from the normalized request"
    if order.actor != intent.actor:
        return "actor differs from the record"
    if dict(intent.normalized_arguments) != dict(order.arguments) or dict(intent.resource) != dict(
        order.resource
    ):
        return "arguments or resource differ from the normalized request"
    # Preconditions are the gate's facts: any the gate recorded must be the same (the wire
    # may carry a version token as a string or a number).
    for name, value in order.preconditions.items():
        if name in attempt.preconditions and str(attempt.preconditions[name]) != str(value):
            return f"precondition {name!r} differs from the gate's facts"
    return None


def _answer(verdict: ClaimVerdict, reason: str = "", detail: str = "",
            not_after: datetime | None = None) -> ClaimAnswer:
    return ClaimAnswer(verdict=verdict, reason=reason, detail=bounded(detail), not_after=not_after)


#: What a claim decides: the events to append, and the answer.
_Decided = tuple[list[Event], ClaimAnswer]


def _refused(reason: str, detail: str) -> _Decided:
    return [], _answer(ClaimVerdict.REFUSED, reason, detail)


@dataclass(frozen=True)
class _OnRecord:
    """A claim on an attempt the record holds: the intent and attempt it names, and when it came."""

    intent: EffectIntent
    attempt: Attempt
    claim: Claim
    now: datetime

    @property
    def is_current(self) -> bool:
        """The attempt is the intent's latest."""
        current = self.intent.current_attempt
        return current is not None and current.attempt_id == self.attempt.attempt_id

    @property
    def open_now(self) -> bool:
        """The attempt is the latest, authorized, and nothing has claimed its boundary yet."""
        return (self.is_current and self.intent.state is State.AUTHORIZED
                and self.attempt.stage is AttemptStage.AUTHORIZED)

    def stamp(self, kind: str, *parts: str) -> Stamp:
        """The stamp of an event this claim causes; its id derived from the attempt, so a retry repeats it."""
        return Stamp(now=self.now, event_id=derived_id(kind, self.attempt.attempt_id, *parts),
                     causation_id=self.claim.claimant)

    def crossed(self, events: list[Event]) -> _Decided:
        """*Crossed*, after ``events``: the adapter may write until the attempt's deadline."""
        return events, _answer(ClaimVerdict.CROSSED, not_after=write_by(self.attempt.deadline_at))


def decide_claim(
    intent: EffectIntent | None, claim: Claim, *, capability: str, key: bytes, idempotent: bool,
    now: datetime,
) -> tuple[list[Event], ClaimAnswer]:
    """What a claim means on ``intent`` as recorded: the events to append, and the answer.

    ``capability``: the one the claim was asked on (its subject); ``idempotent``: the
    capability's remote system deduplicates by the intent key, so an attempt already
    crossed may be written again.
    """
    order = claim.order
    if intent is None or intent.tool != capability or order.capability != capability:
        return _refused("order.mismatch", "no intent of this capability")
    expected = report_token(key, intent.tenant, intent.intent_id, order.attempt_id, intent.tool)
    if not hmac.compare_digest(order.report_token.encode(), expected.encode()):
        return _refused("order.mismatch", "the order does not carry the executor's token")
    try:
        attempt = intent.attempt(order.attempt_id)
    except KeyError:
        if intent.version < order.authorized_version:
            return [], _answer(ClaimVerdict.UNCHECKED, "order.unchecked",
                               f"the record ends at version {intent.version}")
        return _refused("order.mismatch", "no such attempt on the record")
    asked = _OnRecord(intent, attempt, claim, now)
    if claim.written:
        return _written(asked)
    problem = mismatch(intent, attempt, order)
    if problem is not None:
        return _mismatched(asked, problem)
    if not asked.is_current:
        return _refused("order.stale", "a later attempt was authorized")
    if attempt.crossed and attempt.stage in _IN_FLIGHT and intent.state is State.SENT:
        return _claimed_again(asked, idempotent=idempotent)
    if not asked.open_now:
        return _refused("order.stale", f"intent is {intent.state.value}")
    return _first_claim(asked)


def _written(asked: _OnRecord) -> _Decided:
    """The adapter wrote without crossing (or found its effect done, and returned it):
    whatever else is true, the effect may exist, so record it sent if it still can be."""
    intent, attempt = asked.intent, asked.attempt
    if asked.is_current and attempt.crossed and intent.state is State.SENT:
        return asked.crossed([])
    if not asked.open_now:
        return _refused("order.stale", f"written, but the attempt is {attempt.stage}")
    cause = asked.claim.claimant
    stamp = asked.stamp("claim", cause)
    events: list[Event] = [AttemptSent.next(
        intent, stamp, attempt_id=attempt.attempt_id, claimant=asked.claim.claimant)]
    withdrawal = intent.withdrawal
    if withdrawal is not None and not intent.interruption_requested:
        events.append(InterruptionRequested.next(
            intent, replace(stamp, event_id=derived_id("claim", attempt.attempt_id, cause, "interrupt"),
                            offset=2),
            attempt_id=attempt.attempt_id, by=withdrawal.by, why=withdrawal.why))
    return asked.crossed(events)


def _mismatched(asked: _OnRecord, problem: str) -> _Decided:
    """An order that differs from its authorization: refused; an open attempt also fails before send."""
    if not asked.open_now:
        return _refused("order.mismatch", problem)
    return [AttemptFailedBeforeSend.next(
        asked.intent, asked.stamp("claim-refused", "mismatch"),
        attempt_id=asked.attempt.attempt_id, reason="order.mismatch", detail=bounded(problem),
    )], _answer(ClaimVerdict.REFUSED, "order.mismatch", problem)


def _claimed_again(asked: _OnRecord, *, idempotent: bool) -> _Decided:
    """A boundary already crossed: *crossed* again for its claimant (or a deduplicating remote)
    while its deadline allows; refused for anyone else."""
    attempt = asked.attempt
    if attempt.claimant != asked.claim.claimant and not idempotent:
        return _refused("order.boundary-claimed", "another delivery claimed the boundary")
    if too_late(attempt.deadline_at, asked.now):
        return _refused("order.expired", "the attempt's deadline passed before its send boundary")
    # The same claim asked again (its answer was lost), or a remote that deduplicates.
    return asked.crossed([])


def _first_claim(asked: _OnRecord) -> _Decided:
    """The first claim of an open attempt: withdrawn if that was asked, failed if too late, else sent."""
    intent, attempt = asked.intent, asked.attempt
    withdrawal = intent.withdrawal
    if withdrawal is not None:
        return [Withdrawn.next(
            intent, asked.stamp("claim-withdrawn"), by=withdrawal.by, why=withdrawal.why,
        )], _answer(ClaimVerdict.REFUSED, "order.withdrawn",
                    "a withdrawal was requested before the order was sent")
    if too_late(attempt.deadline_at, asked.now):
        return [AttemptFailedBeforeSend.next(
            intent, asked.stamp("claim-refused", "expired"),
            attempt_id=attempt.attempt_id, reason="order.expired",
            detail="the attempt's deadline passed before its send boundary",
        )], _answer(ClaimVerdict.REFUSED, "order.expired",
                    "the attempt's deadline passed before its send boundary")
    return asked.crossed([AttemptSent.next(
        intent, asked.stamp("claim", asked.claim.claimant),
        attempt_id=attempt.attempt_id, claimant=asked.claim.claimant,
    )])


@dataclass(frozen=True)
class Claimed:
    """A claim answered: the answer, what was appended, and the intent after it."""

    answer: ClaimAnswer
    #: The intent as the record has it after ``events`` (``None``: no such intent).
    intent: EffectIntent | None = None
    events: tuple[Event, ...] = ()


#: The contract of a capability (the executor's registry), for its idempotency.
Contracts = Callable[[str], Awaitable[CapabilityContract | None]]

_claim = msgspec.json.Decoder(Claim)


async def answer_claim(
    intents: IntentStore, subject: str, body: bytes, *, key: bytes, contracts: Contracts,
    clock: Clock,
) -> Claimed:
    """The executor's answer to ``lg.claim.<capability>``: decided on the record, and what
    it means appended before the answer is given.

    A record that cannot be read now, or holds no authorization as far as the order says
    (a replica behind, or an order ahead of any record), is answered *unchecked*: nothing
    was recorded, and the order comes again.
    """
    try:
        capability = subjects.parse_claim(subject)
        claim = _claim.decode(body)
        order = claim.order
        if not (is_subject_token(order.tenant) and is_subject_token(order.intent_id)) or not claim.claimant:
            raise ValueError("not an order of an intent")
    except (subjects.NotACommandSubject, msgspec.MsgspecError, ValueError) as exc:
        return Claimed(_answer(ClaimVerdict.REFUSED, "order.mismatch", f"not a claim: {exc}"))
    contract = await contracts(capability)
    idempotent = contract is not None and contract.idempotency is not None

    async def step(intent: EffectIntent | None) -> tuple[list[Event], ClaimAnswer]:
        return decide_claim(intent, claim, capability=capability, key=key, idempotent=idempotent,
                            now=clock())

    try:
        decided = await intents.decide_with(order.tenant, order.intent_id, step,
                                            at_least=order.authorized_version)
    except EventStoreUnavailable as exc:
        return Claimed(_answer(ClaimVerdict.UNCHECKED, "order.unchecked", str(exc)))
    return Claimed(decided.result, decided.after, decided.events)


async def serve_claims(
    nc: Client, store: EventStore, *, key: bytes, contracts: Contracts, clock: Clock,
) -> Subscription:
    """Answer every ``lg.claim.*`` on ``nc`` from ``store`` (what the executor does; for tests)."""

    intents = StoredIntents(store)

    async def on_request(msg: Msg) -> None:
        claimed = await answer_claim(intents, msg.subject, msg.data, key=key, contracts=contracts,
                                     clock=clock)
        await msg.respond(msgspec.json.encode(claimed.answer))

    return await nc.subscribe(subjects.CLAIM_ALL, cb=on_request)
