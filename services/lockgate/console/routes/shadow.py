"""Shadow decisions: what a shadow bundle, running beside the active one, would have changed.

Each decision the shadow bundle made on live traffic is recorded beside the real one and
never enforced (``PolicyDecided.shadow``); the views keep each intent's latest
(``lockgate.views``). An operator reads its flips here before promoting it.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Annotated

from fastapi import APIRouter, Query

from lockgate.console.deps import Operator, Tenant, TheConsole, merged, tenants
from lockgate.console.models import ShadowDecision, ShadowFlip, ShadowReport, ShadowSide
from lockgate.views.rows import ShadowRow

router = APIRouter(tags=["shadow"])

#: A bundle revision as the record writes it.
REVISION = r"^sha256:[0-9a-f]{64}$"


def decision_of(row: ShadowRow) -> ShadowDecision:
    """The API's shadow decision for a views row, linked to its intent's page."""
    return ShadowDecision(
        intent_id=row.intent_id, tenant=row.tenant, run_id=row.run_id, tool=row.tool,
        decided_at=row.decided_at,
        active=ShadowSide(revision=row.active_revision, outcome=row.active_outcome,
                          reasons=list(row.active_reasons), determining=list(row.active_determining)),
        shadow=ShadowSide(revision=row.shadow_revision, outcome=row.shadow_outcome,
                          reasons=list(row.shadow_reasons), determining=list(row.shadow_determining)),
        flip=row.flip, policy=row.policy, link=f"/intents/{row.intent_id}")


@router.get("/api/shadow")
async def shadow(
    who: Operator, console: TheConsole, tenant: Tenant = None,
    revision: Annotated[str | None, Query(pattern=REVISION, description=(
        "This shadow bundle's decisions (default: the newest decision's shadow bundle)."))] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> ShadowReport:
    """The shadow bundle's flips by capability and policy, and its latest flipped decisions."""
    scope = tenants(who, tenant) or (None,)
    if revision is None:
        newest = merged(await asyncio.gather(*(
            console.read(console.views.shadow_decisions, tenant=t, limit=1) for t in scope)),
            lambda r: r.decided_at, reverse=True, limit=1)
        if not newest:
            return ShadowReport(revision=None, flips=[], flipped=[])
        revision = newest[0].shadow_revision
    counted, flipped = await asyncio.gather(
        asyncio.gather(*(console.read(console.views.shadow_flips, revision=revision, tenant=t) for t in scope)),
        asyncio.gather(*(console.read(console.views.shadow_decisions, revision=revision, tenant=t,
                                      flipped_only=True, limit=limit) for t in scope)))
    # Each tenant's counts, summed: the same flip in two tenants is one line.
    flips: Counter[tuple[str, str, str]] = Counter()
    for rows in counted:
        for f in rows:
            flips[(f.tool, f.flip, f.policy)] += f.count
    return ShadowReport(
        revision=revision,
        flips=[ShadowFlip(tool=k[0], flip=k[1], policy=k[2], count=n)
               for k, n in sorted(flips.items(), key=lambda kv: (-kv[1], kv[0]))],
        flipped=[decision_of(r) for r in merged(flipped, lambda r: (r.decided_at, r.intent_id),
                                                reverse=True, limit=limit)])
