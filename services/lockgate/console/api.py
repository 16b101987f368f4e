"""The console's HTTP API and page: FastAPI routes over the views and each person's connection.

Reads come from the views, scoped to the tenants the role table gives the person.
Actions (approve, deny, reconcile, withdraw) go over the person's own NATS connection,
so the broker checks them against that person's permissions and the services record
them under that person's name; the console adds no authority of its own.

``create_app()`` builds the routes without any I/O (the OpenAPI document is generated
from it); ``serve()`` in ``app.py`` hands it a ``Console`` with the views and the people.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, TypeVar

import msgspec
from fastapi import Depends, FastAPI, Query, Request
from fastapi import Path as PathParam
from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response, StreamingResponse
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.trustedhost import TrustedHostMiddleware

from lockgate.client.sdk import ClientError, Refused
from lockgate.console import domain
from lockgate.console.models import (
    ID,
    Decision,
    Edit,
    EditedInto,
    ErrorBody,
    Intent,
    IntentDetail,
    IntentPage,
    Label,
    Me,
    Outcomes,
    Recorded,
    Resolution,
    Review,
    ReviewDetail,
    ReviewList,
    ReviewStatus,
    TimelineEvent,
    ViewsState,
    Withdrawal,
    Withdrawn,
)
from lockgate.console.people import NotAccepted, People, Person
from lockgate.contracts.vocabulary import Finding
from lockgate.intent.aggregate import State
from lockgate.views.rows import EventRow, IntentRow, ReviewRow, iso
from lockgate.views.store import SOURCE, Views, views_position

STATIC = Path(__file__).resolve().parent / "static"
VERSION = "1"

#: The page runs its own script and style only, talks to this origin only, and cannot be framed.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
_SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}
#: The console listens on loopback: a request naming another host is a DNS-rebinding attempt.
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
#: The live stream says it is alive this often when nothing changes.
KEEPALIVE_S = 15.0
#: At most this many changed intents in one live update (more: the page reloads its lists).
CHANGES_MAX = 200

T = TypeVar("T")


class ApiError(Exception):
    """A refusal with its HTTP status and typed body."""

    def __init__(self, status: int, code: str, detail: str = "") -> None:
        super().__init__(detail or code)
        self.status = status
        self.code = code
        self.detail = detail


class Console:
    """What the routes read and act through: the views, the people, the latest position."""

    def __init__(self, views: Views, people: People, *, poll_s: float = 0.5,
                 lag: Callable[[], Awaitable[int | None]] | None = None,
                 sources: Sequence[str] = (SOURCE,)) -> None:
        """``sources``: the events streams (partitions) the views track a position in."""
        self.views = views
        self.sources = tuple(sources)
        self.people = people
        self.poll_s = poll_s
        #: How many events the views lag the stream, as the projector says (None: unknown).
        self.lag = lag
        self.position = 0
        self.stopping = asyncio.Event()
        self._changed = asyncio.Condition()

    async def read(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """A views call, on a thread (the views' calls block)."""
        return await asyncio.to_thread(call, *args, **kwargs)

    async def follow(self) -> None:
        """Poll the views' tracked position until stopping; wake every live stream on a change."""
        while not self.stopping.is_set():
            try:
                position = await self.read(views_position, self.views, self.sources) or 0
            except Exception:  # noqa: BLE001 - the views may be briefly locked; poll again
                position = self.position
            if position != self.position:
                self.position = position
                async with self._changed:
                    self._changed.notify_all()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), self.poll_s)
        async with self._changed:
            self._changed.notify_all()

    async def changed_since(self, position: int, timeout_s: float) -> bool:
        """Wait until the views move past ``position`` (False: ``timeout_s`` passed, or stopping)."""
        if self.position != position:
            return True
        async with self._changed:
            try:
                await asyncio.wait_for(
                    self._changed.wait_for(lambda: self.position != position or self.stopping.is_set()),
                    timeout_s)
            except TimeoutError:
                return False
        return self.position != position and not self.stopping.is_set()


# -- rows to answers ------------------------------------------------------------------------


def intent_of(row: IntentRow) -> Intent:
    """The API's intent for a views row, with its honest label."""
    lab = domain.label(row.state, row.model_status, row.reason)
    return Intent(
        intent_id=row.intent_id, tenant=row.tenant, run_id=row.run_id, actor=row.actor,
        call_id=row.call_id, tool=row.tool, effect_class=row.effect_class,
        destination=row.destination, state=row.state, reason=row.reason,
        model_status=row.model_status, attempts=row.attempts, attempt_stage=row.attempt_stage,
        review_id=row.review_id, created_at=row.created_at, updated_at=row.updated_at,
        position=row.last_sequence, label=Label(code=lab.code, text=lab.text),
        follows=row.follows or None, lineage=row.lineage or None,
    )


