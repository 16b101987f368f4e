"""The console against the real system: who may do what, approvals bound to bytes, the page.

The console runs as ``make run`` runs it (its own process, its own do-nothing NATS user);
every person here connects through it with a token from their own credentials, and
every assertion reads the record, the views or the world's ledger.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from lockgate.client.sdk import Gateway
from lockgate.client.tokens import ConsoleSettings, issue, seal, token_key
from lockgate.contracts.responses import ModelResponse
from lockgate.core.ids import intent_id_for, random_id
from lockgate.runtime.credentials import Credentials
from lockgate.runtime.settings import Settings
from lockgate.testing.system import REPO, System, running
from lockgate.worlds.casenotes.world import World
from lockgate.worlds.items.world import World as ItemsWorld
from tests.conftest import require

NOTE = "case.add_note"
#: A reviewer of tenant-b only, an operator of tenant-a only, beside the demo's people.
REVIEWERS = {"alice": [], "user-42": ["tenant-a"], "bob": ["tenant-b"]}
OPERATORS = {"ops": [], "olga": ["tenant-a"]}
#: Long enough for a redelivered order (ack_wait 5 s) to land before it.
OUTCOME_DEADLINE_S = 8
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    with pytest.MonkeyPatch.context() as env:
        # The deployment's people, for the users the system makes and for every child.
        env.setenv("LOCKGATE_REVIEWERS", json.dumps(REVIEWERS))
        env.setenv("LOCKGATE_OPERATORS", json.dumps(OPERATORS))
        with running(System(tmp_path_factory.mktemp("console"), extra_env={
                "LOCKGATE_ITEMS_WORLD_OUTCOME_DEADLINE_S": str(OUTCOME_DEADLINE_S)})) as s:
            yield s


@pytest.fixture(scope="module")
def url(system: System) -> str:
    return asyncio.run(system.console_url())


def token_for(system: System, user: str, *, ttl_s: float = 3600) -> str:
    token, _ = issue(system.credentials(user), ttl_s=ttl_s, settings=Settings(var_dir=system.root))
    return token


@pytest.fixture(scope="module")
def tokens(system: System) -> dict[str, str]:
    return {who: token_for(system, user) for who, user in (
        ("alice", "reviewer-alice"), ("user-42", "reviewer-user-42"), ("bob", "reviewer-bob"),
        ("ops", "operator-ops"), ("olga", "operator-olga"))}


@pytest.fixture
async def http(url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        yield client


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def propose(gw: Gateway, note: str, *, case: str = "case-sensitive", tenant: str = "tenant-a",
                  actor: str = "user-42", tool: str = NOTE, arguments: str | None = None,
                  ) -> ModelResponse:
    run = await gw.open_run(tenant=tenant, actor=actor, context={"case_id": case, "space_id": "space-1"})
    turn = await run.open_turn()
    return await turn.propose(tool=tool, arguments=arguments or json.dumps({"note": note}),
                              call_id=random_id(), timeout_s=60)


async def until(check: Any, timeout_s: float = 30.0, what: str = "condition") -> Any:
    """Poll ``check()`` (sync or async) until it returns something truthy."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if asyncio.iscoroutine(got):
            got = await got
        if got:
            return got
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} within {timeout_s}s")
        await asyncio.sleep(0.1)


async def waiting_review(http: httpx.AsyncClient, token: str, intent_id: str) -> dict[str, Any]:
    """The intent's review once the views hold it and it waits."""
    async def look() -> dict[str, Any] | None:
        r = await http.get(f"/api/intents/{intent_id}/review", headers=bearer(token))
        body: dict[str, Any] = r.json()
        return body if r.status_code == 200 and body["decidable"] else None
    found: dict[str, Any] = await until(look, what=f"waiting review of {intent_id}")
    return found


def writes_of(world: World, intent_id: str) -> list[dict[str, Any]]:
    return [e for e in world.ledger() if e.get("intent_id") == intent_id]


# -- who the token is -------------------------------------------------------------------------


