"""``evolve(state, event) -> state``: how each event moves an intent, and ``fold`` over a history.

One small function per event type, found by the event's type in ``_EVOLVERS``; each
returns a new ``EffectIntent`` (``msgspec.structs.replace``, one copy per event) and never
touches the one it was given. ``evolve`` checks what every event must satisfy first: it
belongs to this intent, it comes next, and (invariant 6) no event takes an intent out of
a terminal state: a non-neutral event after one keeps its place in the sequence, moves
the version and is listed in ``ignored``, nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any
from uuid import UUID

from msgspec.structs import replace

from lockgate.contracts.vocabulary import (
    AttemptStage,
    DecisionOutcome,
    Finding,
    Resolution,
)
from lockgate.core.errors import LockgateError
from lockgate.intent import events as ev
from lockgate.intent.events import Event
from lockgate.intent.state import (
    MAY_HAVE_BEEN_SENT,
    TERMINAL,
    Attempt,
    EffectIntent,
    Settlement,
    State,
    Withdrawal,
)


class FoldError(LockgateError):
    """A history that is not one intent's, in order: it folds to no state."""


class OriginatorIDError(FoldError):
    """An event of another intent in this intent's history."""

    def __init__(self, got: UUID, expected: UUID) -> None:
        super().__init__(f"event of intent {got} in the history of {expected}",
                         code="intent.originator-id")
        self.got = got
        self.expected = expected


class OriginatorVersionError(FoldError):
    """An event out of place: its version is not the one after the intent's."""

    def __init__(self, got: int, expected: int) -> None:
        super().__init__(f"event version {got} where {expected} comes next",
                         code="intent.originator-version")
        self.got = got
        self.expected = expected


class NotAFirstEvent(FoldError):
    """A history that starts with an event that follows a state, or a first event inside one."""

    def __init__(self, event_type: str, version: int) -> None:
        super().__init__(f"{event_type} at version {version} cannot start or restart an intent",
                         code="intent.not-a-first-event")
        self.event_type = event_type
        self.version = version


def evolve(state: EffectIntent | None, event: Event) -> EffectIntent:
    """Return the intent after ``event`` (``state`` is ``None`` before its first event).

    Raises:
        OriginatorIDError: ``event`` is another intent's.
        OriginatorVersionError: ``event`` does not come next.
        NotAFirstEvent: a history starting with anything but a first event, or a first
            event inside a history (that is not an archival mark).
        KeyError: ``event`` names an attempt the intent does not have.
    """
    cls = type(event)
    if state is None:
        if not cls.creates:
            raise NotAFirstEvent(cls.__name__, event.originator_version)
        return _CREATORS[cls](event)
    # A UUID is its own equal: the identity test spares UUID.__eq__ (Python code) for
    # events decoded with the intent's own id object. The archival mark is not checked
    # for it: it is appended by id to whatever history the store holds.
    if (event.originator_id is not state.id and event.originator_id != state.id
            and cls is not _ARCHIVED):
        raise OriginatorIDError(event.originator_id, state.id)
    if event.originator_version != state.version + 1:
        raise OriginatorVersionError(event.originator_version, state.version + 1)
    evolver = _EVOLVERS.get(cls)
    if evolver is None or (state.state in TERMINAL and not cls.neutral):
        if not cls.neutral and state.state in TERMINAL:
            return replace(state, version=event.originator_version, modified_on=event.timestamp,
                           ignored=(*state.ignored, cls.__name__))
        raise NotAFirstEvent(cls.__name__, event.originator_version)
    return evolver(state, event)


def fold(events: Iterable[Event]) -> EffectIntent | None:
    """Rebuild the intent from its events (``None`` when there are none).

    Raises:
        FoldError: the events are not one intent's history, in order (see ``evolve``).
        KeyError: an event names an attempt the intent does not have.
    """
    folded: EffectIntent | None = None
    step = evolve
    for event in events:
        folded = step(folded, event)
    return folded


