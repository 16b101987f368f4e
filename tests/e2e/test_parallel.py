"""Several tool calls in one turn: each keeps its own identity, and effects on one
resource are serialized so conditional writes do not refuse each other."""

from __future__ import annotations

import asyncio

from lockgate.client.sdk import Gateway
from lockgate.testing.system import System
from lockgate.worlds.casenotes.world import World


async def test_parallel_notes_on_one_case_all_land_once(
    system: System, gw: Gateway, world: World
) -> None:
    run = await gw.open_run(tenant="tenant-a", actor="user-42", context={"case_id": "case-123"})
    turn = await run.open_turn()
    writes = len(world.ledger())
    n = 6
    responses = await asyncio.gather(*(
        turn.propose(tool="case.add_note", arguments=f'{{"note": "parallel {i}"}}', call_id=f"par-{i}")
        for i in range(n)
    ))
    assert [r.status for r in responses] == ["executed"] * n
    assert len({r.candidate_id for r in responses}) == n
    new = world.ledger()[writes:]
    assert sorted(e["intent_id"] for e in new) == sorted(r.candidate_id for r in responses)


async def test_partial_success_then_retry_repeats_nothing(
    system: System, gw: Gateway, world: World
) -> None:
    run = await gw.open_run(tenant="tenant-a", actor="user-42", context={"case_id": "case-123"})
    turn = await run.open_turn()
    calls = {
        "mix-ok-1": '{"note": "first"}',
        "mix-bad": '{"note": "   "}',
        "mix-ok-2": '{"note": "second"}',
        "mix-dup": '{"note":"a","note":"b"}',
    }

    async def propose_all() -> dict[str, tuple[str, str]]:
        responses = await asyncio.gather(*(
            turn.propose(tool="case.add_note", arguments=args, call_id=call) for call, args in calls.items()
        ))
        return {call: (r.status, r.code) for call, r in zip(calls, responses, strict=True)}

    writes, invocations = len(world.ledger()), world.invocations
    first = await propose_all()
    assert first == {
        "mix-ok-1": ("executed", "operation.executed"),
        "mix-bad": ("rejected", "argument.note.empty"),
        "mix-ok-2": ("executed", "operation.executed"),
        "mix-dup": ("rejected", "proposal.invalid"),
    }
    assert len(world.ledger()) - writes == 2
    # The runtime retries the whole turn (a resume after a crash, say).
    assert await propose_all() == first
    assert len(world.ledger()) - writes == 2
    assert world.invocations - invocations == 2
