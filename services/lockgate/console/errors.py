"""The console's refusals: one typed error, its body, and the handlers that answer with it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from lockgate.console.models import ErrorBody


class ApiError(Exception):
    """A refusal with its HTTP status and typed body."""

    def __init__(self, status: int, code: str, detail: str = "") -> None:
        super().__init__(detail or code)
        self.status = status
        self.code = code
        self.detail = detail


#: Every route may answer these (the OpenAPI document lists them on each).
ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": text} for status, text in (
        (400, "The body cannot be parsed at all."),
        (401, "No token, or a forged, expired or refused one."),
        (403, "Outside your role or your tenants, or not permitted by policy."),
        (404, "Not in your tenants' views."),
        (409, "The record says otherwise (closed, expired, another digest, already settled)."),
        (422, "The request is malformed."),
        (503, "The broker or a service did not answer."),
    )
}


def error_response(status: int, code: str, detail: str = "",
                   headers: Mapping[str, str] | None = None) -> JSONResponse:
    """The body of every refusal; a 401 names the scheme to authenticate with."""
    extra = {**(headers or {}), **({"WWW-Authenticate": "Bearer"} if status == 401 else {})}
    return JSONResponse({"error": code, "detail": detail}, status_code=status, headers=extra)


def answer_errors(app: FastAPI) -> None:
    """Answer ``ApiError``, a malformed request and Starlette's own errors with ``ErrorBody``."""

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.code, exc.detail)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()))
        return error_response(422, "request.malformed", f"{where}: {first.get('msg', 'invalid')}"[:300])

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # Starlette's own headers stay (a 405's Allow).
        return error_response(exc.status_code, f"http.{exc.status_code}", str(exc.detail)[:300],
                              exc.headers)
