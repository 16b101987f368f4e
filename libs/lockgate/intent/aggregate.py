"""``EffectIntent``: the single source of truth for one candidate and the effect it may become.

Modelled with the ``eventsourcing`` package: events are classes nested in the aggregate
(frozen dataclasses, each with a ``class_version``), and ``apply`` is the only place
state changes. Services never call command methods: their pure ``decide`` functions
build events with ``Event.next`` and the store folds them back (``codec.fold``).

Every event is built with typed keyword fields: the type checker sees each event class
as the dataclass it is at runtime, so a misspelt, missing or mistyped field fails
``mypy --strict`` where the event is built, not when it is folded.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, ClassVar, Concatenate, ParamSpec, TypeVar, dataclass_transform
from uuid import UUID

from eventsourcing.domain import (
    Aggregate,
    AggregateCreated,
    CanInitAggregate,
    CanMutateAggregate,
    MetaDomainEvent,
    OriginatorIDError,
    OriginatorVersionError,
)
from eventsourcing.utils import get_topic, resolve_topic

from lockgate.contracts.vocabulary import (
    AttemptStage,
    DecisionOutcome,
    Finding,
    ReportStage,
    Resolution,
    Settles,
)

E = TypeVar("E", bound="Event")
P = ParamSpec("P")


class State(StrEnum):
    """Where an intent is. Terminal states never change again."""

    PROPOSED = "proposed"
    REJECTED = "rejected"
    NORMALIZED = "normalized"
    DENIED = "denied"
    PAUSED = "paused"
    AWAITING_APPROVAL = "awaiting_approval"
    ALLOWED = "allowed"
    AUTHORIZED = "authorized"
    SENT = "sent"
    COMPLETED = "completed"
    FAILED = "failed"
    REFUSED = "refused"
    UNKNOWN = "unknown"
    NEEDS_OPERATOR = "needs_operator"
    WITHDRAWN = "withdrawn"
    INTERRUPTED = "interrupted"

    @property
    def terminal(self) -> bool:
        """True when nothing more will happen to the intent."""
        return self in _TERMINAL


_TERMINAL = frozenset(
    {
        State.REJECTED, State.DENIED, State.COMPLETED, State.FAILED, State.REFUSED,
        State.WITHDRAWN, State.INTERRUPTED,
    }
)
#: States in which an order may already be out: an attempt was authorized and not
#: settled. Giving up on such an intent is a question for an operator, never "failed".
MAY_HAVE_BEEN_SENT = frozenset({State.AUTHORIZED, State.SENT, State.UNKNOWN})


@dataclass(frozen=True)
class Stamp:
    """What a deciding function says of an event it builds: when, its id, and its cause.

    ``offset`` places the event after the state it follows: 1 for the next one, 2 for
    the one after it in the same batch.
    """

    now: datetime
    event_id: str
    causation_id: str
    offset: int = 1


@dataclass_transform(frozen_default=True, kw_only_default=True, field_specifiers=(field,))
class _EventClass(MetaDomainEvent):
    """The library's event metaclass, declared to type checkers as what it does.

    ``MetaDomainEvent`` makes every event class a frozen dataclass when the class is
    created, which a type checker cannot see; declared a dataclass transform, each
    event's own annotations become its typed constructor. Keyword-only is for the
    checker alone (the runtime dataclass accepts positions too): an event's own fields
    are always passed by name, so two fields of one type cannot be swapped unseen.
    """


class Event(Aggregate.Event, metaclass=_EventClass):
    """Base of every ``EffectIntent`` event: the envelope Lockgate adds to the library's."""

    class_version: ClassVar[int] = 1
    #: True for an event that records something beside the intent's state (it may
    #: follow a terminal state); any other event after a terminal state moves nothing.
    neutral: ClassVar[bool] = False
    #: The field whose value is the event's route (its subject's last token), for an
    #: event whose consumers act on one value of it only; empty for every other.
    routed_by: ClassVar[str] = ""
    # Positional like the library's envelope before them: ``next`` passes the whole
    # envelope by position (which is how its signature leaves the rest to ``P``).
    event_id: str = field(kw_only=False)
    correlation_id: str = field(kw_only=False)
    causation_id: str = field(kw_only=False)

    def mutate(self, aggregate: Any) -> Any:
        """Fold this event into ``aggregate``.

        Invariant 6, enforced where state changes: no event takes an intent out of a
        terminal state. The deciding functions never emit one; should a stored history
        hold one all the same (an older writer, a race), it keeps its place in the
        sequence and changes nothing but the version.
        """
        if isinstance(aggregate, EffectIntent):
            if aggregate.state.terminal and not self.neutral:
                if self.originator_id != aggregate.id:
                    raise OriginatorIDError(self.originator_id, aggregate.id)
                if self.originator_version != aggregate.version + 1:
                    raise OriginatorVersionError(self.originator_version, aggregate.version + 1)
                aggregate.version = self.originator_version
                aggregate.modified_on = self.timestamp
                aggregate.ignored.append(type(self).__name__)
                return aggregate
            # What the library's mutate does, without its layers, where this class reaches it.
            if (_MUTATES.get(type(self)) or _library_mutate(type(self))) is _FOLLOWS:
                return _follow(self, aggregate)
        elif aggregate is None and _library_mutate(type(self)) is _CREATES:
            created = _create(self)
            if created is not None:
                return created
        return super().mutate(aggregate)

    @classmethod
    def next(
        cls: Callable[Concatenate[UUID, int, datetime, str, str, str, P], E],
        state: EffectIntent, stamp: Stamp, /, *args: P.args, **fields: P.kwargs,
    ) -> E:
        """Build the event that would follow ``state``, its own fields given by name.

        The envelope comes from ``state`` (the intent, its version, its run) and
        ``stamp``; ``cls``'s constructor after the envelope types ``fields``, so
        ``EffectIntent.AttemptSent.next(intent, stamp, atempt_id=...)`` fails type
        checking. Not for an intent's first event, which follows nothing.

        Raises:
            TypeError: ``cls`` is an event that creates an intent.
        """
        if _creates(cls):
            raise TypeError(f"{cls!r} creates an intent: it follows no state")
        if getattr(cls, "routed_by", "") == "settles" and "settles" not in fields:
            # Computed here, never left to a caller to remember: an end routed past
            # policy would leave its budget holds behind.
            fields["settles"] = Settles.BUDGET if state.reservations else Settles.NOTHING
        return cls(
            state.id, state.version + stamp.offset, stamp.now, stamp.event_id, state.run_id,
            stamp.causation_id, *args, **fields,
        )


