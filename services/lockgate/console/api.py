"""The console's HTTP API and page: the app assembled from one router per resource.

Reads come from the views, scoped to the tenants the role table gives the person.
Actions (approve, deny, reconcile, withdraw) go over the person's own NATS connection,
so the broker checks them against that person's permissions and the services record
them under that person's name; the console adds no authority of its own.

``create_app()`` builds the routes without any I/O (the OpenAPI document is generated
from it); ``serve()`` in ``app.py`` hands it a ``Console`` with the views and the people.
The routers are in ``lockgate.console.routes``, what they are built from in ``deps``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import Depends, FastAPI, Request
from fastapi.responses import Response
from fastapi.staticfiles import StaticFiles
from starlette.middleware.trustedhost import TrustedHostMiddleware

from lockgate.console.deps import known_query
from lockgate.console.errors import ERRORS, answer_errors
from lockgate.console.routes import ROUTERS
from lockgate.console.routes.page import STATIC

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


async def security_headers(request: Request,
                           call_next: Callable[[Request], Awaitable[Response]]) -> Response:
    """Every answer with the page's security headers; no API answer is cached."""
    response = await call_next(request)
    response.headers.update(_SECURITY_HEADERS)
    if request.url.path.startswith("/api/"):
        response.headers["Cache-Control"] = "no-store"
    return response


def create_app() -> FastAPI:
    """The console's routes (no I/O: ``app.state.console`` is set by whoever serves it)."""
    app = FastAPI(
        title="Lockgate console", version=VERSION, responses=ERRORS,
        description=("Intents, timelines, reviews and unknown outcomes from Lockgate's views; "
                     "approve, deny, reconcile and withdraw as yourself. Authenticate with a "
                     "bearer token from `lockgate token`. Fields marked untrusted hold model "
                     "or adapter text."),
        docs_url=None, redoc_url=None, openapi_url="/api/openapi.json",
        dependencies=[Depends(known_query)],
    )
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=ALLOWED_HOSTS)
    app.middleware("http")(security_headers)
    answer_errors(app)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    for router in ROUTERS:
        app.include_router(router)
    return app
