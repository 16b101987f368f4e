"""Approval's pure decisions."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from lockgate.contracts.messages import DecideReview
from lockgate.core.canonical import canonical_json
from lockgate.core.ids import derived_id
from lockgate.intent.aggregate import EffectIntent, Event, State

SUMMARY_MAX_CHARS = 600


class ReviewProblem(Exception):
    """A review decision that cannot be recorded, with its stable code."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


def summary(intent: EffectIntent) -> str:
    """A deterministic consequence summary: the same digest always reads the same."""
    args = canonical_json(intent.normalized_arguments).decode()
    text = (
        f"{intent.actor} asks to {intent.tool} on {intent.resource.get('type', '?')} "
        f"{intent.resource.get('id', '?')} ({intent.destination}) with {args}"
    )
    return text if len(text) <= SUMMARY_MAX_CHARS else text[: SUMMARY_MAX_CHARS - 1] + "…"


def request_review(
    intent: EffectIntent, *, ttl_s: float, cause: str, now: datetime
) -> list[Event]:
    """``ReviewRequested`` when policy asked for a human, else nothing."""
    if intent.state is not State.NORMALIZED or intent.decision != "require_approval":
        return []
    return [
        EffectIntent.ReviewRequested.next(
            intent,
            now=now,
            event_id=derived_id("approval", cause),
            causation_id=cause,
            review_id=derived_id("review", intent.intent_id, intent.digest or ""),
            digest=intent.digest or "",
            policy_revision=intent.policy_revision or "",
            contract_revision=intent.contract_revision,
            summary=summary(intent),
            expires_at=now + timedelta(seconds=ttl_s),
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
        EffectIntent.ReviewExpired.next(
            intent, now=now, event_id=derived_id("expiry", cause), causation_id=cause,
            review_id=review_id,
        )
    ]


def decide_review(intent: EffectIntent | None, cmd: DecideReview, *, cause: str, now: datetime) -> list[Event]:
    """Record a reviewer's decision, bound to the digest and revisions they saw.

    Raises:
        ReviewProblem: unknown review, already decided, expired, or a digest that is
            not the one under review (a changed byte means a new review).
    """
    if intent is None or intent.review_id != cmd.review_id:
        raise ReviewProblem("review.unknown")
    if intent.state is not State.AWAITING_APPROVAL:
        raise ReviewProblem("review.closed")
    if intent.review_expires_at is not None and now >= intent.review_expires_at:
        raise ReviewProblem("review.expired")
    if cmd.digest != intent.digest:
        raise ReviewProblem("review.digest-mismatch")
    ids: dict[str, Any] = dict(now=now, event_id=derived_id("review-decision", cause), causation_id=cause)
    if cmd.approve:
        return [
            EffectIntent.ReviewApproved.next(
                intent,
                review_id=cmd.review_id,
                reviewer=cmd.reviewer,
                digest=intent.digest,
                policy_revision=intent.policy_revision or "",
                contract_revision=intent.contract_revision,
                **ids,
            )
        ]
    return [
        EffectIntent.ReviewDenied.next(
            intent, review_id=cmd.review_id, reviewer=cmd.reviewer, reason=cmd.reason[:300],
            **ids,
        )
    ]
