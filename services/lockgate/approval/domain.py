"""Approval's pure decisions."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from lockgate.authz import Decision
from lockgate.contracts.capability import CapabilityContract
from lockgate.contracts.consequence import Reading, clean, render
from lockgate.contracts.messages import Candidate, DecideReview, EditReview, ReviewView
from lockgate.contracts.vocabulary import DecisionOutcome
from lockgate.core.canonical import digest_bytes
from lockgate.core.ids import derived_id, intent_id_for
from lockgate.intent.aggregate import EffectIntent, Event, Stamp, State
from lockgate.intent.events import (
    ApprovalRefused,
    ReviewApproved,
    ReviewDenied,
    ReviewExpired,
    ReviewRequested,
)

SUMMARY_MAX_CHARS = 600


class ReviewProblem(Exception):
    """A review decision that cannot be recorded, with its stable code."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


def reading(intent: EffectIntent, contract: CapabilityContract | None) -> Reading:
    """How the intent's consequence reads, from its normalized request (deterministic)."""
    return render(contract.consequence if contract else None, tool=intent.tool,
                  actor=intent.actor, destination=intent.destination,
                  arguments=intent.normalized_arguments, resource=intent.resource)


def summary(intent: EffectIntent, contract: CapabilityContract | None = None) -> str:
    """A deterministic consequence summary: the same digest always reads the same."""
    return clean(reading(intent, contract).summary, SUMMARY_MAX_CHARS)


def preconditions(intent: EffectIntent) -> tuple[str, ...]:
    """The facts the approval rests on: the final gate checks them again before it runs."""
    return tuple(f"{name} is {value}" for name, value in sorted(intent.facts.items()))


def recovery(contract: CapabilityContract | None) -> tuple[str, ...]:
    """What can be done if it goes wrong, in the contract's own terms."""
    if contract is None:
        return ("an operator decides what happened",)
    lines = [f"it counts as sent once the {contract.send_boundary}"]
    lines.append("it can be interrupted while it runs" if contract.interruptible
                 else "once sent it cannot be stopped")
    if contract.idempotency is not None:
        lines.append("a retry reuses the same effect, never a second one")
    if contract.query_by_identity:
        lines.append("an unknown outcome is looked up by the intent's identity")
    if "operator" in contract.recovery:
        lines.append("an operator settles what no lookup can")
    return tuple(lines)


def request_review(
    intent: EffectIntent, *, ttl_s: float, cause: str, now: datetime,
    contract: CapabilityContract | None = None,
) -> list[Event]:
    """``ReviewRequested`` when policy asked for a human, else nothing."""
    if intent.state is not State.NORMALIZED or intent.decision != DecisionOutcome.REQUIRE_APPROVAL:
        return []
    read = reading(intent, contract)
    return [
        ReviewRequested.next(
            intent,
            Stamp(now=now, event_id=derived_id("approval", cause), causation_id=cause),
            review_id=derived_id("review", intent.intent_id, intent.digest or ""),
            digest=intent.digest or "",
            policy_revision=intent.policy_revision or "",
            contract_revision=intent.contract_revision,
            summary=clean(read.summary, SUMMARY_MAX_CHARS),
            expires_at=now + timedelta(seconds=ttl_s),
            action=read.action,
            visible_to=read.visible_to,
            shown=dict(read.shown),
            preconditions=preconditions(intent),
            recovery=recovery(contract),
        )
    ]


def expire(intent: EffectIntent, review_id: str, *, cause: str, now: datetime) -> list[Event]:
    """``ReviewExpired`` when the review is still open past its expiry."""
    if (
        intent.state is not State.AWAITING_APPROVAL
        or intent.review_id != review_id
        or intent.review_expires_at is None
        or now < intent.review_expires_at
    ):
        return []
    return [
        ReviewExpired.next(
            intent, Stamp(now=now, event_id=derived_id("expiry", cause), causation_id=cause),
            review_id=review_id,
        )
    ]


def show(intent: EffectIntent | None) -> ReviewView:
    """The open review of ``intent``, as a reviewer is shown it.

    Raises:
        ReviewProblem: ``review.unknown`` when nothing awaits a reviewer.
    """
    if intent is None or intent.state is not State.AWAITING_APPROVAL or intent.review_id is None:
        raise ReviewProblem("review.unknown")
    # What was recorded is what is shown: the approval binds the bytes of that review.
    review = intent.review
    return ReviewView(
        review_id=intent.review_id,
        candidate_id=intent.intent_id,
        tenant=intent.tenant,
        actor=intent.actor,
        tool=intent.tool,
        summary=review.summary if review else summary(intent),
        digest=intent.digest or "",
        resource=dict(intent.resource),
        destination=intent.destination,
        expires_at=intent.review_expires_at or intent.modified_on,
        state=intent.state.value,
        action=review.action if review else "",
        visible_to=review.visible_to if review else "",
        shown=dict(review.shown) if review else {},
        preconditions=review.preconditions if review else (),
        recovery=review.recovery if review else (),
        policy_revision=review.policy_revision if review else (intent.policy_revision or ""),
        contract_revision=review.contract_revision if review else intent.contract_revision,
    )