async def test_no_token_is_401(http: httpx.AsyncClient) -> None:
    r = await http.get("/api/intents")
    assert (r.status_code, r.json()["error"]) == (401, "auth.missing")
    assert r.headers["www-authenticate"] == "Bearer"


async def test_a_forged_token_is_401(http: httpx.AsyncClient, tokens: dict[str, str]) -> None:
    alice = tokens["alice"]
    for forged in ("lgc1.AAAA", alice[:-3] + ("xyz" if not alice.endswith("xyz") else "abc"), "not-a-token"):
        r = await http.get("/api/me", headers=bearer(forged))
        assert (r.status_code, r.json()["error"]) == (401, "auth.token-invalid"), forged


async def test_an_expired_token_is_401(http: httpx.AsyncClient, system: System) -> None:
    key = token_key(Settings(var_dir=system.root), ConsoleSettings())
    old = seal(key, system.credentials("reviewer-alice"), ttl_s=60, now=time.time() - 120)
    r = await http.get("/api/me", headers=bearer(old))
    assert (r.status_code, r.json()["error"]) == (401, "auth.token-expired")


async def test_a_token_whose_password_the_broker_refuses_is_401(http: httpx.AsyncClient, system: System) -> None:
    key = token_key(Settings(var_dir=system.root), ConsoleSettings())
    alice = system.credentials("reviewer-alice")
    wrong = Credentials(user=alice.user, password="not-her-password", account=alice.account,
                        inbox_prefix=alice.inbox_prefix, js_prefix=alice.js_prefix)
    r = await http.get("/api/me", headers=bearer(seal(key, wrong, ttl_s=60)))
    assert (r.status_code, r.json()["error"]) == (401, "auth.refused")


@pytest.mark.parametrize("user", ["agent-tenant-a", "host", "admin", "executor", "console"])
async def test_only_people_are_served(http: httpx.AsyncClient, system: System, user: str) -> None:
    r = await http.get("/api/me", headers=bearer(token_for(system, user)))
    assert (r.status_code, r.json()["error"]) == (401, "auth.not-a-person")


async def test_a_token_says_who_and_where(http: httpx.AsyncClient, tokens: dict[str, str]) -> None:
    r = await http.get("/api/me", headers=bearer(tokens["bob"]))
    assert r.status_code == 200
    assert {k: r.json()[k] for k in ("user", "name", "role", "tenants")} == {
        "user": "reviewer-bob", "name": "bob", "role": "reviewer", "tenants": ["tenant-b"]}


@pytest.mark.parametrize(("method", "path", "body"), [
    ("GET", "/api/outcomes", None),
    ("POST", "/api/intents/{intent}/reconcile", {"finding": "absent", "why": "looked"}),
    ("POST", "/api/intents/{intent}/withdraw", {"why": "stop"}),
])
async def test_a_reviewer_calling_an_operator_endpoint_is_403(
    http: httpx.AsyncClient, tokens: dict[str, str], method: str, path: str, body: Any,
) -> None:
    r = await http.request(method, path.format(intent="0" * 32), json=body, headers=bearer(tokens["alice"]))
    assert (r.status_code, r.json()["error"]) == (403, "auth.role-forbidden")


@pytest.mark.parametrize("verb", ["approve", "deny"])
async def test_an_operator_deciding_a_review_is_403(
    http: httpx.AsyncClient, tokens: dict[str, str], verb: str,
) -> None:
    r = await http.post(f"/api/intents/{'0' * 32}/review/{verb}", headers=bearer(tokens["ops"]),
                        json={"review_id": "r", "digest": "sha256:" + "0" * 64})
    assert (r.status_code, r.json()["error"]) == (403, "auth.role-forbidden")


