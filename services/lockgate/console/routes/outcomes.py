"""Outcomes: what waits for an operator, and an operator's reconcile and withdraw."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Query

from lockgate.console.answers import intent_of
from lockgate.console.deps import (
    IntentId,
    Operator,
    Tenant,
    TheConsole,
    act,
    merged,
    tenants,
    visible_intent,
)
from lockgate.console.models import Outcomes, Recorded, Resolution, Withdrawal, Withdrawn
from lockgate.contracts.vocabulary import Finding

router = APIRouter(tags=["outcomes"])


@router.get("/api/outcomes")
async def outcomes(who: Operator, console: TheConsole, tenant: Tenant = None,
                   limit: Annotated[int, Query(ge=1, le=200)] = 100) -> Outcomes:
    """Intents whose outcome is unknown, or that wait for an operator, oldest first."""
    scope = tenants(who, tenant)
    lists = await asyncio.gather(*(
        console.read(console.views.needing_a_person, tenant=t, limit=limit)
        for t in (scope or (None,))))
    rows = merged(lists, lambda r: r.updated_at, reverse=False, limit=limit)
    return Outcomes(items=[intent_of(r) for r in rows])


@router.post("/api/intents/{intent_id}/reconcile")
async def reconcile(intent_id: IntentId, body: Resolution, who: Operator,
                    console: TheConsole) -> Recorded:
    """Settle an unknown outcome: the effect happened (confirmed) or did not (absent)."""
    row = await visible_intent(console, who, intent_id)
    finding = Finding.CONFIRMED if body.finding == "confirmed" else Finding.ABSENT
    event = await act(who.gateway.resolve_outcome(
        tenant=row.tenant, candidate_id=intent_id, finding=finding, why=body.why))
    return Recorded(recorded=event, by=who.name)


@router.post("/api/intents/{intent_id}/withdraw")
async def withdraw(intent_id: IntentId, body: Withdrawal, who: Operator,
                   console: TheConsole) -> Withdrawn:
    """Stop a candidate by its state; the answer is what the model is now told."""
    row = await visible_intent(console, who, intent_id)
    told = await act(who.gateway.withdraw(row.tenant, intent_id, why=body.why))
    return Withdrawn(candidate_id=told.candidate_id, status=told.status, code=told.code)