def decide_review(
    intent: EffectIntent | None,
    cmd: DecideReview,
    *,
    reviewer: str,
    permission: Decision | None,
    cause: str,
    now: datetime,
) -> list[Event]:
    """Record a reviewer's decision, bound to the digest and revisions they saw.

    ``reviewer`` is the authenticated user (from the request's subject, never the
    payload). ``permission`` is policy's answer to "may this reviewer approve it"; an
    approval it does not allow is recorded as ``ApprovalRefused`` and the review stays
    open. A denial needs no permission: any reviewer of the tenant may refuse.

    Raises:
        ReviewProblem: unknown review, already decided, expired, or a digest that is
            not the one under review (a changed byte means a new review).
    """
    intent = open_review_for(intent, cmd.review_id, cmd.digest, now)
    stamp = Stamp(now=now, event_id=derived_id("review-decision", cause), causation_id=cause)
    if cmd.approve:
        if permission is None or permission.outcome != DecisionOutcome.ALLOW:
            reasons = permission.reasons if permission is not None else ("policy.unavailable",)
            reason = (reasons or ("policy.no-permit",))[0]
            if intent.refused_approvals.get(reviewer) == reason:
                raise ReviewProblem(reason)  # the same refusal is on the record already
            return [
                ApprovalRefused.next(
                    intent, replace(stamp, event_id=derived_id("approval-refused", cause, reason)),
                    review_id=cmd.review_id, reviewer=reviewer, reason=reason,
                    policy_revision=permission.revision if permission else "",
                    determining=list(permission.determining if permission else ()),
                )
            ]
        return [
            ReviewApproved.next(
                intent, stamp,
                review_id=cmd.review_id,
                reviewer=reviewer,
                digest=cmd.digest,  # the review's own (open_review_for checked they are one)
                policy_revision=intent.policy_revision or "",
                contract_revision=intent.contract_revision,
            )
        ]
    return [
        ReviewDenied.next(
            intent, stamp, review_id=cmd.review_id, reviewer=reviewer, reason=cmd.reason[:300],
        )
    ]


def open_review_for(intent: EffectIntent | None, review_id: str, digest: str, now: datetime) -> EffectIntent:
    """The intent whose review ``review_id`` of ``digest`` is open now.

    Raises:
        ReviewProblem: unknown review, already decided, expired, or another digest.
    """
    if intent is None or intent.review_id != review_id:
        raise ReviewProblem("review.unknown")
    if intent.state is not State.AWAITING_APPROVAL:
        raise ReviewProblem("review.closed")
    if intent.review_expires_at is not None and now >= intent.review_expires_at:
        raise ReviewProblem("review.expired")
    if digest != intent.digest:
        raise ReviewProblem("review.digest-mismatch")
    return intent


def edited_candidate(intent: EffectIntent, cmd: EditReview) -> Candidate:
    """The new candidate a reviewer's edit makes: the same run, turn and tool, other bytes.

    Its call id is derived from the review and the proposed bytes, so the same edit sent
    again is the same candidate (the stream and intake deduplicate it), and another
    edit is another one.

    Raises:
        ReviewProblem: ``review.edit-unchanged`` when the bytes are the model's own.
    """
    proposed = digest_bytes(cmd.arguments.encode())
    if proposed == intent.raw_digest:
        raise ReviewProblem("review.edit-unchanged")
    call_id = derived_id("edit", intent.intent_id, cmd.review_id, proposed)
    return Candidate(run_id=intent.run_id, turn_id=intent.turn_id, call_id=call_id,
                     tool=intent.tool, arguments=cmd.arguments)


def record_edit(intent: EffectIntent, cmd: EditReview, candidate: Candidate, *, reviewer: str,
                cause: str, now: datetime) -> list[Event]:
    """``ReviewDenied`` naming the candidate the edit made: these bytes will not run."""
    stamp = Stamp(now=now, event_id=derived_id("review-edit", cause), causation_id=cause)
    return [ReviewDenied.next(
        intent, stamp, review_id=cmd.review_id, reviewer=reviewer,
        reason=cmd.reason[:300] or "edited by the reviewer",
        edited_into=intent_id_for(intent.tenant, candidate.run_id, candidate.call_id),
        edited_call_id=candidate.call_id,
    )]
