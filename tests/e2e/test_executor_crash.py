"""SIGKILL the executor while candidates are in flight: nothing is written twice, nothing is lost."""

from __future__ import annotations

import asyncio

from lockgate.client.sdk import Gateway
from lockgate.contracts.responses import ModelResponse
from lockgate.eventstore.jetstream import JetStreamEventStore
from lockgate.intent.aggregate import State
from lockgate.intent.codec import decode_event, fold
from lockgate.testing.invariants import by_intent, violations
from lockgate.testing.system import System
from lockgate.worlds.casenotes.world import World

CANDIDATES = 24


async def test_executor_killed_mid_flight(system: System, gw: Gateway, world: World) -> None:
    runs = [
        await gw.open_run(tenant="tenant-a", actor="user-42", context={"case_id": f"case-load-{n:02d}"})
        for n in range(CANDIDATES)
    ]
    turns = [await run.open_turn() for run in runs]
    writes_before = len(world.ledger())
    proposals = [
        asyncio.create_task(t.propose(tool="case.add_note", arguments=f'{{"note": "crash test {n}"}}',
                                      call_id=f"crash-{n}", timeout_s=120))
        for n, t in enumerate(turns)
    ]
    # Kill as soon as the first effects land: the rest are somewhere in the pipeline.
    while len(world.ledger()) - writes_before < 2:
        await asyncio.sleep(0.01)
    system.kill("executor")
    await asyncio.sleep(1.0)
    await system.restart("executor")
    responses: list[ModelResponse] = await asyncio.gather(*proposals)

    assert [r.status for r in responses] == ["executed"] * CANDIDATES
    ledger = world.ledger()[writes_before:]
    written = [entry["intent_id"] for entry in ledger]
    assert sorted(written) == sorted(r.candidate_id for r in responses)  # each exactly once

    nc = await system.connect()
    try:
        store = JetStreamEventStore(nc)
        for r in responses:
            history = await store.load("tenant-a", r.candidate_id)
            intent = fold(decode_event(e) for e in history.events)
            assert intent is not None and intent.state is State.COMPLETED
        recorded = [e async for e in store.scan()]
    finally:
        await nc.close()
    assert violations(by_intent(recorded), world.ledger()) == []
