"""A run ends when its host closes it or nobody uses it for its lease: what it left waiting
is withdrawn (no reviewer approves an effect nobody waits for), and it takes nothing more.

Against the real system; the lease's end is the broker's own (a per-message TTL and the
delete marker nats-server writes when it runs out).
"""

from __future__ import annotations

import asyncio

import pytest

from lockgate.client.sdk import Gateway, PermissionDenied, Refused, Run, connect
from lockgate.contracts.subjects import lease_subject
from lockgate.intent.codec import decode_event
from lockgate.intent.events import CandidateRejected, Withdrawn
from lockgate.testing.system import System
from lockgate.worlds.casenotes.world import World

TENANT = "tenant-a"
NOTE = "case.add_note"


async def withdrawal_of(system: System, candidate_id: str) -> Withdrawn:
    nc = await system.connect()
    try:
        for event in map(decode_event, (await system.store(nc).load(TENANT, candidate_id)).events):
            if isinstance(event, Withdrawn):
                return event
    finally:
        await nc.close()
    raise AssertionError(f"{candidate_id} was not withdrawn")


async def waiting_note(run: Run, text: str) -> str:
    turn = await run.open_turn()
    pending = await turn.propose(tool=NOTE, arguments=f'{{"note": "{text}"}}')
    assert pending.status == "pending_approval"
    return pending.candidate_id


async def test_a_closed_run_withdraws_what_it_left_waiting_and_takes_nothing_more(
    system: System, gw: Gateway, reviewer: Gateway, world: World,
) -> None:
    before = len(world.ledger())
    run = await gw.open_run(tenant=TENANT, actor="user-42", context={"case_id": "case-sensitive"})
    first, second = await waiting_note(run, "one"), await waiting_note(run, "two")
    turn = await run.open_turn()
    review = await system.review_requested(TENANT, first)

    closed = await run.close(why="the user left")
    assert closed.withdrawn == {first: "withdrawn", second: "withdrawn"}
    assert (await run.wait(first, past="")).status == "withdrawn"
    assert "the run ended (closed: the user left)" in (await withdrawal_of(system, first)).why
    with pytest.raises(Refused) as late:
        await reviewer.decide_review(tenant=TENANT, candidate_id=first, review_id=review.review_id,
                                     digest=review.digest, approve=True)
    assert late.value.code == "review.closed"
    # Nothing more: no turn, and a call in a turn opened before is refused on the record.
    with pytest.raises(Refused) as no_turn:
        await run.open_turn()
    assert no_turn.value.code == "run.ended"
    refused = await turn.propose(tool=NOTE, arguments='{"note": "after the end"}')
    assert (refused.status, refused.code) == ("rejected", "proposal.invalid")
    nc = await system.connect()
    try:
        first_event = decode_event((await system.store(nc).load(TENANT, refused.candidate_id)).events[0])
    finally:
        await nc.close()
    assert isinstance(first_event, CandidateRejected) and first_event.reason == "run.ended"
    assert len(world.ledger()) == before
    # Closing again changes nothing.
    assert (await run.close()).withdrawn == {}


async def test_a_run_unused_past_its_lease_ends_on_the_broker(
    system: System, gw: Gateway, world: World,
) -> None:
    before = len(world.ledger())
    run = await gw.open_run(tenant=TENANT, actor="user-42", context={"case_id": "case-sensitive"},
                            lease_s=2)
    waiting = await waiting_note(run, "nobody waits for this")
    # While it is used (a turn a little more often than its lease), it runs.
    for _ in range(8):
        await asyncio.sleep(0.5)
        await run.open_turn()
    assert (await run.response(waiting)).status == "pending_approval"  # type: ignore[union-attr]
    # Then nobody uses it: the broker's marker ends it, and what it left waiting is withdrawn.
    ended = await run.wait(waiting, past="pending_approval", timeout_s=20)
    assert ended.status == "withdrawn"
    assert "lease ran out" in (await withdrawal_of(system, waiting)).why
    with pytest.raises(Refused) as no_turn:
        await run.open_turn()
    assert no_turn.value.code == "run.ended"
    assert len(world.ledger()) == before


async def test_only_the_trusted_host_ends_a_run(system: System, gw: Gateway) -> None:
    run = await gw.open_run(tenant=TENANT, actor="user-42", context={"case_id": "case-123"}, lease_s=60)
    agent = await connect(system.url, credentials=system.credentials(f"agent-{TENANT}"))
    try:
        with pytest.raises(PermissionDenied):
            await agent.run(tenant=TENANT, run_id=run.id).close()
    finally:
        await agent.close()
    # Nor can the agent runtime end a lease by writing on its subject.
    errors: list[Exception] = []

    async def on_error(exc: Exception) -> None:
        errors.append(exc)

    nc = await system.connect(f"agent-{TENANT}", error_cb=on_error)
    try:
        await nc.publish(lease_subject(TENANT, run.id), b"", headers={"Lockgate-Run-Closed": "forged"})
        await nc.flush()
        await asyncio.sleep(0.3)
    finally:
        await nc.close()
    assert any("permissions violation" in str(e).lower() for e in errors), errors
    turn = await run.open_turn()  # still running
    assert (await turn.propose(tool=NOTE, arguments='{"note": "still here"}')).status == "executed"
