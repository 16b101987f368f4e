"""What every router is built from: who asks, the running console, and the checks on both.

Each is a FastAPI dependency or a helper the routes share, so a route states what it needs
(``Anyone``, ``Reviewer``, ``Operator``, ``TheConsole``) and nothing more.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Query, Request
from fastapi import Path as PathParam
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from lockgate.client.sdk import ClientError, Refused
from lockgate.console import domain
from lockgate.console.errors import ApiError
from lockgate.console.models import ID
from lockgate.console.people import NotAccepted, Person
from lockgate.console.running import Console
from lockgate.views.rows import IntentRow

T = TypeVar("T")

_bearer = HTTPBearer(auto_error=False, description="A token from `lockgate token --as NAME`.")


def console_of(request: Request) -> Console:
    """The running console (set by ``serve``)."""
    console: Console | None = getattr(request.app.state, "console", None)
    if console is None:
        raise ApiError(503, "console.starting", "the console is not serving yet")
    return console


async def person(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Person:
    """The person behind the request's bearer token, verified by connecting as them."""
    if credentials is None or not credentials.credentials:
        raise ApiError(401, "auth.missing", "send Authorization: Bearer <token from `lockgate token`>")
    console = console_of(request)
    try:
        return await console.people.verify(credentials.credentials)
    except NotAccepted as exc:
        raise ApiError(exc.status, exc.code, exc.detail) from None


async def reviewer(who: Annotated[Person, Depends(person)]) -> Person:
    """A reviewer, or 403."""
    if who.kind != "reviewer":
        raise ApiError(403, "auth.role-forbidden", "only a reviewer may do this")
    return who


async def operator(who: Annotated[Person, Depends(person)]) -> Person:
    """An operator, or 403."""
    if who.kind != "operator":
        raise ApiError(403, "auth.role-forbidden", "only an operator may do this")
    return who


Anyone = Annotated[Person, Depends(person)]
Reviewer = Annotated[Person, Depends(reviewer)]
Operator = Annotated[Person, Depends(operator)]
TheConsole = Annotated[Console, Depends(console_of)]
IntentId = Annotated[str, PathParam(pattern=ID, description="The intent's (candidate's) id.")]
Tenant = Annotated[str | None, Query(pattern=ID, description="Only this tenant (one of yours).")]


def _declared(dependant: Dependant) -> set[str]:
    names = {p.alias for p in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _declared(sub)
    return names


async def known_query(request: Request) -> None:
    """Refuse query parameters the route does not declare: a misspelt filter (``?stat=``)
    would otherwise quietly answer with everything."""
    route = request.scope.get("route")
    if not isinstance(route, APIRoute):
        return
    unknown = sorted(set(request.query_params) - _declared(route.dependant))
    if unknown:
        raise ApiError(422, "request.malformed", f"unknown query parameter {unknown[0][:40]!r}")


def tenants(who: Person, asked: str | None) -> tuple[str, ...] | None:
    """The tenants a query of ``who`` covers (``None``: every tenant), or 403."""
    try:
        return domain.tenants_to_read(who.tenants, asked)
    except domain.Forbidden as exc:
        raise ApiError(403, exc.code, exc.detail) from None


async def visible_intent(console: Console, who: Person, intent_id: str) -> IntentRow:
    """The intent, if it is in one of the person's tenants (else 404: no hint it exists)."""
    row = await console.read(console.views.intent, intent_id)
    if row is None or (who.tenants and row.tenant not in who.tenants):
        raise ApiError(404, "intent.unknown", f"no intent {intent_id} in your tenants")
    return row


async def act(call: Awaitable[T]) -> T:
    """A request over the person's connection: a service's refusal becomes its HTTP status."""
    try:
        return await call
    except Refused as exc:
        raise ApiError(domain.http_status(exc.code), exc.code, str(exc)) from None
    except ClientError as exc:
        raise ApiError(503, "lockgate.unavailable", str(exc)) from None


def merged(lists: Sequence[Sequence[T]], key: Callable[[T], Any], *, reverse: bool,
           limit: int) -> list[T]:
    """One tenant-by-tenant read's lists as one, ordered by ``key``, at most ``limit``."""
    rows = [r for rows in lists for r in rows]
    return sorted(rows, key=key, reverse=reverse)[:limit]
