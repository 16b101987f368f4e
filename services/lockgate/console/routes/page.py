"""The page itself (its script and style are mounted under ``/static``)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, Response

STATIC = Path(__file__).resolve().parent.parent / "static"

router = APIRouter()


@router.get("/", include_in_schema=False)
async def page() -> FileResponse:
    """The console's one page."""
    return FileResponse(STATIC / "index.html", media_type="text/html; charset=utf-8")


@router.get("/favicon.ico", include_in_schema=False)
async def favicon() -> Response:
    """No icon, and no 404 in the browser's console for the lack of one."""
    return Response(status_code=204)
