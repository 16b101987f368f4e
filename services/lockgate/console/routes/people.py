"""``/api/me``: who a token is."""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter

from lockgate.console.deps import Anyone
from lockgate.console.models import Me

router = APIRouter(tags=["people"])


@router.get("/api/me")
async def me(who: Anyone) -> Me:
    """Who the token is: their user, role and tenants."""
    return Me(user=who.user, name=who.name, role=who.kind, tenants=list(who.tenants),
              expires_at=datetime.fromtimestamp(who.expires_at, UTC))