# -- folding: the library's mutate, the same steps without its layers ---------------------
#
# Every decision folds the intent's whole history, several times per candidate in some
# processes: the library's generic steps were most of it (a super() chain and property
# calls per event; for the first, two dict comprehensions filtering the event's fields
# by the aggregate's signatures). ``_follow`` and ``_create`` take the same steps, in the
# same order, with the same errors, for this aggregate only; whatever else reaches the
# library's own. ``tests/unit/test_fold.py`` folds histories both ways and compares.

_FOLLOWS = CanMutateAggregate.mutate
_CREATES = CanInitAggregate.mutate
_MUTATES: dict[type, Callable[..., Any]] = {}


def _library_mutate(cls: type) -> Callable[..., Any]:
    """The library's ``mutate`` that ``super().mutate`` reaches from ``Event`` for ``cls``."""
    found = _MUTATES.get(cls)
    if found is None:
        after = cls.__mro__[cls.__mro__.index(Event) + 1:]
        found = _MUTATES[cls] = next(vars(k)["mutate"] for k in after if "mutate" in vars(k))
    return found


def _follow(event: Event, aggregate: EffectIntent) -> EffectIntent:
    """``CanMutateAggregate.mutate``: check the id and the version, apply, move them on."""
    # A UUID is its own equal: the identity test spares UUID.__eq__ (Python code) for
    # events decoded with the aggregate's own id object.
    if event.originator_id is not aggregate.id and event.originator_id != aggregate.id:
        raise OriginatorIDError(event.originator_id, aggregate.id)
    next_version = aggregate.version + 1
    if event.originator_version != next_version:
        raise OriginatorVersionError(event.originator_version, next_version)
    event.apply(aggregate)
    aggregate.version = event.originator_version
    aggregate.modified_on = event.timestamp
    return aggregate


def _create(event: Event) -> EffectIntent | None:
    """``CanInitAggregate.mutate`` for an event whose topic names ``EffectIntent`` (else ``None``).

    The library passes the aggregate's ``__init__`` the event's fields its signature
    names, found by filtering every field; here the names are looked up in the event.
    """
    if resolve_topic(event.originator_topic) is not EffectIntent:  # type: ignore[attr-defined]
        return None
    fields = event.__dict__
    agg = EffectIntent.__new__(EffectIntent)
    agg.__base_init__(
        originator_id=event.originator_id, originator_version=event.originator_version,
        timestamp=event.timestamp,
    )
    agg.__init__(**{name: fields[name] for name in _INIT_NAMES if name in fields})  # type: ignore[misc]
    event.apply(agg)
    return agg


def _creates(cls: object) -> bool:
    """True for an event class that creates an intent (its envelope names the class)."""
    return isinstance(cls, type) and issubclass(cls, AggregateCreated)