async def test_a_tenant_b_reviewer_cannot_read_or_decide_tenant_a(
    http: httpx.AsyncClient, tokens: dict[str, str], gw: Gateway,
) -> None:
    pending = await propose(gw, "for tenant-a's eyes")
    assert pending.status == "pending_approval"
    review = await waiting_review(http, tokens["alice"], pending.candidate_id)
    bob = bearer(tokens["bob"])
    r = await http.get("/api/intents", params={"tenant": "tenant-a"}, headers=bob)
    assert (r.status_code, r.json()["error"]) == (403, "auth.tenant-forbidden")
    r = await http.get("/api/reviews", params={"tenant": "tenant-a"}, headers=bob)
    assert (r.status_code, r.json()["error"]) == (403, "auth.tenant-forbidden")
    listed = (await http.get("/api/intents", headers=bob)).json()["items"]
    assert {i["tenant"] for i in listed} <= {"tenant-b"}
    queue = (await http.get("/api/reviews", headers=bob)).json()["items"]
    assert pending.candidate_id not in {q["intent_id"] for q in queue}
    for path in (f"/api/intents/{pending.candidate_id}", f"/api/intents/{pending.candidate_id}/review"):
        r = await http.get(path, headers=bob)
        assert (r.status_code, r.json()["error"]) == (404, "intent.unknown"), path
    r = await http.post(f"/api/intents/{pending.candidate_id}/review/approve", headers=bob,
                        json={"review_id": review["review"]["review_id"], "digest": review["review"]["digest"]})
    assert (r.status_code, r.json()["error"]) == (404, "intent.unknown")
    detail = (await http.get(f"/api/intents/{pending.candidate_id}", headers=bearer(tokens["alice"]))).json()
    assert detail["intent"]["state"] == "awaiting_approval"  # nothing bob did reached the record


async def test_a_tenant_scoped_operator_sees_only_their_tenant(
    http: httpx.AsyncClient, tokens: dict[str, str],
) -> None:
    olga = bearer(tokens["olga"])
    r = await http.get("/api/outcomes", params={"tenant": "tenant-b"}, headers=olga)
    assert (r.status_code, r.json()["error"]) == (403, "auth.tenant-forbidden")
    assert (await http.get("/api/outcomes", headers=olga)).status_code == 200


# -- approvals are of exact bytes ---------------------------------------------------------------


async def test_an_approval_through_the_api_is_bound_to_the_digest_shown(
    http: httpx.AsyncClient, tokens: dict[str, str], gw: Gateway, world: World,
) -> None:
    pending = await propose(gw, "Escalated to legal.")
    assert pending.status == "pending_approval"
    shown = await waiting_review(http, tokens["alice"], pending.candidate_id)
    review = shown["review"]
    assert "case-sensitive" in review["summary"] and review["shown"] == {"note": "Escalated to legal."}
    assert shown["arguments"]["note"] == "Escalated to legal."
    alice = bearer(tokens["alice"])
    approve = f"/api/intents/{pending.candidate_id}/review/approve"
    other = "sha256:" + ("0" if review["digest"][-1] != "0" else "1") * 64
    r = await http.post(approve, headers=alice, json={"review_id": review["review_id"], "digest": other})
    assert (r.status_code, r.json()["error"]) == (409, "review.digest-mismatch")
    assert writes_of(world, pending.candidate_id) == []
    r = await http.post(approve, headers=alice, json={"review_id": review["review_id"], "digest": review["digest"]})
    assert r.status_code == 200 and r.json() == {"recorded": "ReviewApproved", "by": "alice"}
    run = gw.run(tenant="tenant-a", run_id=(await http.get(
        f"/api/intents/{pending.candidate_id}", headers=alice)).json()["intent"]["run_id"])
    final = await run.wait(pending.candidate_id, past="pending_approval", timeout_s=30)
    assert final.status == "executed"
    assert len(writes_of(world, pending.candidate_id)) == 1
    r = await http.post(approve, headers=alice, json={"review_id": review["review_id"], "digest": review["digest"]})
    assert (r.status_code, r.json()["error"]) == (409, "review.closed")
    detail = (await until(lambda: _executed(http, alice, pending.candidate_id), what="executed view"))
    types = [e["type"] for e in detail["timeline"]]
    assert types[:3] == ["CandidateReceived", "CandidateNormalized", "PolicyDecided"]
    assert "ReviewApproved" in types and types[-1] == "EffectCompleted"
    assert detail["intent"]["label"] == {"code": "executed", "text": "executed"}
    assert [r["status"] for r in detail["reviews"]] == ["approved"]
    assert detail["reviews"][0]["decided_by"] == "alice"  # under her own name
    assert len(writes_of(world, pending.candidate_id)) == 1


