"""The console's pure decisions: honest labels, what a person may read, what a refusal means."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lockgate.intent.aggregate import State
from lockgate.views.rows import IntentRow, ReviewRow


@dataclass(frozen=True)
class Label:
    """What a person is told an intent's state means: a stable code and plain words."""

    code: str
    text: str


STOPPED = Label("stopped", "stopped before execution")
INTERRUPTION = Label("interruption_requested", "interruption requested")
UNKNOWN = Label("outcome_unknown", "outcome unknown")
EXECUTED = Label("executed", "executed")

_BY_STATE: dict[str, Label] = {
    State.REJECTED: STOPPED,
    State.DENIED: STOPPED,
    State.REFUSED: STOPPED,  # the final gate (or a give-up) before any order existed
    State.WITHDRAWN: STOPPED,  # only ever recorded once no adapter can still send it
    State.FAILED: Label("not_executed", "not executed (refused by the remote system, or proven absent)"),
    State.INTERRUPTED: Label("interrupted", "interrupted after it was sent, before it completed"),
    State.UNKNOWN: UNKNOWN,
    State.NEEDS_OPERATOR: Label("outcome_unknown", "outcome unknown: an operator decides"),
    State.COMPLETED: EXECUTED,
    State.AWAITING_APPROVAL: Label("awaiting_review", "waiting for a reviewer"),
    State.PAUSED: Label("paused", "paused until policy has its evidence"),
    State.AUTHORIZED: Label("executing", "authorized: the order may be with the adapter"),
    State.SENT: Label("executing", "sent: waiting for the result"),
}


EDITED = Label("stopped", "stopped before execution: a reviewer edited it into a new candidate")


def label(state: str, model_status: str, reason: str | None = None) -> Label:
    """The honest label of an intent in ``state`` whose model-facing status is ``model_status``.

    Nothing is called stopped while an order may still be sent: a withdrawal asked for
    after the order was dispatched is *requested*, and after the send boundary it is an
    *interruption requested*, until the record says how it ended.
    """
    if model_status == "interruption_requested":
        return INTERRUPTION
    if model_status == "withdrawal_requested":
        return Label("withdrawal_requested", "withdrawal requested: the order may still be sent")
    if state == State.DENIED and reason == "review.edited":
        return EDITED
    return _BY_STATE.get(state, Label("in_progress", "in progress"))


#: Each event type in plain words, for the timeline (the record's own name beside it).
EVENT_WORDS: dict[str, str] = {
    "CandidateReceived": "the model proposed it",
    "CandidateRejected": "rejected at intake: stopped before execution",
    "CandidateNormalized": "normalized into one exact consequence (digest)",
    "NormalizationFailed": "could not be normalized: stopped before execution",
    "PolicyDecided": "policy decided",
    "ReviewRequested": "a reviewer was asked",
    "ReviewApproved": "a reviewer approved",
    "ReviewDenied": "a reviewer denied: stopped before execution",
    "ApprovalRefused": "an approval was refused by policy",
    "ReviewExpired": "the review expired: stopped before execution",
    "ExecutionAuthorized": "the final gate passed: an order may be sent",
    "GateRefused": "the final gate refused: stopped before execution",
    "AttemptSent": "the adapter crossed the send boundary",
    "AttemptAcknowledged": "the remote system acknowledged",
    "ResultObserved": "the adapter saw the result",
    "AttemptInterrupted": "interrupted before it completed",
    "EffectCompleted": "executed",
    "AttemptRejected": "the remote system refused it: not executed",
    "AttemptFailedBeforeSend": "failed before it was sent (the same intent may try again)",
    "OutcomeUnknown": "outcome unknown",
    "Reconciled": "the outcome was reconciled",
    "WithdrawalRequested": "withdrawal requested",
    "Withdrawn": "withdrawn: stopped before execution",
    "InterruptionRequested": "interruption requested",
    "ReportRefused": "an adapter report was refused",
    "ProcessingAbandoned": "a step gave up after repeated failures",
    "IntentArchived": "archived: it left the hot store (the views keep every event)",
}


def event_words(event_type: str, data: Mapping[str, object] | None = None) -> str:
    """What an event means, in plain words, with the one fact that says how it went."""
    words = EVENT_WORDS.get(event_type, event_type)
    data = data or {}
    if event_type == "PolicyDecided" and data.get("outcome"):
        return f"{words}: {data['outcome']}"
    if event_type == "ReviewDenied" and data.get("edited_into"):
        return (f"a reviewer edited it into candidate {data['edited_into']}: stopped before "
                f"execution (by {data.get('reviewer', '?')})")
    if event_type == "Reconciled" and data.get("finding"):
        return f"{words}: {data['finding']}, then {data.get('resolution', '?')} (by {data.get('by', '?')})"
    who = data.get("reviewer") or data.get("by")
    return f"{words} (by {who})" if who else words


def decidable(review: ReviewRow, intent: IntentRow, *, now: str) -> bool:
    """Whether a person may still decide ``review``: it waits, has not expired at ``now``
    (the views' time format, which sorts as text), and is the one ``intent`` awaits."""
    return (review.status == "waiting" and intent.state == State.AWAITING_APPROVAL
            and intent.review_id == review.review_id and now < review.expires_at)


class Forbidden(Exception):
    """A person asked for something outside their role or tenants (``code`` says which)."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


def tenants_to_read(scope: tuple[str, ...], asked: str | None) -> tuple[str, ...] | None:
    """The tenants a query may cover: ``None`` for every tenant, else exactly these.

    ``scope`` is the person's tenants (empty: every tenant); ``asked`` the one they filter on.

    Raises:
        Forbidden: ``auth.tenant-forbidden`` when ``asked`` is outside ``scope``.
    """
    if asked is not None:
        if scope and asked not in scope:
            raise Forbidden("auth.tenant-forbidden", f"you do not act in tenant {asked}")
        return (asked,)
    return scope or None


#: Refusals from the services, by what they mean for the person who asked.
_NOT_FOUND = ("review.unknown", "withdraw.unknown-intent", "reconcile.unknown-intent", "intent.unknown")
_UNAVAILABLE = ("lockgate.unavailable", "service.unavailable", "reconcile.unavailable")
_CONFLICT = ("review.closed", "review.expired", "review.digest-mismatch", "withdraw.in-progress",
             "reconcile.nothing-open", "reconcile.contended", "reconcile.already-settled")


def http_status(code: str) -> int:
    """The HTTP status of a service's refusal ``code``.

    A refusal nobody listed is a conflict with the record (409), never a success; an
    approval policy does not permit (``review.self-approval``, ``policy.*``) is 403.
    """
    if code in _NOT_FOUND:
        return 404
    if code in _UNAVAILABLE:
        return 503
    if code.endswith(".malformed"):
        return 422
    if code in _CONFLICT:
        return 409
    if code.startswith(("review.", "policy.", "approval.")):
        return 403
    return 409
