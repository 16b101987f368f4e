"""The projector as a real process on the real broker: the views say what the record says.

Every event of the stream lands in the views once, in order, through a SIGKILL of the
projector in the middle of a burst; a second replica stands by and takes over when the
first dies (what its user may do is in ``tests/integration/test_permissions.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator

import pytest
from nats.aio.client import Client

from lockgate.eventstore.jetstream import JetStreamEventStore
from lockgate.testing.system import System, running
from lockgate.views.store import SOURCE, Views, open_views

NOTE = "case.add_note"


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    with running(System(tmp_path_factory.mktemp("projector"))) as s:
        yield s


@pytest.fixture
def views(system: System) -> Iterator[Views]:
    opened = open_views(var_dir=system.root)
    try:
        yield opened
    finally:
        opened.close()


async def propose(system: System, n: int, label: str) -> list[tuple[str, str]]:
    """``n`` notes on the demo case, concurrently: each one's candidate id and status."""
    gw = await system.gateway()
    try:
        run = await gw.open_run(tenant="tenant-a", actor="user-42", context={"case_id": "case-123"})
        turn = await run.open_turn()
        answers = await asyncio.gather(*(
            turn.propose(tool=NOTE, arguments=json.dumps({"note": f"{label} {i}"}),
                         call_id=f"{label}-{i}", timeout_s=60) for i in range(n)))
    finally:
        await gw.close()
    return [(a.candidate_id, a.status) for a in answers]


async def stream_events(system: System) -> list[tuple[int, str, int]]:
    """Every event in the stream: (sequence, intent, version)."""
    nc = await system.connect()
    try:
        return [(r.sequence, r.intent_id, r.version) async for r in JetStreamEventStore(nc).scan()]
    finally:
        await nc.close()


async def caught_up(system: System, views: Views, timeout_s: float = 30.0) -> list[tuple[int, str, int]]:
    """Wait until the views hold the stream's last position; return the stream's events."""
    deadline = time.monotonic() + timeout_s
    while True:
        events = await stream_events(system)
        last = events[-1][0] if events else 0
        if (views.max_tracking_id(SOURCE) or 0) >= last:
            return events
        if time.monotonic() > deadline:
            raise TimeoutError(f"views at {views.max_tracking_id(SOURCE)}, stream at {last}")
        await asyncio.sleep(0.2)


async def every_answer(nc: Client) -> list[dict[str, object]]:
    """Every projector's status answer (each replica answers the same subject)."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    try:
        await nc.publish("lg.status.projector", b"", reply=inbox)
        answers = []
        with contextlib.suppress(TimeoutError):
            while True:
                answers.append(json.loads((await sub.next_msg(timeout=0.5)).data))
        return answers
    finally:
        await sub.unsubscribe()


def held(views: Views, intents: set[str]) -> list[tuple[int, str, int]]:
    return sorted((e.sequence, e.intent_id, e.version)
                  for i in intents for e in views.events_of(i))


async def test_an_executed_candidate_is_in_the_views_as_the_record_has_it(
    system: System, views: Views,
) -> None:
    ((candidate, status),) = await propose(system, 1, "one")
    assert status == "executed"
    events = await caught_up(system, views)
    row = views.intent(candidate)
    assert row is not None
    assert (row.state, row.model_status, row.tool, row.tenant) == (
        "completed", "executed", NOTE, "tenant-a")
    mine = [e for e in events if e[1] == candidate]
    assert held(views, {candidate}) == mine
    assert [e.event_type for e in views.events_of(candidate)][-1] == "EffectCompleted"


async def test_a_killed_projector_resumes_where_the_views_stopped_and_nothing_doubles(
    system: System, views: Views,
) -> None:
    burst = asyncio.create_task(propose(system, 40, "burst"))
    await asyncio.sleep(0.5)
    system.kill("projector")  # SIGKILL, mid-burst: between any two transactions
    candidates = await burst
    await system.restart("projector")
    events = await caught_up(system, views)
    intents = {e[1] for e in events}
    assert held(views, intents) == sorted(events)  # every event once, at its position
    for c, told in candidates:  # what the model was told is what the views say it was told
        row = views.intent(c)
        assert row is not None and row.model_status == told


async def test_a_second_replica_stands_by_and_takes_over_when_the_first_dies(
    system: System, views: Views,
) -> None:
    system.spawn("projector-2", "lockgate.projector",
                 env={"LOCKGATE_CREDENTIALS_FILE": str(system.root / "credentials" / "projector.json")})
    nc = await system.connect()
    try:
        deadline = time.monotonic() + 30
        while sorted(a["instance"] for a in await every_answer(nc)) != ["projecting", "standby"]:
            assert time.monotonic() < deadline, "the second replica never stood by"
            await asyncio.sleep(0.2)
        system.kill("projector")
        ((candidate, _),) = await propose(system, 1, "after-takeover")
        await caught_up(system, views)
        row = views.intent(candidate)
        assert row is not None and row.model_status == "executed"
        assert [a["instance"] for a in await every_answer(nc)] == ["projecting"]
    finally:
        await nc.close()
        system.processes.pop("projector-2").kill()
        await system.restart("projector")


async def test_a_broker_down_longer_than_a_read_waits_is_waited_out(
    system: System, views: Views,
) -> None:
    """The broker gone for longer than the store's read timeout (5 s): the projector keeps
    its lease and its process, reads on when the broker is back, and skips nothing."""
    assert system.server is not None
    await caught_up(system, views)
    projector = system.processes["projector"]
    system.server.kill()
    await asyncio.sleep(7.0)
    system.server.start()
    await system.wait_ready([name for name, _ in system.children])
    ((candidate, status),) = await propose(system, 1, "after-outage")
    assert status == "executed"
    events = await caught_up(system, views)
    assert projector.poll() is None, "the projector exited while the broker was down"
    assert held(views, {e[1] for e in events}) == sorted(events)
    row = views.intent(candidate)
    assert row is not None and row.model_status == "executed"
