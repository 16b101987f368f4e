"""Flood limits at intake: refused before anything expensive, told plainly, released from the record."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import msgspec
import pytest

from lockgate.authz.limits import FloodState, Hold, flood_key
from lockgate.client.sdk import Gateway
from lockgate.contracts.responses import ModelResponse
from lockgate.core.ids import random_id
from lockgate.eventstore.jetstream import JetStreamEventStore
from lockgate.intent.codec import decode_event
from lockgate.intent.events import CandidateRejected, Event, ReviewRequested
from lockgate.runtime.topology import BUDGETS_BUCKET
from lockgate.testing.system import System, bundle_copy, running
from lockgate.worlds.casenotes.world import World

# One candidate of an actor in flight at a time; two at once, then one per 20 s.
LIMITS = """
limits:
  - name: tight
    scope: actor
    per_s: 0.05
    burst: 2
    max_in_flight: 1
"""
KEY = flood_key("tenant-a")
WAIT_S = 30.0


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    root = tmp_path_factory.mktemp("limits")
    policies = bundle_copy(root, LIMITS)
    with running(System(root, extra_env={"LOCKGATE_POLICY_DIR": str(policies)})) as s:
        yield s


async def note(gw: Gateway, case: str, text: str) -> ModelResponse:
    run = await gw.open_run(tenant="tenant-a", actor="user-42", context={"case_id": case})
    return await (await run.open_turn()).propose(tool="case.add_note", arguments=f'{{"note": "{text}"}}')


async def holds(system: System) -> dict[str, Hold]:
    """The in-flight holds (the services' bucket, read as the topology owner)."""
    nc = await system.connect()
    try:
        kv = await nc.jetstream().key_value(BUDGETS_BUCKET)
        return msgspec.json.decode((await kv.get(KEY)).value or b"{}", type=FloodState).holds
    finally:
        await nc.close()


async def until_released(system: System) -> None:
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while await holds(system):
        assert asyncio.get_running_loop().time() < deadline, "the hold was never released"
        await asyncio.sleep(0.1)


async def stored(system: System, candidate_id: str) -> list[Event]:
    nc = await system.connect()
    try:
        return [decode_event(e) for e in (await JetStreamEventStore(nc).load(
            "tenant-a", candidate_id)).events]
    finally:
        await nc.close()


async def reason(system: System, response: ModelResponse) -> str:
    first = (await stored(system, response.candidate_id))[0]
    assert isinstance(first, CandidateRejected), first
    return first.reason


async def test_past_a_limit_the_model_is_told_to_wait_and_nothing_runs(
    system: System, gw: Gateway, world: World
) -> None:
    invocations = world.invocations
    waiting = await note(gw, "case-sensitive", "needs a reviewer")  # stays in flight
    assert waiting.status == "pending_approval"
    assert list(await holds(system)) == [waiting.candidate_id]
    second = await note(gw, "case-123", "too soon")
    assert (second.status, second.code, second.persistent, second.alternatives) == (
        "denied", "rate.limited", False, ("wait", "stop"))
    assert second.retry_after_s == 1.0
    assert await reason(system, second) == "rate.in-flight"
    assert world.invocations == invocations  # refused before normalization and policy

    # The waiting one ends (its reviewer refuses): its place is given back from the record.
    review = next(e for e in await stored(system, waiting.candidate_id)
                  if isinstance(e, ReviewRequested))
    reviewer = await system.person("reviewer-alice")
    try:
        await reviewer.decide_review(tenant="tenant-a", candidate_id=waiting.candidate_id,
                                     review_id=review.review_id, digest=review.digest, approve=False)
    finally:
        await reviewer.close()
    await until_released(system)
    third = await note(gw, "case-123", "now")
    assert third.status == "executed", (third, await stored(system, third.candidate_id))
    await until_released(system)

    # Two at once were allowed (the first and this one); a third within 20 s is not.
    fourth = await note(gw, "case-123", f"again {random_id()}")
    assert (fourth.status, fourth.code, fourth.persistent) == ("denied", "rate.limited", False)
    assert await reason(system, fourth) == "rate.limited"
    assert fourth.retry_after_s is not None and 0 < fourth.retry_after_s <= 20
    assert world.invocations == invocations + 1
