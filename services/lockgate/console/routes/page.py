"""The pages themselves (their scripts and style are mounted under ``/static``)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, Response

from lockgate.console.deps import IntentId

STATIC = Path(__file__).resolve().parent.parent / "static"

router = APIRouter()


@router.get("/", include_in_schema=False)
async def page() -> FileResponse:
    """The console's main page: reviews, unknown outcomes, intents."""
    return FileResponse(STATIC / "index.html", media_type="text/html; charset=utf-8")


@router.get("/intents/{intent_id}", include_in_schema=False)
async def intent_page(intent_id: IntentId) -> FileResponse:
    """The console's page with one intent open (its script reads the id from the path)."""
    return FileResponse(STATIC / "index.html", media_type="text/html; charset=utf-8")


@router.get("/shadow", include_in_schema=False)
async def shadow_page() -> FileResponse:
    """What a shadow bundle would change (``/api/shadow``), for an operator."""
    return FileResponse(STATIC / "shadow.html", media_type="text/html; charset=utf-8")


@router.get("/favicon.ico", include_in_schema=False)
async def favicon() -> Response:
    """No icon, and no 404 in the browser's console for the lack of one."""
    return Response(status_code=204)
