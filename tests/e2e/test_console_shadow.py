"""The console's shadow decisions, through the real system: an operator sets a shadow bundle
that forbids what the active one allows, candidates go through, and ``/api/shadow`` shows
each flip with the forbid that made it and a link to the intent, while the model is told
nothing of it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import msgspec
import pytest

from lockgate.client.tokens import issue
from lockgate.contracts.responses import ModelResponse
from lockgate.runtime.settings import Settings
from lockgate.testing.system import System, running
from tests.e2e.shadow_traffic import (
    NOTE,
    PUBLISH,
    Shadowed,
    active_bundle,
    decisions,
    propose,
    shadow_bundle,
    start_shadow,
)


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    """The system on a copy of the demo bundle (an operator's bundle commands act on it)."""
    active = active_bundle(tmp_path_factory.mktemp("active"))
    with running(System(tmp_path_factory.mktemp("system"),
                        extra_env={"LOCKGATE_POLICY_DIR": str(active)})) as s:
        yield s


@pytest.fixture(scope="module")
def shadowed(system: System, tmp_path_factory: pytest.TempPathFactory) -> Shadowed:
    return asyncio.run(start_shadow(system, shadow_bundle(tmp_path_factory.mktemp("shadow"))))


@pytest.fixture(scope="module")
def proposed(system: System, shadowed: Shadowed) -> dict[str, ModelResponse]:
    async def go() -> dict[str, ModelResponse]:
        gw = await system.gateway("tenant-a")
        try:
            (published,), (noted,) = await propose(gw, PUBLISH), await propose(gw, NOTE)
            return {"published": published, "noted": noted}
        finally:
            await gw.close()
    return asyncio.run(go())


@pytest.fixture(scope="module")
def url(system: System) -> str:
    return asyncio.run(system.console_url())


def token_for(system: System, user: str) -> dict[str, str]:
    token, _ = issue(system.credentials(user), ttl_s=3600, settings=Settings(var_dir=system.root))
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
async def http(url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        yield client


async def shadow_report(http: httpx.AsyncClient, system: System, want: set[str]) -> dict[str, Any]:
    """``/api/shadow`` as operator ops, once the views hold a flip of every intent in ``want``."""
    headers = token_for(system, "operator-ops")
    deadline = time.monotonic() + 30
    while True:
        answer = await http.get("/api/shadow", headers=headers)
        assert answer.status_code == 200, answer.text
        body: dict[str, Any] = answer.json()
        if want <= {d["intent_id"] for d in body["flipped"]} or time.monotonic() > deadline:
            return body
        await asyncio.sleep(0.2)


async def test_a_flip_to_deny_is_shown_with_the_forbid_that_made_it_and_the_intent(
    http: httpx.AsyncClient, system: System, shadowed: Shadowed, proposed: dict[str, ModelResponse],
) -> None:
    published, noted = proposed["published"].candidate_id, proposed["noted"].candidate_id
    body = await shadow_report(http, system, {published, noted})
    assert body["revision"] == shadowed.revision
    flips = {(f["tool"], f["flip"], f["policy"]): f["count"] for f in body["flips"]}
    assert flips[(PUBLISH, "allow->deny", "shadow.no-publication")] == 1
    assert (NOTE, "allow->require_approval", "") in flips
    row = next(d for d in body["flipped"] if d["intent_id"] == published)
    assert (row["active"]["outcome"], row["shadow"]["outcome"], row["flip"]) == ("allow", "deny", "allow->deny")
    assert row["shadow"]["reasons"] == ["shadow.no-publication"]
    assert row["policy"] == "shadow.no-publication" and "shadow.no-publication" in row["shadow"]["determining"]
    assert (row["tool"], row["tenant"], row["link"]) == (PUBLISH, "tenant-a", f"/intents/{published}")
    # The link opens the intent: its page, and the intent it names, which went ahead.
    assert (await http.get(row["link"])).status_code == 200
    detail = await http.get(f"/api/intents/{published}", headers=token_for(system, "operator-ops"))
    assert detail.json()["intent"]["state"] == "completed"
    # What the record says is what the console says.
    (decided,) = [d for d in await decisions(system, published) if d.shadow is not None]
    assert decided.shadow is not None
    assert (str(decided.outcome), str(decided.shadow.outcome), decided.shadow.revision) == (
        "allow", "deny", shadowed.revision)


async def test_the_model_is_told_nothing_of_the_shadow(
    shadowed: Shadowed, proposed: dict[str, ModelResponse],
) -> None:
    # Both went ahead as the active bundle decided, whatever the shadow said.
    assert [proposed[k].status for k in ("published", "noted")] == ["executed", "executed"]
    said = msgspec.json.encode(list(proposed.values())).decode()
    for hidden in ("shadow", shadowed.revision, "shadow.no-publication", "require_approval"):
        assert hidden not in said


async def test_only_an_operator_reads_shadow_decisions(
    http: httpx.AsyncClient, system: System, proposed: dict[str, ModelResponse],
) -> None:
    answer = await http.get("/api/shadow", headers=token_for(system, "reviewer-alice"))
    assert (answer.status_code, answer.json()["error"]) == (403, "auth.role-forbidden")
    assert (await http.get("/api/shadow")).status_code == 401


async def test_the_shadow_page_is_served_and_linked_from_the_nav(http: httpx.AsyncClient) -> None:
    page = await http.get("/shadow")
    assert page.status_code == 200 and "/static/shadow.js" in page.text
    assert 'href="/shadow"' in (await http.get("/")).text
