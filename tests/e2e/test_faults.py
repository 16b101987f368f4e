"""Bad input and a broker restart: the system says what happened and the store stays whole."""

from __future__ import annotations

import asyncio

import msgspec

from lockgate.client.sdk import Gateway
from lockgate.eventstore.jetstream import JetStreamEventStore
from lockgate.intent.aggregate import State
from lockgate.intent.codec import fold
from lockgate.intent.events import CandidateRejected, Event
from lockgate.testing.invariants import by_intent, violations
from lockgate.testing.system import System
from lockgate.worlds.casenotes.world import World


async def stored_intents(system: System) -> dict[str, list[Event]]:
    nc = await system.connect()
    try:
        return by_intent([e async for e in JetStreamEventStore(nc).scan()])
    finally:
        await nc.close()


async def test_unreadable_candidate_is_rejected_on_the_record(system: System, gw: Gateway) -> None:
    run = await gw.open_run(tenant="tenant-a", actor="user-42", context={"case_id": "case-123"})
    before = set(await stored_intents(system))
    js = gw.nc.jetstream()
    await js.publish(f"lg.propose.tenant-a.{run.id}", b"\xff not a candidate",
                     headers={"Nats-Msg-Id": "forged-1"})
    deadline = asyncio.get_running_loop().time() + 20
    while True:
        new = {k: v for k, v in (await stored_intents(system)).items() if k not in before}
        if new or asyncio.get_running_loop().time() > deadline:
            break
        await asyncio.sleep(0.1)
    (events,) = new.values()
    (rejected,) = events
    assert isinstance(rejected, CandidateRejected)
    assert rejected.reason == "candidate.malformed" and rejected.run_id == run.id


async def test_broker_restart_mid_flight_loses_and_repeats_nothing(
    system: System, gw: Gateway, world: World
) -> None:
    assert system.server is not None
    n = 12
    runs = [await gw.open_run(tenant="tenant-a", actor="user-42",
                              context={"case_id": f"case-load-{40 + i:02d}"}) for i in range(n)]
    turns = [await r.open_turn() for r in runs]
    writes = len(world.ledger())
    pending = [asyncio.create_task(t.propose(tool="case.add_note", arguments=f'{{"note": "restart {i}"}}',
                                             call_id=f"restart-{i}", timeout_s=120))
               for i, t in enumerate(turns)]
    await asyncio.sleep(0.05)
    system.server.kill()          # as a crash would: no graceful shutdown
    await asyncio.sleep(1.0)
    system.server.start()         # same port, same store
    responses = await asyncio.gather(*pending)

    assert [r.status for r in responses] == ["executed"] * n
    new_writes = [e["intent_id"] for e in world.ledger()[writes:]]
    assert sorted(new_writes) == sorted(r.candidate_id for r in responses)
    histories = await stored_intents(system)
    for r in responses:
        intent = fold(histories[r.candidate_id])
        assert intent is not None and intent.state is State.COMPLETED
    assert violations(histories, world.ledger()) == []
    await system.wait_ready([name for name, _ in system.children])


async def test_status_reports_each_durables_progress_and_a_stopped_service(system: System) -> None:
    import signal

    from lockgate.operations.status import ProcessStatus, check_status, problem

    nc = await system.connect()
    try:
        answers = await check_status(nc, ["policy", "executor"], timeout_s=2.0)
        policy = msgspec.convert(answers["policy"], type=ProcessStatus)
        assert set(policy.consumers) == {"policy", "policy-pauses", "policy-budgets"}
        assert all(c.pending >= 0 and c.busy_s < 5 for c in policy.consumers.values())
        assert problem(answers["executor"]) is None
        proc = system.processes["policy"]
        proc.send_signal(signal.SIGSTOP)  # alive, connected, doing nothing
        try:
            stopped = await check_status(nc, ["policy"], timeout_s=1.0)
            assert problem(stopped["policy"]) == "no answer"
        finally:
            proc.send_signal(signal.SIGCONT)
        deadline = asyncio.get_running_loop().time() + 10
        while problem((await check_status(nc, ["policy"], timeout_s=1.0))["policy"]) is not None:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.2)
    finally:
        await nc.close()