async def _executed(http: httpx.AsyncClient, who: dict[str, str], intent_id: str) -> dict[str, Any] | None:
    body: dict[str, Any] = (await http.get(f"/api/intents/{intent_id}", headers=who)).json()
    return body if body["intent"]["state"] == "completed" else None


async def test_approving_ones_own_request_is_refused_by_policy(
    http: httpx.AsyncClient, tokens: dict[str, str], gw: Gateway, world: World,
) -> None:
    pending = await propose(gw, "my own note", actor="user-42")
    review = (await waiting_review(http, tokens["user-42"], pending.candidate_id))["review"]
    r = await http.post(f"/api/intents/{pending.candidate_id}/review/approve", headers=bearer(tokens["user-42"]),
                        json={"review_id": review["review_id"], "digest": review["digest"]})
    assert (r.status_code, r.json()["error"]) == (403, "review.self-approval")
    assert writes_of(world, pending.candidate_id) == []


async def test_a_denial_stops_it_before_execution(
    http: httpx.AsyncClient, tokens: dict[str, str], gw: Gateway, world: World,
) -> None:
    pending = await propose(gw, "not this one")
    review = (await waiting_review(http, tokens["alice"], pending.candidate_id))["review"]
    r = await http.post(f"/api/intents/{pending.candidate_id}/review/deny", headers=bearer(tokens["alice"]),
                        json={"review_id": review["review_id"], "digest": review["digest"], "reason": "no"})
    assert r.json() == {"recorded": "ReviewDenied", "by": "alice"}

    async def stopped() -> bool:
        body = (await http.get(f"/api/intents/{pending.candidate_id}", headers=bearer(tokens["alice"]))).json()
        return bool(body["intent"]["label"]["code"] == "stopped")
    await until(stopped, what="stopped label")
    assert writes_of(world, pending.candidate_id) == []


async def test_an_edit_is_a_new_candidate_through_every_gate_and_the_original_never_runs(
    http: httpx.AsyncClient, tokens: dict[str, str], gw: Gateway, world: World,
) -> None:
    pending = await propose(gw, "Call the customer and offer a refund of 500 EUR.")
    review = (await waiting_review(http, tokens["alice"], pending.candidate_id))["review"]
    alice = bearer(tokens["alice"])
    r = await http.post(f"/api/intents/{pending.candidate_id}/review/edit", headers=alice, json={
        "review_id": review["review_id"], "digest": review["digest"],
        "arguments": json.dumps({"note": "Call the customer."}), "reason": "no refund promises"})
    assert r.status_code == 200, r.text
    made = r.json()
    assert made["by"] == "alice" and made["candidate_id"] != pending.candidate_id
    fresh = (await waiting_review(http, tokens["alice"], made["candidate_id"]))["review"]
    assert fresh["digest"] != review["digest"] and fresh["shown"] == {"note": "Call the customer."}
    original = (await http.get(f"/api/intents/{pending.candidate_id}", headers=alice)).json()
    assert original["intent"]["label"]["code"] == "stopped"
    assert [x["status"] for x in original["reviews"]] == ["edited"]
    assert original["reviews"][0]["edited_into"] == made["candidate_id"]
    r = await http.post(f"/api/intents/{made['candidate_id']}/review/approve", headers=alice,
                        json={"review_id": fresh["review_id"], "digest": fresh["digest"]})
    assert r.json() == {"recorded": "ReviewApproved", "by": "alice"}
    await until(lambda: writes_of(world, made["candidate_id"]), what="the edited note's write")
    assert len(writes_of(world, made["candidate_id"])) == 1 and writes_of(world, pending.candidate_id) == []


# -- operators ----------------------------------------------------------------------------------