class Attempt:
    """One try to execute the intent, as far as the record knows."""

    def __init__(
        self, attempt_id: str, authorized_version: int, deadline_at: datetime | None = None,
        authorized_by: str = "", *, intent_key: str = "", digest: str = "",
        preconditions: dict[str, str | int | bool] | None = None,
    ) -> None:
        self.attempt_id = attempt_id
        self.authorized_version = authorized_version
        self.deadline_at = deadline_at
        #: The event the gate authorized this attempt on (its trigger's id).
        self.authorized_by = authorized_by
        #: What the gate authorized: the order of this attempt must say the same.
        self.intent_key = intent_key
        self.digest = digest
        self.preconditions: dict[str, str | int | bool] = dict(preconditions or {})
        self.stage = AttemptStage.AUTHORIZED
        self.reason: str | None = None
        #: An adapter crossed the send boundary (the effect may exist).
        self.crossed = False
        #: Who claimed the boundary (``AttemptSent.claimant``; empty before it, or unnamed).
        self.claimant = ""


class Settlement:
    """What last settled an attempt's outcome: a reconciliation, or the adapter's report."""

    def __init__(
        self, event: str, attempt_id: str, finding: Finding, resolution: Resolution, by: str,
        receipt: dict[str, str], at: datetime, event_id: str,
    ) -> None:
        self.event = event
        self.attempt_id = attempt_id
        self.finding = finding
        self.resolution = resolution
        self.by = by
        self.receipt = receipt
        self.at = at
        self.event_id = event_id


class Withdrawal:
    """A withdrawal asked for while an attempt's order may be out: who asked, and why."""

    def __init__(self, attempt_id: str, by: str, why: str) -> None:
        self.attempt_id = attempt_id
        self.by = by
        self.why = why


