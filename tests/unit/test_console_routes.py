"""The console app as assembled from its routers: every route where it was, behind the same
checks, with the same headers (in-process, no views and no broker behind it)."""

from __future__ import annotations

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from lockgate.console.api import CSP, create_app
from lockgate.console.routes import ROUTERS


def test_each_resource_is_one_router_and_the_app_serves_all_of_them() -> None:
    documented = {(path, method.upper()) for path, ops in create_app().openapi()["paths"].items()
                  for method in ops}
    routed = {(r.path, m) for router in ROUTERS for r in router.routes
              if isinstance(r, APIRoute) and r.include_in_schema for m in r.methods or ()}
    assert documented == routed
    tags = {tuple(r.tags) for router in ROUTERS for r in router.routes
            if isinstance(r, APIRoute) and r.include_in_schema}
    assert tags == {("people",), ("intents",), ("reviews",), ("outcomes",), ("shadow",), ("live",)}


@pytest.mark.parametrize(("path", "declared"), [
    ("/api/me", ""), ("/api/intents", "state=sent&run=r&before=3&model_status=x&limit=3&tenant=t"),
    ("/api/reviews", "status=waiting&tenant=t&limit=5"), ("/api/outcomes", "tenant=t&limit=3"),
    ("/api/intents/i-1/review", ""), ("/api/stream", ""), ("/api/shadow", "tenant=t&limit=3"),
])
def test_every_route_refuses_a_query_parameter_it_does_not_declare(path: str, declared: str) -> None:
    bearer = {"Authorization": "Bearer x"}
    with TestClient(create_app(), base_url="http://127.0.0.1") as http:
        misspelt = http.get(f"{path}?{declared}&stat=waiting", headers=bearer)
        # What the route declares passes on to who asks: nobody serves yet.
        known = http.get(f"{path}?{declared}", headers=bearer)
    assert misspelt.status_code == 422
    assert misspelt.json() == {"error": "request.malformed", "detail": "unknown query parameter 'stat'"}
    assert (known.status_code, known.json()["error"]) == (503, "console.starting")


def test_no_token_is_401_with_the_scheme_and_the_security_headers() -> None:
    with TestClient(create_app(), base_url="http://127.0.0.1") as http:
        answer = http.get("/api/intents")
    assert answer.status_code == 401
    assert answer.json()["error"] == "auth.missing"
    assert answer.headers["WWW-Authenticate"] == "Bearer"
    assert answer.headers["Content-Security-Policy"] == CSP
    assert answer.headers["Cache-Control"] == "no-store"


def test_a_token_before_the_console_serves_is_503() -> None:
    with TestClient(create_app(), base_url="http://127.0.0.1") as http:
        answer = http.post("/api/intents/i-1/withdraw", json={},
                           headers={"Authorization": "Bearer lgc1.x"})
    assert (answer.status_code, answer.json()["error"]) == (503, "console.starting")


def test_another_host_is_refused_and_the_page_is_served() -> None:
    with TestClient(create_app(), base_url="http://evil.example") as http:
        assert http.get("/").status_code == 400
    with TestClient(create_app(), base_url="http://localhost") as http:
        page = http.get("/")
        assert page.status_code == 200 and page.headers["X-Frame-Options"] == "DENY"
        assert http.get("/favicon.ico").status_code == 204
        assert http.get("/static/console.js").status_code == 200
