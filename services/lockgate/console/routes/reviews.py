"""Reviews: the queue, an intent's latest review with its evidence, and a reviewer's decisions.

A decision goes over the reviewer's own connection, bound to the review id and digest shown.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Query

from lockgate.console.answers import review_detail, review_of
from lockgate.console.deps import (
    Anyone,
    IntentId,
    Reviewer,
    Tenant,
    TheConsole,
    act,
    merged,
    tenants,
    visible_intent,
)
from lockgate.console.errors import ApiError
from lockgate.console.models import (
    Decision,
    Edit,
    EditedInto,
    Recorded,
    ReviewDetail,
    ReviewList,
    ReviewStatus,
)
from lockgate.console.people import Person
from lockgate.console.running import Console
from lockgate.views.rows import iso, review_evidence

router = APIRouter(tags=["reviews"])


@router.get("/api/reviews")
async def reviews(
    who: Anyone, console: TheConsole, tenant: Tenant = None,
    status: Annotated[ReviewStatus, Query(description="waiting: the queue.")] = "waiting",
    limit: Annotated[int, Query(ge=1, le=200)] = 100,
) -> ReviewList:
    """The review queue (or reviews in another status) of your tenants, oldest first."""
    scope = tenants(who, tenant)
    lists = await asyncio.gather(*(
        console.read(console.views.reviews, tenant=t, status=status, limit=limit)
        for t in (scope or (None,))))
    rows = merged(lists, lambda r: (r.requested_at, r.review_id), reverse=False, limit=limit)
    return ReviewList(items=[review_of(r) for r in rows])


@router.get("/api/intents/{intent_id}/review")
async def review(intent_id: IntentId, who: Anyone, console: TheConsole) -> ReviewDetail:
    """An intent's latest review: the consequence first, then its technical detail."""
    row = await visible_intent(console, who, intent_id)
    found, events = await asyncio.gather(
        console.read(console.views.reviews, intent_id=intent_id, status=None),
        console.read(console.views.timeline, intent_id))
    if not found:
        raise ApiError(404, "review.unknown", f"intent {intent_id} has no review")
    return review_detail(found[-1], row, review_evidence(events, row), now=iso(datetime.now(UTC)))


async def _decide(intent_id: str, body: Decision, who: Person, console: Console,
                  approve: bool) -> Recorded:
    row = await visible_intent(console, who, intent_id)
    event = await act(who.gateway.decide_review(
        tenant=row.tenant, candidate_id=intent_id, review_id=body.review_id,
        digest=body.digest, approve=approve, reason=body.reason))
    return Recorded(recorded=event, by=who.name)


@router.post("/api/intents/{intent_id}/review/approve")
async def approve(intent_id: IntentId, body: Decision, who: Reviewer,
                  console: TheConsole) -> Recorded:
    """Approve the review shown, bound to its digest: refused if it is of other bytes."""
    return await _decide(intent_id, body, who, console, True)


@router.post("/api/intents/{intent_id}/review/deny")
async def deny(intent_id: IntentId, body: Decision, who: Reviewer,
               console: TheConsole) -> Recorded:
    """Deny the review shown: the intent stops before execution."""
    return await _decide(intent_id, body, who, console, False)


@router.post("/api/intents/{intent_id}/review/edit")
async def edit(intent_id: IntentId, body: Edit, who: Reviewer, console: TheConsole) -> EditedInto:
    """Propose narrower arguments instead: the original will not run, and the new
    candidate crosses every gate again (with its own digest, and its own review)."""
    row = await visible_intent(console, who, intent_id)
    made = await act(who.gateway.edit_review(
        tenant=row.tenant, candidate_id=intent_id, review_id=body.review_id,
        digest=body.digest, arguments=body.arguments, reason=body.reason))
    return EditedInto(candidate_id=made.candidate_id, call_id=made.call_id, by=who.name)
