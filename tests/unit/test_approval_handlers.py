"""Approval's handlers on in-memory ports: reviews opened and expired, shown, approved, denied
and edited, and the refusals, without a broker.

Who may approve is the deployment's own bundle (``deploy/policies``): any reviewer of the
case's tenant, never the one who asked (``review.self-approval``).
"""

from __future__ import annotations

from datetime import timedelta

import msgspec
import pytest

from lockgate.approval.handlers import ApprovalHandlers
from lockgate.authz.source import BundleSource
from lockgate.contracts import subjects
from lockgate.contracts.messages import (
    Candidate,
    DecideReview,
    Edited,
    EditReview,
    Recorded,
    Refusal,
    ReviewView,
)
from lockgate.contracts.vocabulary import DecisionOutcome
from lockgate.core.ids import intent_id_for
from lockgate.intent.aggregate import EffectIntent, State
from lockgate.intent.events import PolicyDecided, ReviewRequested
from lockgate.runtime.context import MemoryPorts
from lockgate.runtime.service import Retry
from lockgate.runtime.settings import Settings
from lockgate.testing.intents import T0, History
from tests.unit.memory_ports import OPEN_FACTS, state_of, store_history

BUNDLES = BundleSource(Settings().policy_dir)
TTL_S = 60.0


def approval(ports: MemoryPorts, at: timedelta = timedelta(seconds=5)) -> ApprovalHandlers:
    """Approval with the deployment's bundle, its clock ``at`` past T0."""
    return ApprovalHandlers(ports, lambda: T0 + at, review_ttl_s=TTL_S, bundles=BUNDLES)


async def under_review(ports: MemoryPorts) -> tuple[History, EffectIntent]:
    """Policy required approval and approval opened the review; the intent as stored."""
    h = History().normalized()
    h.add(PolicyDecided, outcome=DecisionOutcome.REQUIRE_APPROVAL, policy_revision="pol-1",
          reasons=[], determining=[], facts=OPEN_FACTS, digest=h.intent.digest or "", reservations=[])
    await approval(ports).decided(await store_history(ports, h))
    intent = await state_of(ports, h)
    assert intent.state is State.AWAITING_APPROVAL
    return h, intent


async def decide(ports: MemoryPorts, intent: EffectIntent, reviewer: str, *, approve: bool, digest: str | None = None,
                 review_id: str | None = None, at: timedelta = timedelta(seconds=5)) -> bytes:
    cmd = DecideReview(review_id=review_id or intent.review_id or "", digest=digest or intent.digest or "",
                       approve=approve, reason="" if approve else "not this one")
    return await approval(ports, at).decide(subjects.review("tenant-a", intent.intent_id, "decide", reviewer),
                                     msgspec.json.encode(cmd))


async def stored_types(ports: MemoryPorts, intent_id: str) -> list[str]:
    return [e.event_type for e in (await ports.store.load("tenant-a", intent_id)).events]


async def test_a_decision_that_requires_approval_opens_one_review(ports: MemoryPorts) -> None:
    h, intent = await under_review(ports)
    await approval(ports).decided((await ports.store.load("tenant-a", h.intent_id)).events[2])  # again
    assert (await stored_types(ports, h.intent_id)).count("ReviewRequested") == 1
    assert intent.review_expires_at == T0 + timedelta(seconds=5 + TTL_S)


async def test_a_decision_that_allows_opens_no_review(ports: MemoryPorts) -> None:
    h = History().normalized().decided("allow")
    await approval(ports).decided(await store_history(ports, h))
    assert "ReviewRequested" not in await stored_types(ports, h.intent_id)


async def test_a_reviewer_policy_allows_approves(ports: MemoryPorts) -> None:
    h, intent = await under_review(ports)
    reply = await decide(ports, intent, "rev-1", approve=True)
    assert msgspec.json.decode(reply, type=Recorded) == Recorded("ReviewApproved")
    assert (await state_of(ports, h)).state is State.ALLOWED
    again = await decide(ports, intent, "rev-1", approve=True)  # its reply was lost
    assert msgspec.json.decode(again, type=Refusal).error == "review.closed"
    assert (await stored_types(ports, h.intent_id)).count("ReviewApproved") == 1


async def test_the_one_who_asked_may_not_approve_and_the_review_stays_open(ports: MemoryPorts) -> None:
    h, intent = await under_review(ports)
    reply = msgspec.json.decode(await decide(ports, intent, "user-42", approve=True), type=Refusal)
    assert reply.error == "review.self-approval"
    assert (await state_of(ports, h)).state is State.AWAITING_APPROVAL
    assert (await stored_types(ports, h.intent_id))[-1] == "ApprovalRefused"
    again = msgspec.json.decode(await decide(ports, intent, "user-42", approve=True), type=Refusal)
    assert again.error == "review.self-approval"  # not recorded twice
    assert (await stored_types(ports, h.intent_id)).count("ApprovalRefused") == 1