class EffectIntent(Aggregate):
    """One candidate's journey from proposal to effect (or to a recorded refusal)."""

    # -- events ---------------------------------------------------------------------

    class CandidateReceived(Event, Aggregate.Created):
        """Intake accepted the candidate's shape: a known tool, offered in its turn.

        ``candidate_digest`` is the digest of the whole candidate message, the bytes
        that "the same call" is judged by; ``holds`` the in-flight keys intake took for
        it (released from the record when the intent ends, whatever the bundle says then).
        """

        tenant: str
        run_id: str
        turn_id: str
        call_id: str
        actor: str
        tool: str
        arguments: dict[str, Any]
        raw_digest: str
        raw_size_bytes: int
        catalogue_digest: str
        contract_revision: str
        # Added later, with defaults: events stored before them read as "unknown, none".
        candidate_digest: str = ""
        holds: tuple[str, ...] = ()
        # The evidence (bounded; an operator's to read, never a model's): the argument
        # text exactly as received, the provider's item and format, the model named.
        raw_arguments: str = ""
        provider: str = ""
        model: str = ""
        provider_item: dict[str, Any] | None = None
        # The candidate it corrects or follows in the run (its intent id), and how the
        # link was made: ``declared`` by the runtime, or ``automatic`` (the same tool,
        # in the same turn, after a refusal).
        follows: str = ""
        follows_how: str = ""

    class CandidateRejected(Event, Aggregate.Created):
        """Intake refused the candidate before any interpretation.

        ``retry_after_s`` is set for a refusal that passes (a rate limit): the model is
        told it may try again after that long.
        """

        tenant: str
        run_id: str
        turn_id: str
        call_id: str
        actor: str
        tool: str
        raw_digest: str
        raw_size_bytes: int
        catalogue_digest: str
        reason: str
        field: str | None
        detail: str
        # Added later, with defaults: events stored before them read as "unknown, none".
        candidate_digest: str = ""
        retry_after_s: float | None = None
        # The evidence (bounded; an operator's to read, never a model's): the argument
        # text exactly as received, the provider's item and format, the model named.
        raw_arguments: str = ""
        provider: str = ""
        model: str = ""
        provider_item: dict[str, Any] | None = None
        # The candidate it corrects or follows in the run (its intent id), and how the
        # link was made: ``declared`` by the runtime, or ``automatic`` (the same tool,
        # in the same turn, after a refusal).
        follows: str = ""
        follows_how: str = ""

    class CandidateNormalized(Event):
        """The exact consequence: canonical arguments, resource, and their digest."""

        arguments: dict[str, Any]
        resource: dict[str, str]
        destination: str
        effect_class: str
        digest: str
        serializer: str
        contract_revision: str
        # Its place in the lineage (``lockgate.intent.lineage``): how it differs from the
        # candidate it follows (``equivalent``, ``narrowing``, ``branch``, ``repair``;
        # empty for a candidate that follows none), the lineage's first candidate, how
        # many refusals came before it in the lineage, and whether the one it follows
        # was denied (a denial that flows to an equivalent successor).
        lineage: str = ""
        lineage_root: str = ""
        lineage_denials: int = 0
        predecessor_denied: bool = False
        # The adapter's facts about the resource, answered with the normalization (the
        # evidence policy decides on while they are fresh; ``None``: policy asks).
        facts: dict[str, str | int | bool] | None = None
        # The contract's data classes, the part of it a decision reads besides the effect
        # class (``None``: recorded before it was kept, when only the revision says which).
        data_classes: tuple[str, ...] | None = None

        def apply(self, agg: EffectIntent) -> None:
            agg.state = State.NORMALIZED
            agg.normalized_arguments = self.arguments
            agg.normalized_facts = self.facts
            agg.normalized_at = self.timestamp
            agg.resource = self.resource
            agg.destination = self.destination
            agg.effect_class = self.effect_class
            agg.digest = self.digest
            agg.lineage = self.lineage
            agg.lineage_root = self.lineage_root
            agg.lineage_denials = self.lineage_denials
            agg.predecessor_denied = self.predecessor_denied
            agg.contract_revision = self.contract_revision

    class NormalizationFailed(Event):
        """The arguments do not describe a consequence the capability can have."""

        routed_by: ClassVar[str] = "settles"
        reason: str
        field: str | None
        detail: str

        #: What policy has to settle when this ends the intent (its route); set by
        #: ``next`` from the intent. Events recorded before it existed read as ``budget``.
        settles: Settles = Settles.BUDGET

        def apply(self, agg: EffectIntent) -> None:
            agg.state = State.REJECTED
            agg.reason = self.reason
            agg.field = self.field

    class PolicyDecided(Event):
        """Policy's answer on current facts: allow, deny, require_approval or pause.

        ``reservations`` names the budget counters holding this intent's share; its
        outcome later consumes or releases them.
        """

        class_version: ClassVar[int] = 2
        routed_by: ClassVar[str] = "outcome"
        outcome: DecisionOutcome
        policy_revision: str
        reasons: list[str]
        determining: list[str]
        facts: dict[str, str | int | bool]
        digest: str
        reservations: list[str]

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            """Version 1 had no budgets."""
            state["reservations"] = []

        def apply(self, agg: EffectIntent) -> None:
            agg.decision = self.outcome
            agg.policy_revision = self.policy_revision
            agg.facts = self.facts
            agg.reservations = list(self.reservations)
            if self.outcome == DecisionOutcome.DENY:
                agg.state = State.DENIED
                agg.reason = self.reasons[0] if self.reasons else "policy.denied"
            elif self.outcome == DecisionOutcome.PAUSE:
                if agg.state is not State.PAUSED:
                    agg.paused_at = self.timestamp
                agg.state = State.PAUSED
                agg.reason = self.reasons[0] if self.reasons else "policy.paused"
            elif self.outcome == DecisionOutcome.ALLOW:
                agg.state = State.ALLOWED
            else:  # require_approval: waiting for the review to be opened
                agg.state = State.NORMALIZED

    class ReviewRequested(Event):
        """A human must approve this exact consequence before it may happen.

        The event is the review object as the reviewer is shown it: what will happen
        (``action``), who will see it (``visible_to``), the model's arguments to read
        verbatim (``shown``, untrusted text), the facts the approval rests on
        (``preconditions``), what can be done if it goes wrong (``recovery``), the
        expiry, the digest and the revisions it binds.
        """

        review_id: str
        digest: str
        policy_revision: str
        contract_revision: str
        summary: str
        expires_at: datetime
        # Added later, with defaults: reviews recorded before them read as the summary alone.
        action: str = ""
        visible_to: str = ""
        shown: dict[str, str] = field(default_factory=dict)
        preconditions: tuple[str, ...] = ()
        recovery: tuple[str, ...] = ()

        def apply(self, agg: EffectIntent) -> None:
            agg.state = State.AWAITING_APPROVAL
            agg.review_id = self.review_id
            agg.review_expires_at = self.expires_at
            agg.review = self

    class ReviewApproved(Event):
        """A reviewer approved; the approval is bound to digest and revisions."""

        review_id: str
        reviewer: str
        digest: str
        policy_revision: str
        contract_revision: str

        def apply(self, agg: EffectIntent) -> None:
            agg.state = State.ALLOWED
            agg.approval_digest = self.digest

    class ReviewDenied(Event):
        """A reviewer refused; or changed the call, ``edited_into`` naming the new candidate.

        An edit is a refusal of these bytes: what the reviewer proposed instead is a new
        candidate (``edited_call_id`` in the same run), which crosses every gate again.
        """

        routed_by: ClassVar[str] = "settles"
        review_id: str
        reviewer: str
        reason: str
        # Added later, with defaults: decisions recorded before edits existed.
        edited_into: str = ""
        edited_call_id: str = ""

        #: What policy has to settle when this ends the intent (its route); set by
        #: ``next`` from the intent. Events recorded before it existed read as ``budget``.
        settles: Settles = Settles.BUDGET

        def apply(self, agg: EffectIntent) -> None:
            agg.state = State.DENIED
            agg.reason = "review.edited" if self.edited_into else "review.denied"
            agg.edited_into = self.edited_into or None

    class ApprovalRefused(Event):
        """A reviewer asked to approve and policy said no (their own request, say).

        On the record for the audit; the review stays open for another reviewer.
        """

        review_id: str
        reviewer: str
        reason: str
        policy_revision: str
        determining: list[str]

        def apply(self, agg: EffectIntent) -> None:
            agg.refused_approvals[self.reviewer] = self.reason

    class ReviewExpired(Event):
        """Nobody decided before the review expired."""

        routed_by: ClassVar[str] = "settles"
        review_id: str

        #: What policy has to settle when this ends the intent (its route); set by
        #: ``next`` from the intent. Events recorded before it existed read as ``budget``.
        settles: Settles = Settles.BUDGET

        def apply(self, agg: EffectIntent) -> None:
            agg.state = State.DENIED
            agg.reason = "review.expired"

    class ExecutionAuthorized(Event):
        """The final gate passed; this attempt may be dispatched, and only this one."""

        attempt_id: str
        intent_key: str
        digest: str
        policy_revision: str
        contract_revision: str
        gate_facts: dict[str, str | int | bool]
        deadline_at: datetime

        def apply(self, agg: EffectIntent) -> None:
            agg.state = State.AUTHORIZED
            agg.intent_key = self.intent_key
            agg.attempts.append(Attempt(
                self.attempt_id, self.originator_version, self.deadline_at, self.causation_id,
                intent_key=self.intent_key, digest=self.digest, preconditions=self.gate_facts))

    class GateRefused(Event):
        """The final gate found something no longer true; nothing was dispatched."""

        routed_by: ClassVar[str] = "settles"
        reason: str
        gate_facts: dict[str, str | int | bool]

        #: What policy has to settle when this ends the intent (its route); set by
        #: ``next`` from the intent. Events recorded before it existed read as ``budget``.
        settles: Settles = Settles.BUDGET

        def apply(self, agg: EffectIntent) -> None:
            agg.state = State.REFUSED
            agg.reason = self.reason

    class AttemptSent(Event):
        """The adapter crossed the send boundary: from here the effect may have happened.

        ``claimant`` names the worker's try that claimed it (``lockgate.adapters.claims``);
        empty on events recorded before claims were asked of the executor.
        """

        attempt_id: str
        claimant: str = ""

        def apply(self, agg: EffectIntent) -> None:
            agg.state = State.SENT
            attempt = agg.attempt(self.attempt_id)
            attempt.stage, attempt.crossed, attempt.claimant = AttemptStage.SENT, True, self.claimant

    class AttemptAcknowledged(Event):
        """The remote system accepted the request (it may still be working on it)."""

        attempt_id: str
        remote_ref: str

        def apply(self, agg: EffectIntent) -> None:
            if agg.state is State.AUTHORIZED:  # its ``sent`` report is still on its way
                agg.state = State.SENT
            attempt = agg.attempt(self.attempt_id)
            attempt.stage, attempt.crossed = AttemptStage.ACKNOWLEDGED, True

    class ResultObserved(Event):
        """The adapter saw the remote system's result; the receipt is being checked."""

        attempt_id: str

        def apply(self, agg: EffectIntent) -> None:
            if agg.state is State.AUTHORIZED:
                agg.state = State.SENT
            attempt = agg.attempt(self.attempt_id)
            attempt.stage, attempt.crossed = AttemptStage.OBSERVED, True

    class AttemptInterrupted(Event):
        """An interruptible attempt was stopped before its effect completed."""

        routed_by: ClassVar[str] = "settles"
        attempt_id: str
        detail: str

        #: What policy has to settle when this ends the intent (its route); set by
        #: ``next`` from the intent. Events recorded before it existed read as ``budget``.
        settles: Settles = Settles.BUDGET

        def apply(self, agg: EffectIntent) -> None:
            agg.state = State.INTERRUPTED
            agg.reason = "attempt.interrupted"
            agg.attempt(self.attempt_id).stage = AttemptStage.INTERRUPTED

    class EffectCompleted(Event):
        """The effect happened; the receipt is its evidence.

        ``result`` is what the adapter returned, bounded and checked against the
        contract's result schema; ``provenance`` says who reported it and when. It is
        data from outside: the model sees it labelled as untrusted.
        """

        routed_by: ClassVar[str] = "settles"
        class_version: ClassVar[int] = 2
        attempt_id: str
        receipt: dict[str, str]
        result: dict[str, Any]
        provenance: dict[str, str]

        #: What policy has to settle when this ends the intent (its route); set by
        #: ``next`` from the intent. Events recorded before it existed read as ``budget``.
        settles: Settles = Settles.BUDGET

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            """Version 1 recorded no provenance."""
            state["provenance"] = {}

        def apply(self, agg: EffectIntent) -> None:
            agg.state = State.COMPLETED
            agg.receipt = self.receipt
            agg.result = self.result
            attempt = agg.attempt(self.attempt_id)
            attempt.stage, attempt.crossed = AttemptStage.COMPLETED, True
            agg.settlement = Settlement(
                "EffectCompleted", self.attempt_id, Finding.CONFIRMED, Resolution.COMPLETED,
                self.provenance.get("adapter", ""), dict(self.receipt), self.timestamp, self.event_id)

    class AttemptRejected(Event):
        """The remote system refused the request: the effect did not happen."""

        routed_by: ClassVar[str] = "settles"
        attempt_id: str
        reason: str
        detail: str

        #: What policy has to settle when this ends the intent (its route); set by
        #: ``next`` from the intent. Events recorded before it existed read as ``budget``.
        settles: Settles = Settles.BUDGET

        def apply(self, agg: EffectIntent) -> None:
            agg.state = State.FAILED
            agg.reason = self.reason
            attempt = agg.attempt(self.attempt_id)
            attempt.stage, attempt.reason = AttemptStage.REJECTED, self.reason

    class AttemptFailedBeforeSend(Event):
        """The attempt never crossed its send boundary; the same intent may try again."""

        attempt_id: str
        reason: str
        detail: str

        def apply(self, agg: EffectIntent) -> None:
            agg.state = State.ALLOWED
            attempt = agg.attempt(self.attempt_id)
            attempt.stage, attempt.reason = AttemptStage.FAILED_BEFORE_SEND, self.reason

    class OutcomeUnknown(Event):
        """The attempt may have happened; nothing repeats it until reconciled."""

        attempt_id: str
        evidence: str

        def apply(self, agg: EffectIntent) -> None:
            agg.state = State.UNKNOWN
            agg.attempt(self.attempt_id).stage = AttemptStage.UNKNOWN

    class Reconciled(Event):
        """What a query by identity (or an operator) established about an unknown outcome.

        ``resolution`` is what follows: ``completed`` (the effect is there),
        ``retry`` (proven absent and the contract allows the same intent again, with
        the same key), ``operator`` (absent, but only a person may decide),
        ``not_executed`` (an operator established that it never happened), or
        ``withdrawn`` (proven absent after it was asked to stop: it stays undone).
        """

        class_version: ClassVar[int] = 2
        routed_by: ClassVar[str] = "resolution"
        attempt_id: str
        finding: Finding
        receipt: dict[str, str]
        by: str
        why: str
        resolution: Resolution

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            """Version 1 had no resolution: confirmed completed, anything else needed a person."""
            confirmed = state.get("finding") == Finding.CONFIRMED
            state["resolution"] = (Resolution.COMPLETED if confirmed else Resolution.OPERATOR).value

        def apply(self, agg: EffectIntent) -> None:
            attempt = agg.attempt(self.attempt_id)
            agg.settlement = Settlement(
                "Reconciled", self.attempt_id, self.finding, self.resolution, self.by,
                dict(self.receipt), self.timestamp, self.event_id)
            if self.resolution == Resolution.COMPLETED:
                agg.state = State.COMPLETED
                agg.receipt = self.receipt
                attempt.stage = AttemptStage.COMPLETED
                return
            attempt.stage = AttemptStage.ABSENT
            if self.resolution == Resolution.RETRY:
                agg.state = State.ALLOWED
            elif self.resolution == Resolution.WITHDRAWN:
                agg.state = State.WITHDRAWN
                agg.reason = "proposal.withdrawn"
            elif self.resolution == Resolution.NOT_EXECUTED:
                agg.state = State.FAILED
                agg.reason = "reconciled.not-executed"
            else:
                agg.state = State.NEEDS_OPERATOR

    class WithdrawalRequested(Event):
        """Asked to stop while the attempt's order may already be with an adapter.

        Not yet a withdrawal: the intent stays authorized until the adapter side shows
        the order was not and will not be sent (``Withdrawn``), or that it crossed the
        send boundary first (then ``InterruptionRequested``).
        """

        attempt_id: str
        by: str
        why: str

        def apply(self, agg: EffectIntent) -> None:
            agg.withdrawal = Withdrawal(self.attempt_id, self.by, self.why)

    class Withdrawn(Event):
        """Stopped before execution: nothing was or will be sent."""

        routed_by: ClassVar[str] = "settles"
        by: str
        why: str

        #: What policy has to settle when this ends the intent (its route); set by
        #: ``next`` from the intent. Events recorded before it existed read as ``budget``.
        settles: Settles = Settles.BUDGET

        def apply(self, agg: EffectIntent) -> None:
            agg.state = State.WITHDRAWN
            agg.reason = "proposal.withdrawn"

    class InterruptionRequested(Event):
        """Asked to stop after the send boundary; the outcome is settled by reconciliation."""

        attempt_id: str
        by: str
        why: str

        def apply(self, agg: EffectIntent) -> None:
            agg.interruption_requested = True

    class ReportRefused(Event):
        """The executor refused a report that did not prove it answers an order it received.

        Changes no state (it may follow a terminal one). ``attempt_id`` is empty and
        ``stage`` ``other`` when the report named none the record knows, so at most one
        is recorded per attempt, stage and reason however many forgeries arrive.
        """

        neutral: ClassVar[bool] = True
        attempt_id: str
        stage: ReportStage
        reason: str
        adapter: str

        def apply(self, agg: EffectIntent) -> None:
            agg.refused_reports.add((self.attempt_id, self.stage, self.reason))

    class ProcessingAbandoned(Event):
        """A consumer gave up on a message about this intent after bounded failures.

        ``durable`` names the consumer, ``trigger`` the message (an event id, or the
        stream sequence), ``cause`` the last error (for operators, never shown to a
        model), ``deliveries`` how often it was delivered. Before any order could be out
        the intent ends refused (``candidate.unprocessable``); once one may be out, an
        operator decides (``needs_operator``), since the effect may have happened. A
        settled intent keeps its state: the event only says what was given up.
        """

        routed_by: ClassVar[str] = "settles"
        neutral: ClassVar[bool] = True  # it may follow a terminal state, and then changes nothing
        durable: str
        trigger: str
        cause: str
        deliveries: int

        #: What policy has to settle when this ends the intent (its route); set by
        #: ``next`` from the intent. Events recorded before it existed read as ``budget``.
        settles: Settles = Settles.BUDGET

        def apply(self, agg: EffectIntent) -> None:
            agg.abandoned.append(f"{self.durable}:{self.trigger}")
            if agg.state.terminal or agg.state is State.NEEDS_OPERATOR:
                return
            if agg.state in MAY_HAVE_BEEN_SENT:
                agg.state = State.NEEDS_OPERATOR
                return
            agg.state = State.REFUSED
            agg.reason = "candidate.unprocessable"

    class IntentArchived(Event, Aggregate.Created):
        """The intent's earlier events left the hot store; the views keep every one.

        The archiver appends it to an intent that ended, once the views hold all its
        events, and then purges the events before it. It stays in the stream as the
        intent's identity: a retried call id finds its intent (and its outcome) here,
        never a free id to record again. Folded alone it is the ended intent, as far as
        deciding needs it (who, which call, which bytes, how it ended); after the
        intent's events it changes nothing but marks the intent archived.
        """

        neutral: ClassVar[bool] = True
        tenant: str
        run_id: str
        turn_id: str
        call_id: str
        actor: str
        tool: str
        raw_digest: str
        raw_size_bytes: int
        catalogue_digest: str
        contract_revision: str
        candidate_digest: str
        state: str
        reason: str | None
        archived_versions: int

        def mutate(self, aggregate: Any) -> Any:
            if aggregate is None:  # the history starts here: the ended intent, rebuilt
                return super().mutate(None)
            if self.originator_version != aggregate.version + 1:
                raise OriginatorVersionError(self.originator_version, aggregate.version + 1)
            aggregate.version = self.originator_version
            aggregate.modified_on = self.timestamp
            aggregate.archived = True
            return aggregate

        def apply(self, agg: EffectIntent) -> None:
            agg.state = State(self.state)
            agg.reason = self.reason
            agg.archived = True

    # -- state ----------------------------------------------------------------------

    def __init__(
        self,
        *,
        tenant: str,
        run_id: str,
        turn_id: str,
        call_id: str,
        actor: str,
        tool: str,
        raw_digest: str,
        raw_size_bytes: int,
        catalogue_digest: str,
        arguments: dict[str, Any] | None = None,
        contract_revision: str = "",
        reason: str | None = None,
        field: str | None = None,
        detail: str = "",
        candidate_digest: str = "",
        holds: tuple[str, ...] = (),
        retry_after_s: float | None = None,
        raw_arguments: str = "",
        provider: str = "",
        model: str = "",
        provider_item: dict[str, Any] | None = None,
        follows: str = "",
        follows_how: str = "",
    ) -> None:
        """A new intent, as its first event (received, or rejected by intake) states it.

        ``_create`` passes the event's fields this signature names (one added later needs a
        default, or old events would not load); what later events fill in starts empty.
        """
        # The raw text and the provider's item stay in the event (evidence an operator
        # reads there); the intent keeps what decisions and views use.
        del raw_arguments, provider_item
        self.tenant = tenant
        self.run_id = run_id
        self.turn_id = turn_id
        self.call_id = call_id
        self.actor = actor
        self.tool = tool
        self.raw_digest = raw_digest
        self.raw_size_bytes = raw_size_bytes
        self.catalogue_digest = catalogue_digest
        self.arguments = arguments or {}
        self.contract_revision = contract_revision
        self.provider = provider
        self.model = model
        #: The intent this candidate corrects or follows, and how the link was made.
        self.follows = follows
        self.follows_how = follows_how
        self.state = State.REJECTED if reason else State.PROPOSED
        self.reason = reason
        self.field = field
        self.candidate_digest = candidate_digest
        #: In-flight keys intake holds for this intent (``LG_BUDGETS``).
        self.intake_holds: list[str] = list(holds)
        self.retry_after_s = retry_after_s
        self._init_interpretation()
        self._init_execution()
        self._init_upkeep()

    def _init_interpretation(self) -> None:
        """What normalization, policy and review fill in: nothing yet."""
        #: Its place in the lineage, once normalization compared it with its predecessor.
        self.lineage = ""
        self.lineage_root = ""
        self.lineage_denials = 0
        self.predecessor_denied = False
        self.normalized_arguments: dict[str, Any] = {}
        #: The facts answered with the normalization, and when it was recorded.
        self.normalized_facts: dict[str, str | int | bool] | None = None
        self.normalized_at: datetime | None = None
        self.resource: dict[str, str] = {}
        self.destination = ""
        self.effect_class = ""
        self.digest: str | None = None
        self.decision: DecisionOutcome | None = None
        self.policy_revision: str | None = None
        self.facts: dict[str, str | int | bool] = {}
        self.review_id: str | None = None
        self.review_expires_at: datetime | None = None
        #: The review last opened, as the reviewer is shown it.
        self.review: EffectIntent.ReviewRequested | None = None
        #: The candidate a reviewer's edit made of this one, instead of running it.
        self.edited_into: str | None = None
        self.approval_digest: str | None = None
        #: Reviewers whose approval policy refused, with the reason (this review).
        self.refused_approvals: dict[str, str] = {}

    def _init_execution(self) -> None:
        """What the gate, the adapters' reports, withdrawal and reconciliation fill in: nothing yet."""
        self.intent_key: str | None = None
        self.attempts: list[Attempt] = []
        self.receipt: dict[str, str] = {}
        self.result: dict[str, Any] = {}
        self.interruption_requested = False
        self.withdrawal: Withdrawal | None = None
        #: The last report or reconciliation that settled an attempt's outcome.
        self.settlement: Settlement | None = None
        #: (attempt id, stage, reason) of every refused report on record.
        self.refused_reports: set[tuple[str, ReportStage, str]] = set()
        self.paused_at: datetime | None = None
        self.reservations: list[str] = []

    def _init_upkeep(self) -> None:
        """What the record's upkeep notes: ignored events, abandoned messages, archival; nothing yet."""
        #: Events stored after the intent became terminal, which changed nothing.
        self.ignored: list[str] = []
        #: ``durable:trigger`` of every message a consumer gave up on.
        self.abandoned: list[str] = []
        #: Its events before ``IntentArchived`` left the hot store (the views keep them).
        self.archived = False

    @property
    def intent_id(self) -> str:
        """The id as it appears in subjects."""
        return self.id.hex

    def attempt(self, attempt_id: str) -> Attempt:
        """Return the attempt with this id.

        Raises:
            KeyError: no such attempt was authorized.
        """
        for attempt in self.attempts:
            if attempt.attempt_id == attempt_id:
                return attempt
        raise KeyError(attempt_id)

    @property
    def withdrawal_requested(self) -> bool:
        """True once a withdrawal was asked for while an order may have been out."""
        return self.withdrawal is not None

    @property
    def current_attempt(self) -> Attempt | None:
        """The latest attempt, if any."""
        return self.attempts[-1] if self.attempts else None


#: The topic the first event of every intent names (the library resolves the class by it).
INTENT_TOPIC = get_topic(EffectIntent)
#: What ``EffectIntent.__init__`` takes (the library filters an event's fields by it).
#: It takes no ``id``: the library would pass the originator id as one.
_INIT_NAMES = tuple(name for name in inspect.signature(EffectIntent.__init__).parameters
                    if name != "self")
if "id" in _INIT_NAMES:
    raise TypeError("EffectIntent.__init__ takes an id: _create must pass it as the library does")


def intent_uuid(intent_id: str) -> UUID:
    """Return the UUID of an intent id as it appears in subjects."""
    return UUID(hex=intent_id)