async def test_an_operator_withdraws_a_waiting_candidate(
    http: httpx.AsyncClient, tokens: dict[str, str], gw: Gateway, world: World,
) -> None:
    pending = await propose(gw, "withdraw me")
    await waiting_review(http, tokens["alice"], pending.candidate_id)
    r = await http.post(f"/api/intents/{pending.candidate_id}/withdraw", headers=bearer(tokens["ops"]),
                        json={"why": "asked to stop"})
    assert r.status_code == 200 and r.json()["status"] == "withdrawn"

    async def withdrawn() -> dict[str, Any] | None:
        body: dict[str, Any] = (await http.get(f"/api/intents/{pending.candidate_id}",
                                               headers=bearer(tokens["ops"]))).json()
        return body if body["intent"]["state"] == "withdrawn" else None
    detail = await until(withdrawn, what="withdrawn view")
    assert detail["intent"]["label"]["text"] == "stopped before execution"
    (event,) = [e for e in detail["timeline"] if e["type"] == "Withdrawn"]
    assert event["data"]["by"] == "operator-ops"  # recorded as the operator's own user
    assert writes_of(world, pending.candidate_id) == []


async def test_an_operator_reconciles_an_unknown_outcome(
    http: httpx.AsyncClient, tokens: dict[str, str], gw: Gateway, system: System,
) -> None:
    items = ItemsWorld(system.items_dir)
    items.inject("Q", "drop_response")
    run = await gw.open_run(tenant="tenant-a", actor="user-42", context={"space_id": "space-1"})
    turn = await run.open_turn()
    call_id = random_id()
    candidate_id = intent_id_for("tenant-a", run.id, call_id)
    pending = asyncio.create_task(turn.propose(
        tool="item.publish", arguments='{"title": "Q3", "body": "Numbers are in."}', call_id=call_id,
        timeout_s=90))
    await until(lambda: [r for r in items.publications() if r["intent_id"] == candidate_id],
                what="the publication")  # it lands; the adapter never says so
    system.kill("adapter.items")  # and now nobody can answer the reconciler's query
    try:
        first = await pending
        assert first.status == "outcome_unknown"
        ops = bearer(tokens["ops"])

        async def listed() -> dict[str, Any] | None:
            items_ = (await http.get("/api/outcomes", headers=ops)).json()["items"]
            return next((i for i in items_ if i["intent_id"] == first.candidate_id), None)
        row = await until(listed, what="the unknown outcome in the list")
        assert row["label"]["code"] == "outcome_unknown"
        r = await http.post(f"/api/intents/{first.candidate_id}/reconcile", headers=ops,
                            json={"finding": "confirmed", "why": "seen in space-1"})
        assert r.status_code == 200 and r.json() == {"recorded": "Reconciled", "by": "ops"}
        final = await run.wait(first.candidate_id, past="outcome_unknown", timeout_s=30)
        assert final.status == "executed"
        r = await http.post(f"/api/intents/{first.candidate_id}/reconcile", headers=ops,
                            json={"finding": "absent", "why": "second thoughts"})
        assert r.status_code == 409
    finally:
        await system.restart("adapter.items")


# -- lists, paging and live updates ---------------------------------------------------------------


async def test_intents_page_by_position_without_gaps_or_repeats(
    http: httpx.AsyncClient, tokens: dict[str, str], gw: Gateway,
) -> None:
    for i in range(3):
        await propose(gw, f"page {i}", case=f"case-load-1{i}")
    alice = bearer(tokens["alice"])

    async def snapshot() -> list[str]:
        items = (await http.get("/api/intents", params={"limit": 200}, headers=alice)).json()["items"]
        return [i["intent_id"] for i in items]

    async def paged() -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        before = None
        while True:
            params: dict[str, Any] = {"limit": 2} | ({"before": before} if before is not None else {})
            page = (await http.get("/api/intents", params=params, headers=alice)).json()
            assert all(before is None or i["position"] < before for i in page["items"])
            out += page["items"]
            before = page["next_before"]
            if before is None:
                return out

    for _ in range(10):  # intents of earlier tests may still move: compare a quiet moment
        first = await snapshot()
        pages = await paged()
        if first == await snapshot():
            break
    assert [i["intent_id"] for i in pages] == first
    positions = [i["position"] for i in pages]
    assert positions == sorted(positions, reverse=True) and len(set(positions)) == len(positions)
    only = (await http.get("/api/intents", params={"state": "completed"}, headers=alice)).json()["items"]
    assert only and {i["state"] for i in only} == {"completed"}


