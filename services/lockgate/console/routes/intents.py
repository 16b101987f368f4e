"""Intents: how current the views are, the intents of a person's tenants, one with its record."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Query

from lockgate.console.answers import event_of, intent_of, review_of
from lockgate.console.deps import (
    Anyone,
    IntentId,
    Tenant,
    TheConsole,
    merged,
    tenants,
    visible_intent,
)
from lockgate.console.models import ID, IntentDetail, IntentPage, ViewsState
from lockgate.intent.aggregate import State

router = APIRouter(tags=["intents"])


@router.get("/api/views")
async def views_state(who: Anyone, console: TheConsole) -> ViewsState:
    """How far the views go, and how many events they lag the stream (null: unknown)."""
    lag = await console.lag() if console.lag is not None else None
    return ViewsState(position=console.position, lag=lag)


@router.get("/api/intents")
async def intents(
    who: Anyone, console: TheConsole, tenant: Tenant = None,
    state: Annotated[State | None, Query(description="Only intents in this state.")] = None,
    model_status: Annotated[str | None, Query(pattern=r"^[a-z_]{1,40}$",
                                              description="What the model was told.")] = None,
    run: Annotated[str | None, Query(pattern=ID, description="Only this run.")] = None,
    before: Annotated[int | None, Query(ge=0, le=2**62, description="A position: the page after it.")] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> IntentPage:
    """Intents in your tenants, newest change first, paged by position."""
    scope = tenants(who, tenant)
    state_value = state.value if state is not None else None
    pages = await asyncio.gather(*(
        console.read(console.views.intents, tenant=t, state=state_value, run_id=run,
                     model_status=model_status, before=before, limit=limit)
        for t in (scope or (None,))))
    rows = merged(pages, lambda r: r.last_sequence, reverse=True, limit=limit)
    return IntentPage(items=[intent_of(r) for r in rows],
                      next_before=rows[-1].last_sequence if len(rows) == limit else None)


@router.get("/api/intents/{intent_id}")
async def intent(intent_id: IntentId, who: Anyone, console: TheConsole) -> IntentDetail:
    """One intent with its timeline (every event, in order) and its reviews."""
    row = await visible_intent(console, who, intent_id)
    events, reviews, chain = await asyncio.gather(
        console.read(console.views.timeline, intent_id),
        console.read(console.views.reviews, intent_id=intent_id, status=None),
        console.read(console.views.lineage, intent_id))
    evidence = who.kind == "operator"
    return IntentDetail(intent=intent_of(row), timeline=[event_of(e, evidence=evidence) for e in events],
                        reviews=[review_of(r) for r in reviews],
                        lineage=[intent_of(r) for r in chain if r.tenant == row.tenant])