def _attempts(s: EffectIntent, attempt_id: str, **changes: Any) -> tuple[Attempt, ...]:
    """``s``'s attempts with the one ``attempt_id`` names changed.

    Raises:
        KeyError: no such attempt was authorized.
    """
    for n, attempt in enumerate(s.attempts):
        if attempt.attempt_id == attempt_id:
            return (*s.attempts[:n], replace(attempt, **changes), *s.attempts[n + 1:])
    raise KeyError(attempt_id)


# -- first events -------------------------------------------------------------------------

def _received(e: ev.CandidateReceived) -> EffectIntent:
    # The raw text and the provider's item stay in the event (evidence an operator
    # reads there); the intent keeps what decisions and views use.
    return EffectIntent(
        id=e.originator_id, version=e.originator_version, created_on=e.timestamp,
        modified_on=e.timestamp, tenant=e.tenant, run_id=e.run_id, turn_id=e.turn_id,
        call_id=e.call_id, actor=e.actor, tool=e.tool, raw_digest=e.raw_digest,
        raw_size_bytes=e.raw_size_bytes, catalogue_digest=e.catalogue_digest,
        arguments=e.arguments or {}, contract_revision=e.contract_revision, provider=e.provider,
        model=e.model, follows=e.follows, follows_how=e.follows_how,
        candidate_digest=e.candidate_digest, intake_holds=tuple(e.holds))


def _rejected(e: ev.CandidateRejected) -> EffectIntent:
    return EffectIntent(
        id=e.originator_id, version=e.originator_version, created_on=e.timestamp,
        modified_on=e.timestamp, tenant=e.tenant, run_id=e.run_id, turn_id=e.turn_id,
        call_id=e.call_id, actor=e.actor, tool=e.tool, raw_digest=e.raw_digest,
        raw_size_bytes=e.raw_size_bytes, catalogue_digest=e.catalogue_digest,
        provider=e.provider, model=e.model, follows=e.follows, follows_how=e.follows_how,
        state=State.REJECTED if e.reason else State.PROPOSED, reason=e.reason, field=e.field,
        candidate_digest=e.candidate_digest, retry_after_s=e.retry_after_s)


def _archived_alone(e: ev.IntentArchived) -> EffectIntent:
    """The history starts at the mark: the ended intent, as far as deciding needs it."""
    return EffectIntent(
        id=e.originator_id, version=e.originator_version, created_on=e.timestamp,
        modified_on=e.timestamp, tenant=e.tenant, run_id=e.run_id, turn_id=e.turn_id,
        call_id=e.call_id, actor=e.actor, tool=e.tool, raw_digest=e.raw_digest,
        raw_size_bytes=e.raw_size_bytes, catalogue_digest=e.catalogue_digest,
        contract_revision=e.contract_revision, candidate_digest=e.candidate_digest,
        state=State(e.state), reason=e.reason, archived=True)


# -- intake, normalization, policy and review ---------------------------------------------
#
# Each function copies the intent once, its version and time moved on with the changes
# (``replace`` called here, not through a helper: a second keyword layer per event was
# a sixth of a fold).

def _normalized(s: EffectIntent, e: ev.CandidateNormalized) -> EffectIntent:
    return replace(
        s, version=e.originator_version, modified_on=e.timestamp,
        state=State.NORMALIZED, normalized_arguments=e.arguments, normalized_facts=e.facts,
        normalized_at=e.timestamp, resource=e.resource, destination=e.destination,
        effect_class=e.effect_class, digest=e.digest, lineage=e.lineage,
        lineage_root=e.lineage_root, lineage_denials=e.lineage_denials,
        predecessor_denied=e.predecessor_denied, contract_revision=e.contract_revision)


def _normalization_failed(s: EffectIntent, e: ev.NormalizationFailed) -> EffectIntent:
    return replace(s, version=e.originator_version, modified_on=e.timestamp,
                   state=State.REJECTED, reason=e.reason, field=e.field)


