"""Admission is separate from permission: an allowed actor still runs out of budget."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import msgspec
import pytest

from lockgate.authz.budgets import Counter
from lockgate.client.sdk import Gateway
from lockgate.runtime.topology import BUDGETS_BUCKET
from lockgate.testing.system import System, bundle_copy, running
from lockgate.worlds.casenotes.world import World

BUDGETS = """
budgets:
  - name: notes-per-actor
    scope: actor
    capabilities: [case.add_note]
    window_s: 3600
    max_count: 3
    on_exhausted: deny
"""
# Cedar sees what is left of the budgets: the last note a budget admits needs a reviewer.
LAST_NOTE = """
@id("case-notes.last-note-reviewed")
forbid (principal, action == Lockgate::Action::"case.add_note::unattended", resource)
when { context.budget_remaining <= 1 };
"""


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    root = tmp_path_factory.mktemp("budgets")
    policies = bundle_copy(root, BUDGETS, {"case-notes/last-note.cedar": LAST_NOTE})
    with running(System(root, extra_env={"LOCKGATE_POLICY_DIR": str(policies)})) as s:
        yield s


async def note(gw: Gateway, case: str, text: str) -> tuple[str, str, bool | None]:
    run = await gw.open_run(tenant="tenant-a", actor="user-42", context={"case_id": case})
    turn = await run.open_turn()
    r = await turn.propose(tool="case.add_note", arguments=f'{{"note": "{text}"}}')
    return r.status, r.code, r.persistent


async def test_what_did_not_happen_is_given_back_and_what_did_is_spent(
    system: System, gw: Gateway, world: World
) -> None:
    writes = len(world.ledger())
    # The world refuses this one after the gate: nothing happened, the budget comes back.
    assert (await note(gw, "case-contended", "lost race"))[:2] == ("unavailable", "operation.unavailable")
    assert (await note(gw, "case-123", "one"))[0] == "executed"
    assert (await note(gw, "case-load-01", "two"))[0] == "executed"
    planned = await (await gw.open_run(tenant="tenant-a", actor="user-42",
                                       context={"case_id": "case-123"})).open_turn()
    assert "case.add_note" in {t.name for t in planned.tools}  # one note is left when it opens
    assert (await note(gw, "case-load-02", "three"))[0] == "pending_approval"  # the last one
    # A turn opened before the budget ran out offered the tool: the call is denied, and may
    # try again later; a turn opened after does not offer it at all.
    late = await planned.propose(tool="case.add_note", arguments='{"note": "four"}')
    assert (late.status, late.code, late.persistent) == ("denied", "budget.exhausted", False)
    assert await note(gw, "case-123", "five") == ("rejected", "proposal.invalid", None)
    spent = await (await gw.open_run(tenant="tenant-a", actor="user-42",
                                     context={"case_id": "case-123"})).open_turn()
    assert "case.add_note" not in {t.name for t in spent.tools}
    assert len(world.ledger()) - writes == 2

    nc = await system.connect()  # the counters are the services' bucket
    kv = await nc.jetstream().key_value(BUDGETS_BUCKET)
    deadline = asyncio.get_running_loop().time() + 10
    while True:  # settlement is asynchronous: wait for the holds to be consumed
        counters = [msgspec.json.decode((await kv.get(k)).value or b"{}", type=Counter)
                    for k in await kv.keys()]
        if all(len(c.holds) <= 1 for c in counters) or asyncio.get_running_loop().time() > deadline:
            break
        await asyncio.sleep(0.1)
    await nc.close()
    (counter,) = counters
    # Two spent, one held by the note waiting for its reviewer.
    assert counter.count == 3 and len(counter.holds) == 1