def review_of(row: ReviewRow) -> Review:
    """The API's review for a views row (fields a newer row has and this API does not, ignored)."""
    fields = msgspec.to_builtins(row)
    return Review(**{k: v for k, v in fields.items() if k in Review.model_fields})


def _payload(row: EventRow) -> dict[str, Any]:
    try:
        envelope = json.loads(row.data)
    except ValueError:
        return {}
    inner = envelope.get("data", envelope) if isinstance(envelope, dict) else {}
    return inner if isinstance(inner, dict) else {}


#: What a candidate's first event keeps as evidence that only an operator reads.
EVIDENCE = ("raw_arguments", "provider_item")


def event_of(row: EventRow, *, evidence: bool = True) -> TimelineEvent:
    """The API's timeline entry for an event row (without the raw evidence unless ``evidence``)."""
    data = _payload(row)
    if not evidence:
        data = {k: ("(withheld: operators only)" if k in EVIDENCE and v else v) for k, v in data.items()}
    return TimelineEvent(sequence=row.sequence, version=row.version, type=row.event_type,
                         words=domain.event_words(row.event_type, data), recorded_at=row.recorded_at,
                         data=data)


def _merged(lists: Sequence[Sequence[T]], key: Callable[[T], Any], *, reverse: bool,
            limit: int) -> list[T]:
    rows = [r for rows in lists for r in rows]
    return sorted(rows, key=key, reverse=reverse)[:limit]


# -- who asks -------------------------------------------------------------------------------

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


def _tenants(who: Person, asked: str | None) -> tuple[str, ...] | None:
    try:
        return domain.tenants_to_read(who.tenants, asked)
    except domain.Forbidden as exc:
        raise ApiError(403, exc.code, exc.detail) from None


async def _visible_intent(console: Console, who: Person, intent_id: str) -> IntentRow:
    """The intent, if it is in one of the person's tenants (else 404: no hint it exists)."""
    row = await console.read(console.views.intent, intent_id)
    if row is None or (who.tenants and row.tenant not in who.tenants):
        raise ApiError(404, "intent.unknown", f"no intent {intent_id} in your tenants")
    return row


async def _act(call: Awaitable[T]) -> T:
    """A request over the person's connection: a service's refusal becomes its HTTP status."""
    try:
        return await call
    except Refused as exc:
        raise ApiError(domain.http_status(exc.code), exc.code, str(exc)) from None
    except ClientError as exc:
        raise ApiError(503, "lockgate.unavailable", str(exc)) from None


# -- the app --------------------------------------------------------------------------------