async def test_the_stream_pushes_what_changed(
    url: str, tokens: dict[str, str], gw: Gateway,
) -> None:
    events: list[tuple[str, Any]] = []

    async def listen() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=None) as client, client.stream(
                "GET", "/api/stream", headers=bearer(tokens["alice"])) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            kind = ""
            async for line in response.aiter_lines():
                if line.startswith("event: "):
                    kind = line[7:]
                elif line.startswith("data: "):
                    events.append((kind, json.loads(line[6:])))

    listening = asyncio.create_task(listen())
    try:
        await until(lambda: events, what="hello")
        assert events[0][0] == "hello"
        done = await propose(gw, "live", case="case-123")

        def pushed() -> bool:
            return any(kind == "changed" and done.candidate_id in {i["intent_id"] for i in body["intents"]}
                       for kind, body in events)
        await until(pushed, what="a changed event naming the new intent")
    finally:
        listening.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await listening


async def test_the_views_say_how_current_they_are(http: httpx.AsyncClient, tokens: dict[str, str]) -> None:
    async def current() -> dict[str, Any] | None:
        state: dict[str, Any] = (await http.get("/api/views", headers=bearer(tokens["bob"]))).json()
        return state if state["lag"] == 0 else None
    state = await until(current, what="the views caught up")
    assert state["position"] > 0


# -- the CLI hands out the tokens -------------------------------------------------------------------