async def test_a_reviewer_denies(ports: MemoryPorts) -> None:
    h, intent = await under_review(ports)
    reply = await decide(ports, intent, "rev-1", approve=False)
    assert msgspec.json.decode(reply, type=Recorded) == Recorded("ReviewDenied")
    assert (await state_of(ports, h)).state is State.DENIED


async def test_a_decision_on_other_bytes_is_refused(ports: MemoryPorts) -> None:
    h, intent = await under_review(ports)
    reply = await decide(ports, intent, "rev-1", approve=True, digest="sha256:what-the-reviewer-saw")
    assert msgspec.json.decode(reply, type=Refusal).error == "review.digest-mismatch"
    assert (await stored_types(ports, h.intent_id))[-1] == "ReviewRequested"


@pytest.mark.parametrize(("review_id", "at", "code"), [
    ("r-other", timedelta(seconds=5), "review.unknown"),
    (None, timedelta(seconds=5 + TTL_S), "review.expired"),
])
async def test_a_decision_on_a_review_not_open_is_refused(
    ports: MemoryPorts, review_id: str | None, at: timedelta, code: str,
) -> None:
    h, intent = await under_review(ports)
    reply = await decide(ports, intent, "rev-1", approve=True, review_id=review_id, at=at)
    assert msgspec.json.decode(reply, type=Refusal).error == code
    assert (await stored_types(ports, h.intent_id))[-1] == "ReviewRequested"


async def test_a_malformed_decision_is_refused(ports: MemoryPorts) -> None:
    _, intent = await under_review(ports)
    subject = subjects.review("tenant-a", intent.intent_id, "decide", "rev-1")
    assert msgspec.json.decode(await approval(ports).decide(subject, b"{"), type=Refusal).error == "review.malformed"
    assert msgspec.json.decode(await approval(ports).decide("lg.nonsense", b"{}"),
                               type=Refusal).error == "review.unknown"


async def test_an_open_review_is_shown_and_a_missing_one_is_not(ports: MemoryPorts) -> None:
    _, intent = await under_review(ports)
    shown = await approval(ports).show(subjects.review("tenant-a", intent.intent_id, "show", "rev-1"))
    view = msgspec.json.decode(shown, type=ReviewView)
    assert (view.review_id, view.digest, view.actor) == (intent.review_id, intent.digest, "user-42")
    missing = await approval(ports).show(subjects.review("tenant-a", "0" * 32, "show", "rev-1"))
    assert msgspec.json.decode(missing, type=Refusal).error == "review.unknown"


async def test_an_edit_proposes_a_new_candidate_and_closes_the_review_once(ports: MemoryPorts) -> None:
    h, intent = await under_review(ports)
    cmd = EditReview(review_id=intent.review_id or "", digest=intent.digest or "",
                     arguments='{"note": "shorter"}')
    subject = subjects.review("tenant-a", intent.intent_id, "edit", "rev-1")
    edited = msgspec.json.decode(await approval(ports).edit(subject, msgspec.json.encode(cmd)), type=Edited)
    again = msgspec.json.decode(await approval(ports).edit(subject, msgspec.json.encode(cmd)), type=Edited)
    assert again == edited
    ((tenant, run_id, body),) = ports.proposals.proposed.values()
    candidate = msgspec.json.decode(body, type=Candidate)
    assert (tenant, run_id, candidate.arguments, candidate.call_id) == (
        "tenant-a", "run-1", '{"note": "shorter"}', edited.call_id)
    assert edited.candidate_id == intent_id_for("tenant-a", "run-1", edited.call_id)
    after = await state_of(ports, h)
    assert after.state is State.DENIED and after.edited_into == edited.candidate_id
    assert (await stored_types(ports, h.intent_id)).count("ReviewDenied") == 1


async def test_review_expires_at_its_deadline_not_before(ports: MemoryPorts) -> None:
    h = History().normalized().decided("require_approval")
    h.add(ReviewRequested, review_id="r1", digest="sha256:d1", policy_revision="p",
          contract_revision="rev-1", summary="s", expires_at=T0 + timedelta(seconds=60))
    last = await store_history(ports, h)
    early = ApprovalHandlers(ports, lambda: T0 + timedelta(seconds=30), review_ttl_s=60)
    with pytest.raises(Retry) as timer:
        await early.review_opened(last)
    assert 29 < timer.value.delay_s < 31
    assert (await stored_types(ports, h.intent_id))[-1] == "ReviewRequested"
    late = ApprovalHandlers(ports, lambda: T0 + timedelta(seconds=61), review_ttl_s=60)
    await late.review_opened(last)
    intent = await state_of(ports, h)
    assert intent.state is State.DENIED and intent.reason == "review.expired"