def _policy_decided(s: EffectIntent, e: ev.PolicyDecided) -> EffectIntent:
    state, reason, paused_at = State.NORMALIZED, s.reason, s.paused_at
    if e.outcome == DecisionOutcome.DENY:
        state, reason = State.DENIED, e.reasons[0] if e.reasons else "policy.denied"
    elif e.outcome == DecisionOutcome.PAUSE:
        if s.state is not State.PAUSED:
            paused_at = e.timestamp
        state, reason = State.PAUSED, e.reasons[0] if e.reasons else "policy.paused"
    elif e.outcome == DecisionOutcome.ALLOW:
        state = State.ALLOWED
    # else require_approval: waiting for the review to be opened (normalized)
    return replace(s, version=e.originator_version, modified_on=e.timestamp,
                   decision=e.outcome, policy_revision=e.policy_revision, facts=e.facts,
                   reservations=tuple(e.reservations), state=state, reason=reason,
                   paused_at=paused_at)


def _review_requested(s: EffectIntent, e: ev.ReviewRequested) -> EffectIntent:
    return replace(s, version=e.originator_version, modified_on=e.timestamp,
                   state=State.AWAITING_APPROVAL, review_id=e.review_id,
                   review_expires_at=e.expires_at, review=e)


def _review_approved(s: EffectIntent, e: ev.ReviewApproved) -> EffectIntent:
    return replace(s, version=e.originator_version, modified_on=e.timestamp,
                   state=State.ALLOWED, approval_digest=e.digest)


def _review_denied(s: EffectIntent, e: ev.ReviewDenied) -> EffectIntent:
    return replace(s, version=e.originator_version, modified_on=e.timestamp,
                   state=State.DENIED, reason="review.edited" if e.edited_into else "review.denied",
                   edited_into=e.edited_into or None)


def _approval_refused(s: EffectIntent, e: ev.ApprovalRefused) -> EffectIntent:
    return replace(s, version=e.originator_version, modified_on=e.timestamp,
                   refused_approvals={**s.refused_approvals, e.reviewer: e.reason})


def _review_expired(s: EffectIntent, e: ev.ReviewExpired) -> EffectIntent:
    return replace(s, version=e.originator_version, modified_on=e.timestamp,
                   state=State.DENIED, reason="review.expired")


# -- the gate, the adapters' reports, withdrawal and reconciliation -----------------------

def _authorized(s: EffectIntent, e: ev.ExecutionAuthorized) -> EffectIntent:
    attempt = Attempt(
        attempt_id=e.attempt_id, authorized_version=e.originator_version,
        deadline_at=e.deadline_at, authorized_by=e.causation_id, intent_key=e.intent_key,
        digest=e.digest, preconditions=dict(e.gate_facts))
    return replace(s, version=e.originator_version, modified_on=e.timestamp,
                   state=State.AUTHORIZED, intent_key=e.intent_key,
                   attempts=(*s.attempts, attempt))


def _gate_refused(s: EffectIntent, e: ev.GateRefused) -> EffectIntent:
    return replace(s, version=e.originator_version, modified_on=e.timestamp,
                   state=State.REFUSED, reason=e.reason)


def _sent(s: EffectIntent, e: ev.AttemptSent) -> EffectIntent:
    attempts = _attempts(s, e.attempt_id, stage=AttemptStage.SENT, crossed=True,
                         claimant=e.claimant)
    return replace(s, version=e.originator_version, modified_on=e.timestamp,
                   state=State.SENT, attempts=attempts)


def _acknowledged(s: EffectIntent, e: ev.AttemptAcknowledged) -> EffectIntent:
    attempts = _attempts(s, e.attempt_id, stage=AttemptStage.ACKNOWLEDGED, crossed=True)
    # An authorized intent is sent: its ``sent`` report may still be on its way.
    return replace(s, version=e.originator_version, modified_on=e.timestamp,
                   state=State.SENT if s.state is State.AUTHORIZED else s.state,
                   attempts=attempts)