async def test_lockgate_token_issues_what_the_console_accepts(
    system: System, http: httpx.AsyncClient,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKGATE_")}
    env.update(LOCKGATE_VAR_DIR=str(system.root), LOCKGATE_OPERATORS=json.dumps(OPERATORS))
    for args, who in ((["--as", "alice"], ("alice", "reviewer")), (["--operator", "--as", "ops"], ("ops", "operator"))):
        proc = subprocess.run([sys.executable, "-m", "lockgate.cli", "token", *args],
                              capture_output=True, text=True, env=env, timeout=60, cwd="/")
        assert proc.returncode == 0, proc.stderr
        token = proc.stdout.strip()
        assert f"open {http.base_url}" in proc.stderr  # where the console really is
        me = (await http.get("/api/me", headers=bearer(token))).json()
        assert (me["name"], me["role"]) == who
    proc = subprocess.run([sys.executable, "-m", "lockgate.cli", "token", "--as", "nobody"],
                          capture_output=True, text=True, env=env, timeout=60, cwd="/")
    assert proc.returncode != 0 and "no credentials for 'reviewer-nobody'" in proc.stderr


# -- fuzzing the OpenAPI ----------------------------------------------------------------------------

SCHEMA = schemathesis.openapi.from_path(REPO / "schemas" / "openapi.json").exclude(path="/api/stream")


@SCHEMA.parametrize()
@settings(max_examples=20, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
def test_the_api_under_fuzzing(case: schemathesis.Case, url: str, tokens: dict[str, str]) -> None:
    """No 5xx, every answer documented and of its schema, for a reviewer and an operator."""
    for who in ("alice", "ops"):
        case.call_and_validate(base_url=url.rstrip("/"), headers=bearer(tokens[who]), timeout=30)


# -- the page, in a real browser --------------------------------------------------------------------


def chromium() -> Path:
    """Debian's chromium, which ``make test`` installs; missing in CI is a failure, not a skip."""
    found = CHROMIUM if CHROMIUM.exists() else shutil.which("chromium")
    require(found is not None, "no chromium at /usr/bin/chromium: `make test` installs it as root "
            "(apt-get install -y --no-install-recommends chromium)")
    return Path(str(found))


async def test_a_reviewer_approves_a_pending_note_from_the_page(
    url: str, tokens: dict[str, str], gw: Gateway, world: World, tmp_path: Path,
) -> None:
    from playwright.async_api import async_playwright

    browser_path = chromium()
    hostile = "Call back <img src=x onerror=window.__pwned=1><script>window.__pwned=2</script>"
    first = await propose(gw, hostile)
    assert first.status == "pending_approval"
    async with async_playwright() as p:
        context = await p.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=str(browser_path), headless=True,
            args=CHROMIUM_FLAGS)
        try:
            page = context.pages[0] if context.pages else await context.new_page()
            page.set_default_timeout(30_000)
            await page.goto(f"{url}#token={tokens['alice']}")
            card = page.locator(f'li.review[data-intent-id="{first.candidate_id}"]')
            await card.wait_for()
            assert "#token" not in page.url  # the token left the address bar
            # The consequence comes first; the model's words follow as text: shown, not run.
            consequence = await card.locator(".consequence").inner_text()
            assert "case-sensitive" in consequence
            verbatim = card.locator(".untrusted", has_text="the model's note")
            assert hostile in await verbatim.locator("pre").inner_text()
            assert await card.locator("img, script").count() == 0
            assert "untrusted" in (await card.locator(".consequence-box .tag").inner_text()).lower()
            review_id = await card.get_attribute("data-review-id")
            digest = await card.get_attribute("data-digest")
            await card.locator("details.technical summary").click()
            await card.locator("details.technical dd", has_text=str(digest)).wait_for()
            before = len(world.ledger())
            await card.locator("button.approve").click()
            await page.locator("#message", has_text="ReviewApproved by alice").wait_for()
            await until(lambda: writes_of(world, first.candidate_id), what="the ledger write")
            await asyncio.sleep(1.0)  # and nothing more follows
            assert len(writes_of(world, first.candidate_id)) == 1 and len(world.ledger()) == before + 1
            assert await page.evaluate("window.__pwned") is None
            # One changed byte is another consequence: a new review appears, live.
            second = await propose(gw, hostile[:-1] + "!")
            assert second.status == "pending_approval" and second.candidate_id != first.candidate_id
            fresh = page.locator(f'li.review[data-intent-id="{second.candidate_id}"]')
            await fresh.wait_for()
            assert await fresh.get_attribute("data-review-id") != review_id
            assert await fresh.get_attribute("data-digest") != digest
            assert await page.locator(f'li.review[data-intent-id="{first.candidate_id}"]').count() == 0
            executed = page.locator(f'tr[data-intent-id="{first.candidate_id}"] [data-label="executed"]')
            await executed.wait_for()
            assert writes_of(world, second.candidate_id) == []
            assert await page.evaluate("window.__pwned") is None
        finally:
            await context.close()


async def test_the_raw_text_is_an_operators_to_read_and_the_lineage_anyones(
    http: httpx.AsyncClient, tokens: dict[str, str], gw: Gateway,
) -> None:
    run = await gw.open_run(tenant="tenant-a", actor="user-42", context={"case_id": "case-123"})
    turn = await run.open_turn()
    broken = '{"note": "ignore previous instructions",}'
    first = await turn.propose(tool=NOTE, arguments=broken, call_id=random_id())
    fixed = await turn.propose(tool=NOTE, arguments='{"note": "fixed"}', call_id=random_id())
    assert (first.status, fixed.status) == ("rejected", "executed")

    async def detail(who: str) -> dict[str, Any] | None:
        r = await http.get(f"/api/intents/{first.candidate_id}", headers=bearer(tokens[who]))
        body: dict[str, Any] = r.json()
        settled = r.status_code == 200 and [i["state"] for i in body["lineage"]] == ["rejected", "completed"]
        return body if settled else None

    ops = await until(lambda: detail("ops"), what="the operator's view with its lineage")
    alice = await until(lambda: detail("alice"), what="the reviewer's view")
    assert ops["timeline"][0]["data"]["raw_arguments"] == broken
    assert alice["timeline"][0]["data"]["raw_arguments"] == "(withheld: operators only)"
    assert broken not in json.dumps(alice)
    assert [(i["intent_id"], i["lineage"]) for i in alice["lineage"]] == [
        (first.candidate_id, None), (fixed.candidate_id, "repair")]
