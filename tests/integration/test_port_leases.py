"""One contract for the leases port: the in-memory fake and the broker (LG_LEASES, the runs
bucket, LG_RESPONSES, the executor's withdraw requests) behave alike.

A lease that runs out is let run out: the fake's clock is moved past it; on the broker, the
test waits (with a deadline) for the server's delete marker on the lease subject.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import msgspec
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.errors import NotFoundError

from lockgate.contracts import subjects
from lockgate.contracts.responses import ModelResponse
from lockgate.core.ids import random_id
from lockgate.runtime.context import MemoryPorts, Ports, ports_for
from lockgate.runtime.ports.leases import MARKER_HEADER, RAN_OUT, UNANSWERED
from lockgate.runtime.settings import Settings
from lockgate.testing.intents import History

#: The fake's clock, in seconds (moved by the tests).
NOW = [1000.0]


@pytest.fixture(params=["memory", "nats"])
async def ports(request: pytest.FixtureRequest, nc: Client) -> Ports:
    if request.param == "memory":
        return MemoryPorts.create(clock_s=lambda: NOW[0])
    return await ports_for(nc, Settings(manage_topology=True))


def a_run() -> str:
    return f"run-{random_id()[:12]}"


async def run_out(ports: Ports, run_id: str) -> None:
    """Let the run's one-second lease run out."""
    if isinstance(ports, MemoryPorts):
        NOW[0] += 1.5
        return
    subject = subjects.lease_subject("tenant-a", run_id)
    for _ in range(200):
        with contextlib.suppress(NotFoundError):
            last = await ports.js.get_last_msg("LG_LEASES", subject)
            if MARKER_HEADER in (last.headers or {}):
                return
        await asyncio.sleep(0.05)
    pytest.fail("the server left no marker where the lease ran out")


async def test_a_lease_is_renewed_while_it_runs(ports: Ports) -> None:
    run_id = a_run()
    await ports.leases.start("tenant-a", run_id, 60)
    await ports.leases.start("tenant-a", run_id, 60)  # the open asked again: harmless
    assert await ports.leases.renew("tenant-a", run_id, 60) is None
    assert await ports.leases.renew("tenant-a", run_id, 60) is None


async def test_a_run_whose_lease_never_started_has_no_lease_to_renew(ports: Ports) -> None:
    assert await ports.leases.renew("tenant-a", a_run(), 60) == RAN_OUT


async def test_a_closed_run_is_never_renewed_nor_started_again(ports: Ports) -> None:
    run_id = a_run()
    await ports.leases.start("tenant-a", run_id, 60)
    await ports.leases.close("tenant-a", run_id, "the agent finished")
    assert await ports.leases.renew("tenant-a", run_id, 60) == "closed: the agent finished"
    await ports.leases.start("tenant-a", run_id, 60)
    assert await ports.leases.renew("tenant-a", run_id, 60) == "closed: the agent finished"


async def test_a_close_without_a_reason_reads_closed(ports: Ports) -> None:
    run_id = a_run()
    await ports.leases.close("tenant-a", run_id, "")
    assert await ports.leases.renew("tenant-a", run_id, 60) == "closed"


async def test_a_lease_that_ran_out_is_never_renewed_nor_started_again(ports: Ports) -> None:
    run_id = a_run()
    await ports.leases.start("tenant-a", run_id, 1)
    await run_out(ports, run_id)
    assert await ports.leases.renew("tenant-a", run_id, 60) == RAN_OUT
    await ports.leases.start("tenant-a", run_id, 60)
    assert await ports.leases.renew("tenant-a", run_id, 60) == RAN_OUT


async def test_the_first_recorded_end_stands(ports: Ports) -> None:
    run_id = a_run()
    assert await ports.leases.recorded_end("tenant-a", run_id) is None
    await ports.leases.record_end("tenant-a", run_id, "lease ran out")
    await ports.leases.record_end("tenant-a", run_id, "closed: later")
    assert await ports.leases.recorded_end("tenant-a", run_id) == "lease ran out"
    assert await ports.leases.recorded_end("tenant-a", a_run()) is None


async def respond(ports: Ports, h: History, status: str) -> None:
    """Store ``status`` as the answer to ``h``'s intent as it stands."""
    intent = h.intent
    data = msgspec.json.encode(ModelResponse(candidate_id=intent.intent_id, call_id=intent.call_id,
                                             status=status, code=status))
    await ports.responses.store(intent, data, f"response-{random_id()}")


async def test_statuses_are_the_standing_answer_of_each_candidate_of_the_run(ports: Ports) -> None:
    run_id = a_run()
    waiting = History(run_id=run_id, call_id="call-1").normalized()
    await respond(ports, waiting, "pending_approval")
    await respond(ports, waiting.decided("require_approval"), "pending_approval")
    done = History(run_id=run_id, call_id="call-2").normalized()
    await respond(ports, done, "pending_approval")
    await respond(ports, done.decided("deny"), "denied")
    await respond(ports, History(run_id=a_run(), call_id="call-3"), "paused")  # another run
    assert await ports.leases.statuses("tenant-a", run_id) == {
        waiting.intent_id: "pending_approval", done.intent_id: "denied"}
    assert await ports.leases.statuses("tenant-a", a_run()) == {}


async def test_a_withdrawal_nobody_answers_is_unanswered(ports: Ports) -> None:
    assert await ports.leases.withdraw("tenant-a", a_run(), "c1", "the run ended") == UNANSWERED


@pytest.fixture
async def executor(ports: Ports, nc: Client) -> AsyncIterator[list[tuple[str, bytes]]]:
    """The executor's withdraw answer: ``withdrawn``; what it was asked, kept."""
    if isinstance(ports, MemoryPorts):
        ports.leases.withdraw_answer = "withdrawn"
        yield []
        return
    asked: list[tuple[str, bytes]] = []

    async def answer(msg: Msg) -> None:
        asked.append((msg.subject, msg.data))
        await msg.respond(b'{"status": "withdrawn"}')

    sub = await nc.subscribe(subjects.WITHDRAW_ALL, cb=answer)
    await nc.flush()
    try:
        yield asked
    finally:
        await sub.unsubscribe()


async def test_a_withdrawal_is_asked_as_intake_with_its_reason(
    ports: Ports, executor: list[tuple[str, bytes]],
) -> None:
    run_id = a_run()
    became = await ports.leases.withdraw("tenant-a", run_id, "c1", "the run ended (closed)")
    assert became == "withdrawn"
    if isinstance(ports, MemoryPorts):
        assert ports.leases.withdrawals == [("tenant-a", run_id, "c1", "the run ended (closed)")]
    else:
        assert executor == [(subjects.withdraw("tenant-a", run_id, "c1", "intake"),
                             b'{"why":"the run ended (closed)"}')]