_ERRORS: dict[int | str, dict[str, Any]] = {
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


def _error(status: int, code: str, detail: str = "",
           headers: Mapping[str, str] | None = None) -> JSONResponse:
    extra = {**(headers or {}), **({"WWW-Authenticate": "Bearer"} if status == 401 else {})}
    return JSONResponse({"error": code, "detail": detail}, status_code=status, headers=extra)


def create_app() -> FastAPI:
    """The console's routes (no I/O: ``app.state.console`` is set by whoever serves it)."""
    app = FastAPI(
        title="Lockgate console", version=VERSION, responses=_ERRORS,
        description=("Intents, timelines, reviews and unknown outcomes from Lockgate's views; "
                     "approve, deny, reconcile and withdraw as yourself. Authenticate with a "
                     "bearer token from `lockgate token`. Fields marked untrusted hold model "
                     "or adapter text."),
        docs_url=None, redoc_url=None, openapi_url="/api/openapi.json",
        dependencies=[Depends(known_query)],
    )
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=ALLOWED_HOSTS)

    @app.middleware("http")
    async def security_headers(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        response = await call_next(request)
        response.headers.update(_SECURITY_HEADERS)
        if request.url.path.startswith("/api/"):
            response.headers["Cache-Control"] = "no-store"
        return response

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return _error(exc.status, exc.code, exc.detail)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()))
        return _error(422, "request.malformed", f"{where}: {first.get('msg', 'invalid')}"[:300])

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # Starlette's own headers stay (a 405's Allow).
        return _error(exc.status_code, f"http.{exc.status_code}", str(exc.detail)[:300], exc.headers)

    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(STATIC / "index.html", media_type="text/html; charset=utf-8")

    @app.get("/favicon.ico", include_in_schema=False)
    async def favicon() -> Response:
        return Response(status_code=204)

    @app.get("/api/me", tags=["people"])
    async def me(who: Anyone) -> Me:
        """Who the token is: their user, role and tenants."""
        return Me(user=who.user, name=who.name, role=who.kind, tenants=list(who.tenants),
                  expires_at=datetime.fromtimestamp(who.expires_at, UTC))

    @app.get("/api/views", tags=["intents"])
    async def views_state(who: Anyone, console: TheConsole) -> ViewsState:
        """How far the views go, and how many events they lag the stream (null: unknown)."""
        lag = await console.lag() if console.lag is not None else None
        return ViewsState(position=console.position, lag=lag)

    @app.get("/api/intents", tags=["intents"])
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
        scope = _tenants(who, tenant)
        state_value = state.value if state is not None else None
        pages = await asyncio.gather(*(
            console.read(console.views.intents, tenant=t, state=state_value, run_id=run,
                         model_status=model_status, before=before, limit=limit)
            for t in (scope or (None,))))
        rows = _merged(pages, lambda r: r.last_sequence, reverse=True, limit=limit)
        return IntentPage(items=[intent_of(r) for r in rows],
                          next_before=rows[-1].last_sequence if len(rows) == limit else None)

    @app.get("/api/intents/{intent_id}", tags=["intents"])
    async def intent(intent_id: IntentId, who: Anyone, console: TheConsole) -> IntentDetail:
        """One intent with its timeline (every event, in order) and its reviews."""
        row = await _visible_intent(console, who, intent_id)
        events, reviews, chain = await asyncio.gather(
            console.read(console.views.events_of, intent_id),
            console.read(console.views.reviews, intent_id=intent_id, status=None),
            console.read(console.views.lineage, intent_id))
        evidence = who.kind == "operator"
        return IntentDetail(intent=intent_of(row), timeline=[event_of(e, evidence=evidence) for e in events],
                            reviews=[review_of(r) for r in reviews],
                            lineage=[intent_of(r) for r in chain if r.tenant == row.tenant])

    @app.get("/api/reviews", tags=["reviews"])
    async def reviews(
        who: Anyone, console: TheConsole, tenant: Tenant = None,
        status: Annotated[ReviewStatus, Query(description="waiting: the queue.")] = "waiting",
        limit: Annotated[int, Query(ge=1, le=200)] = 100,
    ) -> ReviewList:
        """The review queue (or reviews in another status) of your tenants, oldest first."""
        scope = _tenants(who, tenant)
        lists = await asyncio.gather(*(
            console.read(console.views.reviews, tenant=t, status=status, limit=limit)
            for t in (scope or (None,))))
        rows = _merged(lists, lambda r: (r.requested_at, r.review_id), reverse=False, limit=limit)
        return ReviewList(items=[review_of(r) for r in rows])

    @app.get("/api/intents/{intent_id}/review", tags=["reviews"])
    async def review(intent_id: IntentId, who: Anyone, console: TheConsole) -> ReviewDetail:
        """An intent's latest review: the consequence first, then its technical detail."""
        row = await _visible_intent(console, who, intent_id)
        found, events = await asyncio.gather(
            console.read(console.views.reviews, intent_id=intent_id, status=None),
            console.read(console.views.events_of, intent_id))
        if not found:
            raise ApiError(404, "review.unknown", f"intent {intent_id} has no review")
        latest = found[-1]
        data = {e.event_type: _payload(e) for e in events}
        normalized = data.get("CandidateNormalized", {})
        decided = data.get("PolicyDecided", {})
        now = iso(datetime.now(UTC))  # the views' own format: it sorts as text
        return ReviewDetail(
            review=review_of(latest), intent=intent_of(row),
            decidable=(latest.status == "waiting" and row.state == State.AWAITING_APPROVAL
                       and row.review_id == latest.review_id and now < latest.expires_at),
            arguments=_dict(normalized.get("arguments")),
            proposed_arguments=_dict(data.get("CandidateReceived", {}).get("arguments")),
            resource={str(k): str(v) for k, v in _dict(normalized.get("resource")).items()},
            destination=str(normalized.get("destination", row.destination)),
            effect_class=str(normalized.get("effect_class", row.effect_class)),
            policy_reasons=[str(r) for r in decided.get("reasons", []) if isinstance(r, str)],
        )

    async def decide(intent_id: str, body: Decision, who: Person, console: Console,
                     approve: bool) -> Recorded:
        row = await _visible_intent(console, who, intent_id)
        event = await _act(who.gateway.decide_review(
            tenant=row.tenant, candidate_id=intent_id, review_id=body.review_id,
            digest=body.digest, approve=approve, reason=body.reason))
        return Recorded(recorded=event, by=who.name)

    @app.post("/api/intents/{intent_id}/review/approve", tags=["reviews"])
    async def approve(intent_id: IntentId, body: Decision, who: Reviewer,
                      console: TheConsole) -> Recorded:
        """Approve the review shown, bound to its digest: refused if it is of other bytes."""
        return await decide(intent_id, body, who, console, True)

    @app.post("/api/intents/{intent_id}/review/deny", tags=["reviews"])
    async def deny(intent_id: IntentId, body: Decision, who: Reviewer,
                   console: TheConsole) -> Recorded:
        """Deny the review shown: the intent stops before execution."""
        return await decide(intent_id, body, who, console, False)

    @app.post("/api/intents/{intent_id}/review/edit", tags=["reviews"])
    async def edit(intent_id: IntentId, body: Edit, who: Reviewer, console: TheConsole) -> EditedInto:
        """Propose narrower arguments instead: the original will not run, and the new
        candidate crosses every gate again (with its own digest, and its own review)."""
        row = await _visible_intent(console, who, intent_id)
        made = await _act(who.gateway.edit_review(
            tenant=row.tenant, candidate_id=intent_id, review_id=body.review_id,
            digest=body.digest, arguments=body.arguments, reason=body.reason))
        return EditedInto(candidate_id=made.candidate_id, call_id=made.call_id, by=who.name)

    @app.get("/api/outcomes", tags=["outcomes"])
    async def outcomes(who: Operator, console: TheConsole, tenant: Tenant = None,
                       limit: Annotated[int, Query(ge=1, le=200)] = 100) -> Outcomes:
        """Intents whose outcome is unknown, or that wait for an operator, oldest first."""
        scope = _tenants(who, tenant)
        lists = await asyncio.gather(*(
            console.read(console.views.needing_a_person, tenant=t, limit=limit)
            for t in (scope or (None,))))
        rows = _merged(lists, lambda r: r.updated_at, reverse=False, limit=limit)
        return Outcomes(items=[intent_of(r) for r in rows])

    @app.post("/api/intents/{intent_id}/reconcile", tags=["outcomes"])
    async def reconcile(intent_id: IntentId, body: Resolution, who: Operator,
                        console: TheConsole) -> Recorded:
        """Settle an unknown outcome: the effect happened (confirmed) or did not (absent)."""
        row = await _visible_intent(console, who, intent_id)
        finding = Finding.CONFIRMED if body.finding == "confirmed" else Finding.ABSENT
        event = await _act(who.gateway.resolve_outcome(
            tenant=row.tenant, candidate_id=intent_id, finding=finding, why=body.why))
        return Recorded(recorded=event, by=who.name)

    @app.post("/api/intents/{intent_id}/withdraw", tags=["outcomes"])
    async def withdraw(intent_id: IntentId, body: Withdrawal, who: Operator,
                       console: TheConsole) -> Withdrawn:
        """Stop a candidate by its state; the answer is what the model is now told."""
        row = await _visible_intent(console, who, intent_id)
        told = await _act(who.gateway.withdraw(row.tenant, intent_id, why=body.why))
        return Withdrawn(candidate_id=told.candidate_id, status=told.status, code=told.code)

    @app.get("/api/stream", tags=["live"], response_class=StreamingResponse,
             responses={200: {"content": {"text/event-stream": {}},
                              "description": "Server-sent events: hello, changed, expired."}})
    async def stream(who: Anyone, console: TheConsole) -> StreamingResponse:
        """Live updates: a ``changed`` event with your tenants' intents whenever the views move."""
        return StreamingResponse(_events(console, who), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    return app


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _sse(event: str, data: object) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


async def _events(console: Console, who: Person) -> AsyncIterator[bytes]:
    """The live stream of one person: what changed in their tenants since the last event."""
    since = console.position
    yield _sse("hello", {"position": since, "user": who.name})
    while not console.stopping.is_set():
        left = who.expires_at - time.time()
        if left <= 0:
            yield _sse("expired", {"detail": "the token has expired"})
            return
        if not await console.changed_since(since, min(KEEPALIVE_S, left)):
            yield b": keep-alive\n\n"
            continue
        position = console.position
        scope = who.tenants or (None,)
        pages = await asyncio.gather(*(
            console.read(console.views.intents, tenant=t, limit=CHANGES_MAX) for t in scope))
        rows = [r for page in pages for r in page if r.last_sequence > since]
        rows.sort(key=lambda r: r.last_sequence)
        yield _sse("changed", {
            "position": position, "more": len(rows) >= CHANGES_MAX,
            "intents": [intent_of(r).model_dump(mode="json") for r in rows[-CHANGES_MAX:]],
        })
        since = position
