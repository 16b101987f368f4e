"""Approval's handlers."""

from __future__ import annotations

from typing import TypeVar

import msgspec

from lockgate.approval.domain import (
    ReviewProblem,
    decide_review,
    edited_candidate,
    expire,
    open_review_for,
    record_edit,
    request_review,
    show,
)
from lockgate.authz.intents import Evidence, judge_approval
from lockgate.authz.source import BundleSource
from lockgate.contracts.messages import DecideReview, Edited, EditReview, Recorded, Refusal
from lockgate.contracts.subjects import Command, NotACommandSubject, parse_review
from lockgate.contracts.vocabulary import DecisionOutcome
from lockgate.core.clock import Clock
from lockgate.core.ids import derived_id, intent_id_for
from lockgate.eventstore.base import RecordedEvent
from lockgate.intent.aggregate import EffectIntent, Event
from lockgate.intent.codec import decode_event
from lockgate.intent.events import ApprovalRefused, PolicyDecided, ReviewRequested
from lockgate.runtime.context import Ports
from lockgate.runtime.service import Retry
from lockgate.runtime.specs import EXPIRY_RECHECK_S


class ApprovalHandlers:
    """Opens reviews, expires them, shows them and records reviewers' decisions."""

    def __init__(
        self, ports: Ports, clock: Clock, *, review_ttl_s: float, bundles: BundleSource | None = None
    ) -> None:
        self.ports = ports
        self.clock = clock
        self.review_ttl_s = review_ttl_s
        self.bundles = bundles

    async def decided(self, recorded: RecordedEvent) -> None:
        """Open a review when policy required one."""
        decided = decode_event(recorded)
        if not isinstance(decided, PolicyDecided) or (
            decided.outcome != DecisionOutcome.REQUIRE_APPROVAL
        ):
            return  # most decisions need no human: no load, nothing to do

        async def step(intent: EffectIntent | None) -> list[Event]:
            if intent is None:
                return []
            contract = await self.ports.registry.get(intent.tool) if intent.tool else None
            return request_review(
                intent, ttl_s=self.review_ttl_s, cause=recorded.event_id, now=self.clock(),
                contract=contract,
            )

        await self.ports.intents.decide(recorded.tenant, recorded.intent_id, step, trigger=recorded)

    async def review_opened(self, recorded: RecordedEvent) -> None:
        """Expire the review at its deadline (the message comes back then)."""
        event = decode_event(recorded)
        if not isinstance(event, ReviewRequested):
            return  # outside this durable's filter: nothing to expire
        remaining = (event.expires_at - self.clock()).total_seconds()
        if remaining > 0:
            raise Retry(min(remaining + 0.05, EXPIRY_RECHECK_S), "review still open")

        async def step(intent: EffectIntent | None) -> list[Event]:
            if intent is None:
                return []
            return expire(intent, event.review_id, cause=recorded.event_id, now=self.clock())

        await self.ports.intents.decide(recorded.tenant, recorded.intent_id, step, trigger=recorded)

    async def show(self, subject: str) -> bytes:
        """A reviewer asks to see an open review (request/reply)."""
        try:
            command = parse_review(subject)
            view = show(await self.ports.intents.load(command.tenant, command.intent_id))
        except NotACommandSubject:
            return msgspec.json.encode(Refusal("review.unknown"))
        except ReviewProblem as problem:
            return msgspec.json.encode(Refusal(problem.code))
        return msgspec.json.encode(view)

    async def decide(self, subject: str, body: bytes) -> bytes:
        """A reviewer's decision (request/reply); the reply says what was recorded.

        The reviewer is the subject's last token: the broker lets each reviewer publish
        only subjects that end in its own name.
        """
        parsed = _review_request(subject, body, DecideReview)
        if isinstance(parsed, bytes):
            return parsed
        command, cmd = parsed
        reviewer = command.principal
        cause = derived_id("decide", command.tenant, command.intent_id, cmd.review_id, reviewer,
                           str(cmd.approve))

        async def step(intent: EffectIntent | None) -> list[Event]:
            permission = None
            if intent is not None and cmd.approve and self.bundles is not None:
                run = await self.ports.runs.get(intent.tenant, intent.run_id)
                permission = judge_approval(self.bundles.current(), intent, reviewer, Evidence(run=run))
            return decide_review(intent, cmd, reviewer=reviewer, permission=permission,
                                 cause=cause, now=self.clock())

        try:
            decided = await self.ports.intents.decide(command.tenant, command.intent_id, step)
        except ReviewProblem as problem:
            return msgspec.json.encode(Refusal(problem.code))
        events = decided.events
        if not events:
            # The same decision again, already recorded: what it became is on the record.
            intent = decided.after
            state = intent.state.value if intent else "unknown"
            return msgspec.json.encode(Refusal("review.closed", state))
        if isinstance(events[0], ApprovalRefused):
            return msgspec.json.encode(Refusal(events[0].reason, "approval not permitted"))
        return msgspec.json.encode(Recorded(type(events[0]).__name__))

    async def edit(self, subject: str, body: bytes) -> bytes:
        """A reviewer proposes narrower arguments: a new candidate, the original closed.

        The new candidate is published first (its call id is derived from the review
        and the bytes, so a repeat is the same candidate and the stream and intake
        deduplicate it), then the original's review is closed with ``ReviewDenied``
        naming it: a crash between the two leaves an edit the reviewer can send again,
        never an original closed for a candidate that does not exist.
        """
        parsed = _review_request(subject, body, EditReview)
        if isinstance(parsed, bytes):
            return parsed
        command, cmd = parsed
        reviewer = command.principal
        now = self.clock()
        loaded = await self.ports.intents.load(command.tenant, command.intent_id)
        try:
            if loaded is not None and loaded.edited_into and loaded.review_id == cmd.review_id:
                # Closed by an edit: the same edit again is answered as it was.
                repeat = edited_candidate(loaded, cmd)
                if loaded.edited_into == intent_id_for(loaded.tenant, repeat.run_id, repeat.call_id):
                    return msgspec.json.encode(Edited(candidate_id=loaded.edited_into,
                                                      call_id=repeat.call_id))
            intent = open_review_for(loaded, cmd.review_id, cmd.digest, now)
            candidate = edited_candidate(intent, cmd)
        except ReviewProblem as problem:
            return msgspec.json.encode(Refusal(problem.code))
        body_out = msgspec.json.encode(candidate)
        await self.ports.proposals.propose(intent.tenant, candidate.run_id, body_out,
                                           message_id=f"{candidate.run_id}.{candidate.call_id}.edit")
        cause = derived_id("edit", command.tenant, command.intent_id, cmd.review_id, candidate.call_id)

        async def step(current: EffectIntent | None) -> list[Event]:
            if current is not None and current.edited_into:
                if current.edited_into != intent_id_for(current.tenant, candidate.run_id,
                                                        candidate.call_id):
                    raise ReviewProblem("review.closed")  # another edit closed it first
                return []  # recorded already (the same edit sent again)
            opened = open_review_for(current, cmd.review_id, cmd.digest, self.clock())
            return record_edit(opened, cmd, candidate, reviewer=reviewer, cause=cause, now=now)

        try:
            final = (await self.ports.intents.decide(command.tenant, command.intent_id, step)).after
        except ReviewProblem as problem:
            return msgspec.json.encode(Refusal(problem.code))
        if final is None or not final.edited_into:
            return msgspec.json.encode(Refusal("review.closed"))
        return msgspec.json.encode(Edited(candidate_id=final.edited_into, call_id=candidate.call_id))


R = TypeVar("R", DecideReview, EditReview)


def _review_request(subject: str, body: bytes, kind: type[R]) -> tuple[Command, R] | bytes:
    """A reviewer's request read from its subject and body, or the refusal to answer with."""
    try:
        return parse_review(subject), msgspec.json.decode(body, type=kind)
    except NotACommandSubject:
        return msgspec.json.encode(Refusal("review.unknown"))
    except msgspec.MsgspecError as exc:
        return msgspec.json.encode(Refusal("review.malformed", str(exc)[:200]))
