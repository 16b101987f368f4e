"""The agent runtime's SDK reads its answer from the stream, even from a replica behind.

On a replicated stream the replica that answers a direct get may not hold a response a
moment after it was stored: the SDK, woken by the response's publish, reads nothing yet.
It asks again soon after a wake-up (``WAKE_RETRY_S``), not a second later, so a
lagging replica costs the model milliseconds, not a second per candidate.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
from nats.aio.client import Client
from nats.js.errors import NotFoundError

from lockgate.client.sdk import Gateway, ResponseTimeout, wakeups
from lockgate.contracts.messages import Candidate
from lockgate.contracts.responses import ModelResponse
from lockgate.contracts.subjects import response_subject
from lockgate.core.ids import call_digest, intent_id_for, random_id
from lockgate.runtime.topology import CANDIDATES, ensure_topology

TENANT = "tenant-a"


@pytest.fixture
async def gateway(nc: Client) -> AsyncIterator[Gateway]:
    js = nc.jetstream()
    await ensure_topology(js)
    yield Gateway(nc)
    with contextlib.suppress(NotFoundError):
        await js.purge_stream(CANDIDATES)


async def answer_when_proposed(nc: Client, candidate: Candidate) -> None:
    """Intake's part: once the candidate is stored, store its response."""
    js = nc.jetstream()
    intent_id = intent_id_for(TENANT, candidate.run_id, candidate.call_id)
    digest = call_digest(call_id=candidate.call_id, tool=candidate.tool,
                         arguments=candidate.arguments, assembly_failure=candidate.assembly_failure)
    response = ModelResponse(candidate_id=intent_id, call_id=candidate.call_id, status="executed",
                             code="operation.executed", candidate_digest=digest)
    await asyncio.sleep(0.05)
    await js.publish(response_subject(TENANT, candidate.run_id, intent_id), msgspec.json.encode(response),
                     headers={"Nats-Msg-Id": random_id()})


@pytest.mark.parametrize("behind", [0, 1, 3])
async def test_a_response_a_replica_shows_late_is_read_without_waiting_a_second(
    gateway: Gateway, nc: Client, monkeypatch: pytest.MonkeyPatch, behind: int,
) -> None:
    """The first ``behind`` reads after the wake-up find nothing, as a replica behind the
    stream's leader answers. The SDK reads again after pauses that start at
    ``WAKE_RETRY_S[0]`` and double, never after the second it otherwise waits."""
    latest = Gateway._latest
    reads: list[bool] = []
    pauses: list[float] = []
    wait_for = asyncio.wait_for

    async def timed(awaitable: Any, timeout: float | None) -> Any:
        if getattr(awaitable, "__qualname__", "") == "Event.wait":  # the SDK waiting for a wake-up
            pauses.append(timeout or 0.0)
        return await wait_for(awaitable, timeout)

    async def behind_the_leader(self: Gateway, tenant: str, run_id: str, candidate_id: str
                                ) -> ModelResponse | None:
        found = await latest(self, tenant, run_id, candidate_id)
        reads.append(found is not None)
        return None if sum(reads) <= behind else found

    monkeypatch.setattr(Gateway, "_latest", behind_the_leader)
    monkeypatch.setattr(asyncio, "wait_for", timed)
    candidate = Candidate(run_id=random_id(), turn_id="turn-1", call_id=random_id(),
                          tool="case.add_note", arguments='{"note": "hi"}')
    answering = asyncio.create_task(answer_when_proposed(nc, candidate))
    response = await gateway._propose(TENANT, candidate, timeout_s=30)
    await answering
    assert response.status == "executed"
    assert reads.count(True) == behind + 1
    # Every pause after the wake-up is short, and they double from the first.
    first, _ = wakeups.WAKE_RETRY_S
    short = [p for p in pauses if p < 1.0]
    assert len(short) >= behind and short == [first * 2**k for k in range(len(short))], pauses


async def test_no_response_is_still_a_timeout(gateway: Gateway, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wakeups, "WAKE_RETRY_S", (0.002, 0.01))
    candidate = Candidate(run_id=random_id(), turn_id="turn-1", call_id=random_id(),
                          tool="case.add_note", arguments="{}")
    with pytest.raises(ResponseTimeout):
        await gateway._propose(TENANT, candidate, timeout_s=0.3)


class CountingSubscriptions:
    """The connection's subscribe, counted."""

    def __init__(self, nc: Client, monkeypatch: pytest.MonkeyPatch) -> None:
        self.made: list[str] = []
        subscribe = nc.subscribe

        async def counted(subject: str, *args: object, **kwargs: object) -> object:
            self.made.append(subject)
            return await subscribe(subject, *args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(nc, "subscribe", counted)


async def propose_answered(gateway: Gateway, nc: Client, run_id: str) -> ModelResponse:
    candidate = Candidate(run_id=run_id, turn_id="turn-1", call_id=random_id(),
                          tool="case.add_note", arguments='{"note": "hi"}')
    answering = asyncio.create_task(answer_when_proposed(nc, candidate))
    response = await gateway._propose(TENANT, candidate, timeout_s=5)
    await answering
    return response


async def test_the_proposals_of_a_run_share_one_subscription(
    gateway: Gateway, nc: Client, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Not two subscriptions made and dropped per proposal: one per run, kept."""
    subs = CountingSubscriptions(nc, monkeypatch)
    runs = [random_id(), random_id()]
    responses = await asyncio.gather(*(propose_answered(gateway, nc, runs[n % 2]) for n in range(8)))
    assert {r.status for r in responses} == {"executed"}
    assert sorted(subs.made) == sorted(f"lg.response.{TENANT}.{run}.*" for run in runs)
    assert gateway._wakeups._waiting == {}  # nobody left waiting, nothing left behind
    assert (await propose_answered(gateway, nc, runs[0])).status == "executed"
    assert len(subs.made) == 2


async def test_the_least_recently_used_idle_runs_are_given_up(
    gateway: Gateway, nc: Client, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(wakeups, "RUNS_WATCHED", 2)
    runs = [random_id() for _ in range(3)]
    for run in runs:
        assert (await propose_answered(gateway, nc, run)).status == "executed"
    watched = list(gateway._wakeups._runs)
    assert watched == [f"lg.response.{TENANT}.{run}.*" for run in runs[1:]]
    # The run given up is watched again when it proposes again.
    assert (await propose_answered(gateway, nc, runs[0])).status == "executed"