def _observed(s: EffectIntent, e: ev.ResultObserved) -> EffectIntent:
    attempts = _attempts(s, e.attempt_id, stage=AttemptStage.OBSERVED, crossed=True)
    return replace(s, version=e.originator_version, modified_on=e.timestamp,
                   state=State.SENT if s.state is State.AUTHORIZED else s.state,
                   attempts=attempts)


def _interrupted(s: EffectIntent, e: ev.AttemptInterrupted) -> EffectIntent:
    attempts = _attempts(s, e.attempt_id, stage=AttemptStage.INTERRUPTED)
    return replace(s, version=e.originator_version, modified_on=e.timestamp,
                   state=State.INTERRUPTED, reason="attempt.interrupted", attempts=attempts)


def _completed(s: EffectIntent, e: ev.EffectCompleted) -> EffectIntent:
    attempts = _attempts(s, e.attempt_id, stage=AttemptStage.COMPLETED, crossed=True)
    settlement = Settlement(
        "EffectCompleted", e.attempt_id, Finding.CONFIRMED, Resolution.COMPLETED,
        e.provenance.get("adapter", ""), dict(e.receipt), e.timestamp, e.event_id)
    return replace(s, version=e.originator_version, modified_on=e.timestamp,
                   state=State.COMPLETED, receipt=e.receipt, result=e.result,
                   attempts=attempts, settlement=settlement)


def _attempt_rejected(s: EffectIntent, e: ev.AttemptRejected) -> EffectIntent:
    attempts = _attempts(s, e.attempt_id, stage=AttemptStage.REJECTED, reason=e.reason)
    return replace(s, version=e.originator_version, modified_on=e.timestamp,
                   state=State.FAILED, reason=e.reason, attempts=attempts)


def _failed_before_send(s: EffectIntent, e: ev.AttemptFailedBeforeSend) -> EffectIntent:
    attempts = _attempts(s, e.attempt_id, stage=AttemptStage.FAILED_BEFORE_SEND, reason=e.reason)
    return replace(s, version=e.originator_version, modified_on=e.timestamp,
                   state=State.ALLOWED, attempts=attempts)


def _unknown(s: EffectIntent, e: ev.OutcomeUnknown) -> EffectIntent:
    attempts = _attempts(s, e.attempt_id, stage=AttemptStage.UNKNOWN)
    return replace(s, version=e.originator_version, modified_on=e.timestamp,
                   state=State.UNKNOWN, attempts=attempts)


#: Where a reconciliation that found the effect absent leaves the intent, by resolution,
#: with its reason (``None``: the reason stays); any other resolution: an operator decides.
_ABSENT_ENDS: dict[Resolution, tuple[State, str | None]] = {
    Resolution.RETRY: (State.ALLOWED, None),
    Resolution.WITHDRAWN: (State.WITHDRAWN, "proposal.withdrawn"),
    Resolution.NOT_EXECUTED: (State.FAILED, "reconciled.not-executed"),
}


def _reconciled(s: EffectIntent, e: ev.Reconciled) -> EffectIntent:
    settlement = Settlement("Reconciled", e.attempt_id, e.finding, e.resolution, e.by,
                            dict(e.receipt), e.timestamp, e.event_id)
    if e.resolution == Resolution.COMPLETED:
        attempts = _attempts(s, e.attempt_id, stage=AttemptStage.COMPLETED)
        return replace(s, version=e.originator_version, modified_on=e.timestamp,
                       state=State.COMPLETED, receipt=e.receipt, attempts=attempts,
                       settlement=settlement)
    attempts = _attempts(s, e.attempt_id, stage=AttemptStage.ABSENT)
    state, reason = _ABSENT_ENDS.get(e.resolution, (State.NEEDS_OPERATOR, None))
    return replace(s, version=e.originator_version, modified_on=e.timestamp,
                   state=state, reason=s.reason if reason is None else reason,
                   attempts=attempts, settlement=settlement)


