"""SIGKILL the executor while candidates are in flight: nothing is written twice, nothing is lost."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from nats.js.errors import KeyNotFoundError

from lockgate.client.sdk import Gateway
from lockgate.contracts.responses import ModelResponse
from lockgate.core.ids import intent_id_for
from lockgate.eventstore.jetstream import JetStreamEventStore
from lockgate.intent.aggregate import State
from lockgate.intent.codec import decode_event, fold
from lockgate.intent.locks import lock_key
from lockgate.runtime.topology import LOCK_TTL_S, LOCKS_BUCKET
from lockgate.testing.invariants import by_intent, violations
from lockgate.testing.system import System
from lockgate.worlds.casenotes.world import World

CANDIDATES = 24
SIGKILLED = -9
#: How long the next effect on a resource may wait for a lock left by a crash.
PROMPTLY_S = 60.0


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


async def test_a_lock_stranded_by_a_kill_right_after_the_append_is_released_from_the_record(
    system: System, gw: Gateway, world: World, tmp_path: Path
) -> None:
    """SIGKILLed between appending EffectCompleted and freeing the case's lock, the executor
    leaves the lock behind; the restarted one frees it from the record, so the next note on
    that case runs at once instead of waiting out the lock's TTL."""
    case = "case-load-60"
    crashes = tmp_path / "crashes"
    system.kill("executor")
    system.spawn("executor", "lockgate.testing.crashpoints", env={"LOCKGATE_CRASH_LOG": str(crashes)})
    await system.wait_ready(["executor"])
    run = await gw.open_run(tenant="tenant-a", actor="user-42", context={"case_id": case})
    turn = await run.open_turn()
    first = asyncio.create_task(turn.propose(tool="case.add_note", arguments='{"note": "first"}',
                                             call_id="stranded-1", timeout_s=120))
    executor = system.processes["executor"]
    deadline = time.monotonic() + 60
    while executor.poll() is None and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert executor.returncode == SIGKILLED and len(crashes.read_text().splitlines()) == 1

    # The moment it died: the effect is on record, the lock is still taken.
    intent_id = intent_id_for("tenant-a", run.id, "stranded-1")
    nc = await system.connect()
    try:
        intent = fold(decode_event(e) for e in (await JetStreamEventStore(nc).load("tenant-a", intent_id)).events)
        assert intent is not None and intent.state is State.COMPLETED
        locks = await nc.jetstream().key_value(LOCKS_BUCKET)
        assert (await locks.get(lock_key(intent))).value == intent_id.encode()

        system.spawn("executor", "lockgate.executor")
        await system.wait_ready(["executor"])
        # Well within the lock's TTL: a stranded lock would make this time out.
        assert LOCK_TTL_S > 4 * PROMPTLY_S
        second = await turn.propose(tool="case.add_note", arguments='{"note": "second"}',
                                    call_id="stranded-2", timeout_s=PROMPTLY_S)
        assert second.status == "executed"
        assert (await first).status == "executed"
        deadline = time.monotonic() + PROMPTLY_S
        while time.monotonic() < deadline:  # and the second one's lock goes too
            try:
                await locks.get(lock_key(intent))
            except KeyNotFoundError:
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"lock on {case} still held")
    finally:
        await nc.close()
    notes = [e["intent_id"] for e in world.ledger() if e.get("case_id") == case]
    assert sorted(notes) == sorted([intent_id, second.candidate_id])
