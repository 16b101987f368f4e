"""Approval's handlers."""

from __future__ import annotations

import msgspec

from lockgate.approval.domain import ReviewProblem, decide_review, expire, request_review
from lockgate.contracts.messages import DecideReview, Recorded, Refusal
from lockgate.core.ids import derived_id, is_subject_token
from lockgate.eventstore.base import RecordedEvent
from lockgate.intent.aggregate import EffectIntent, Event
from lockgate.intent.codec import decode_event
from lockgate.runtime.context import Ports
from lockgate.runtime.service import Clock, Retry, decide_and_append


class ApprovalHandlers:
    """Opens reviews, expires them, records reviewers' decisions."""

    def __init__(self, ports: Ports, clock: Clock, *, review_ttl_s: float) -> None:
        self.ports = ports
        self.clock = clock
        self.review_ttl_s = review_ttl_s

    async def decided(self, recorded: RecordedEvent) -> None:
        """Open a review when policy required one."""
        decided = decode_event(recorded)
        if not isinstance(decided, EffectIntent.PolicyDecided) or decided.outcome != "require_approval":
            return  # most decisions need no human: no load, nothing to do

        async def step(intent: EffectIntent | None) -> list[Event]:
            if intent is None:
                return []
            return request_review(
                intent, ttl_s=self.review_ttl_s, cause=recorded.event_id, now=self.clock()
            )

        await decide_and_append(self.ports.store, recorded.tenant, recorded.intent_id, step)

    async def review_opened(self, recorded: RecordedEvent) -> None:
        """Expire the review at its deadline (the message comes back then)."""
        event = decode_event(recorded)
        if not isinstance(event, EffectIntent.ReviewRequested):
            return  # outside this durable's filter: nothing to expire
        remaining = (event.expires_at - self.clock()).total_seconds()
        if remaining > 0:
            raise Retry(min(remaining + 0.05, 3600.0), "review still open")

        async def step(intent: EffectIntent | None) -> list[Event]:
            if intent is None:
                return []
            return expire(intent, event.review_id, cause=recorded.event_id, now=self.clock())

        await decide_and_append(self.ports.store, recorded.tenant, recorded.intent_id, step)

    async def decide(self, tenant: str, intent_id: str, body: bytes) -> bytes:
        """A reviewer's decision (request/reply); the reply says what was recorded."""
        try:
            cmd = msgspec.json.decode(body, type=DecideReview)
        except msgspec.MsgspecError as exc:
            return msgspec.json.encode(Refusal("review.malformed", str(exc)[:200]))
        if not (is_subject_token(tenant) and is_subject_token(intent_id)):
            return msgspec.json.encode(Refusal("review.unknown"))
        cause = derived_id("decide", tenant, intent_id, cmd.review_id, cmd.reviewer, str(cmd.approve))

        async def step(intent: EffectIntent | None) -> list[Event]:
            return decide_review(intent, cmd, cause=cause, now=self.clock())

        try:
            events = await decide_and_append(self.ports.store, tenant, intent_id, step)
        except ReviewProblem as problem:
            return msgspec.json.encode(Refusal(problem.code))
        return msgspec.json.encode(Recorded(type(events[0]).__name__))