def _withdrawal_requested(s: EffectIntent, e: ev.WithdrawalRequested) -> EffectIntent:
    return replace(s, version=e.originator_version, modified_on=e.timestamp,
                   withdrawal=Withdrawal(e.attempt_id, e.by, e.why))


def _withdrawn(s: EffectIntent, e: ev.Withdrawn) -> EffectIntent:
    return replace(s, version=e.originator_version, modified_on=e.timestamp,
                   state=State.WITHDRAWN, reason="proposal.withdrawn")


def _interruption_requested(s: EffectIntent, e: ev.InterruptionRequested) -> EffectIntent:
    return replace(s, version=e.originator_version, modified_on=e.timestamp,
                   interruption_requested=True)


# -- the record's upkeep ------------------------------------------------------------------

def _report_refused(s: EffectIntent, e: ev.ReportRefused) -> EffectIntent:
    return replace(s, version=e.originator_version, modified_on=e.timestamp,
                   refused_reports=s.refused_reports | {(e.attempt_id, e.stage, e.reason)})


def _abandoned(s: EffectIntent, e: ev.ProcessingAbandoned) -> EffectIntent:
    state, reason = s.state, s.reason
    if state.terminal or state is State.NEEDS_OPERATOR:
        pass  # a settled intent keeps its state: the event only says what was given up
    elif state in MAY_HAVE_BEEN_SENT:
        state = State.NEEDS_OPERATOR
    else:
        state, reason = State.REFUSED, "candidate.unprocessable"
    return replace(s, version=e.originator_version, modified_on=e.timestamp,
                   abandoned=(*s.abandoned, f"{e.durable}:{e.trigger}"), state=state,
                   reason=reason)


def _archived(s: EffectIntent, e: ev.IntentArchived) -> EffectIntent:
    """After the intent's events the mark changes nothing but says it is archived."""
    return replace(s, version=e.originator_version, modified_on=e.timestamp, archived=True)


_ARCHIVED = ev.IntentArchived
#: The first events: each makes the intent it starts.
_CREATORS: dict[type[Event], Callable[[Any], EffectIntent]] = {
    ev.CandidateReceived: _received,
    ev.CandidateRejected: _rejected,
    ev.IntentArchived: _archived_alone,
}
#: Every other event, by its type: the function that folds it (its argument is that type).
_EVOLVERS: dict[type[Event], Callable[[EffectIntent, Any], EffectIntent]] = {
    ev.CandidateNormalized: _normalized,
    ev.NormalizationFailed: _normalization_failed,
    ev.PolicyDecided: _policy_decided,
    ev.ReviewRequested: _review_requested,
    ev.ReviewApproved: _review_approved,
    ev.ReviewDenied: _review_denied,
    ev.ApprovalRefused: _approval_refused,
    ev.ReviewExpired: _review_expired,
    ev.ExecutionAuthorized: _authorized,
    ev.GateRefused: _gate_refused,
    ev.AttemptSent: _sent,
    ev.AttemptAcknowledged: _acknowledged,
    ev.ResultObserved: _observed,
    ev.AttemptInterrupted: _interrupted,
    ev.EffectCompleted: _completed,
    ev.AttemptRejected: _attempt_rejected,
    ev.AttemptFailedBeforeSend: _failed_before_send,
    ev.OutcomeUnknown: _unknown,
    ev.Reconciled: _reconciled,
    ev.WithdrawalRequested: _withdrawal_requested,
    ev.Withdrawn: _withdrawn,
    ev.InterruptionRequested: _interruption_requested,
    ev.ReportRefused: _report_refused,
    ev.ProcessingAbandoned: _abandoned,
    ev.IntentArchived: _archived,
}
