"""A note on a sensitive case waits for a reviewer; the approval binds the exact digest."""

from __future__ import annotations

import pytest

from lockgate.client.sdk import Gateway, Refused
from lockgate.testing.system import System
from lockgate.worlds.casenotes.world import World


async def test_sensitive_note_waits_then_executes_once_approved(
    system: System, gw: Gateway, reviewer: Gateway, world: World
) -> None:
    run = await gw.open_run(tenant="tenant-a", actor="user-42", context={"case_id": "case-sensitive"})
    turn = await run.open_turn()
    before = (world.invocations, len(world.ledger()))
    pending = await turn.propose(tool="case.add_note", arguments='{"note": "Escalated to legal."}')
    assert (pending.status, pending.code) == ("pending_approval", "approval.pending")
    assert (world.invocations, len(world.ledger())) == before  # nothing reached the world

    review = await system.review_requested("tenant-a", pending.candidate_id)
    # The review object: what will happen and to what, the model's text apart, as data.
    assert review.summary.startswith("Add a note to case case-sensitive")
    assert review.shown == {"note": "Escalated to legal."}
    assert review.visible_to == "everyone with access to case case-sensitive"
    assert "once sent it cannot be stopped" in review.recovery
    with pytest.raises(Refused) as wrong:
        await reviewer.decide_review(tenant="tenant-a", candidate_id=pending.candidate_id,
                               review_id=review.review_id, digest="sha256:" + "0" * 64, approve=True)
    assert wrong.value.code == "review.digest-mismatch"

    recorded = await reviewer.decide_review(tenant="tenant-a", candidate_id=pending.candidate_id,
                                      review_id=review.review_id, digest=review.digest, approve=True)
    assert recorded == "ReviewApproved"
    done = await run.wait(pending.candidate_id)
    assert (done.status, done.code) == ("executed", "operation.executed")
    assert (world.invocations, len(world.ledger())) == (before[0] + 1, before[1] + 1)

    with pytest.raises(Refused) as again:
        await reviewer.decide_review(tenant="tenant-a", candidate_id=pending.candidate_id,
                               review_id=review.review_id, digest=review.digest, approve=True)
    assert again.value.code == "review.closed"


async def test_denied_review_never_reaches_the_world(
    system: System, gw: Gateway, reviewer: Gateway, world: World
) -> None:
    run = await gw.open_run(tenant="tenant-a", actor="user-42", context={"case_id": "case-sensitive"})
    turn = await run.open_turn()
    before = (world.invocations, len(world.ledger()))
    pending = await turn.propose(tool="case.add_note", arguments='{"note": "Close it all."}')
    review = await system.review_requested("tenant-a", pending.candidate_id)
    await reviewer.decide_review(tenant="tenant-a", candidate_id=pending.candidate_id,
                           review_id=review.review_id, digest=review.digest, approve=False, reason="not this one")
    done = await run.wait(pending.candidate_id)
    assert (done.status, done.code) == ("unavailable", "operation.unavailable")
    assert (world.invocations, len(world.ledger())) == before


async def test_a_call_resumed_in_a_later_turn_is_the_same_intent_and_runs_once(
    system: System, gw: Gateway, reviewer: Gateway, world: World
) -> None:
    """A framework that paused on a review re-issues the call after the approval, in a
    later turn and with its provider item rebuilt: the same call, its current answer."""
    run = await gw.open_run(tenant="tenant-a", actor="user-42", context={"case_id": "case-sensitive"})
    first_turn = await run.open_turn()
    before = len(world.ledger())
    note = '{"note": "Refund approved by the customer."}'
    pending = await first_turn.propose(tool="case.add_note", arguments=note, call_id="tool-call-7",
                                       provider_item={"id": "tool-call-7", "attempt": 1})
    assert pending.status == "pending_approval"
    review = await system.review_requested("tenant-a", pending.candidate_id)
    await reviewer.decide_review(tenant="tenant-a", candidate_id=pending.candidate_id,
                                 review_id=review.review_id, digest=review.digest, approve=True)
    later_turn = await run.open_turn()
    resumed = await later_turn.propose(tool="case.add_note", arguments=note, call_id="tool-call-7",
                                       provider_item={"id": "tool-call-7", "attempt": 2})
    assert resumed.candidate_id == pending.candidate_id
    if resumed.status != "executed":
        resumed = await run.wait(resumed.candidate_id, past=resumed.status)
    assert resumed.status == "executed"
    # Resumed again (the framework's step retried): the same answer, no second effect.
    again = await (await run.open_turn()).propose(tool="case.add_note", arguments=note,
                                                  call_id="tool-call-7")
    assert (again.candidate_id, again.status) == (pending.candidate_id, "executed")
    assert len(world.ledger()) - before == 1
    # Another tool or other bytes under that call id are not the same call.
    other = await later_turn.propose(tool="case.add_note", arguments='{"note": "x"}',
                                     call_id="tool-call-7")
    assert (other.status, other.code) == ("rejected", "proposal.invalid")
    assert other.candidate_id != pending.candidate_id
    assert len(world.ledger()) - before == 1


async def test_withdrawn_while_awaiting_approval_never_executes(
    system: System, gw: Gateway, reviewer: Gateway, world: World
) -> None:
    run = await gw.open_run(tenant="tenant-a", actor="user-42", context={"case_id": "case-sensitive"})
    turn = await run.open_turn()
    before = (world.invocations, len(world.ledger()))
    pending = await turn.propose(tool="case.add_note", arguments='{"note": "Never mind."}')
    review = await system.review_requested("tenant-a", pending.candidate_id)

    stopped = await run.withdraw(pending.candidate_id, why="the user cancelled the task")
    assert (stopped.status, stopped.code) == ("withdrawn", "proposal.withdrawn")
    assert (await run.wait(pending.candidate_id)).status == "withdrawn"
    with pytest.raises(Refused) as late:
        await reviewer.decide_review(tenant="tenant-a", candidate_id=pending.candidate_id,
                               review_id=review.review_id, digest=review.digest, approve=True)
    assert late.value.code == "review.closed"
    again = await run.withdraw(pending.candidate_id)
    assert again.status == "withdrawn"  # idempotent: still exactly what happened
    assert (world.invocations, len(world.ledger())) == before


async def test_withdrawing_an_executed_candidate_says_it_executed(system: System, gw: Gateway) -> None:
    run = await gw.open_run(tenant="tenant-a", actor="user-42", context={"case_id": "case-load-63"})
    turn = await run.open_turn()
    done = await turn.propose(tool="case.add_note", arguments='{"note": "done already"}')
    assert done.status == "executed"
    late = await run.withdraw(done.candidate_id)
    assert (late.status, late.code) == ("executed", "operation.executed")


async def test_a_reviewers_edit_is_a_new_candidate_that_crosses_every_gate_again(
    system: System, gw: Gateway, reviewer: Gateway, world: World,
) -> None:
    """The edit runs (once, approved again on its own digest); the original never does."""
    run = await gw.open_run(tenant="tenant-a", actor="user-42", context={"case_id": "case-sensitive"})
    turn = await run.open_turn()
    pending = await turn.propose(tool="case.add_note",
                                 arguments='{"note": "Escalated to legal; the customer is Jane Doe, DOB 1970-01-01."}')
    assert pending.status == "pending_approval"
    original = await system.review_requested("tenant-a", pending.candidate_id)
    writes = [row["intent_id"] for row in world.ledger()]

    with pytest.raises(Refused) as unchanged:  # the same bytes are not an edit
        await reviewer.edit_review(
            tenant="tenant-a", candidate_id=pending.candidate_id, review_id=original.review_id,
            digest=original.digest,
            arguments='{"note": "Escalated to legal; the customer is Jane Doe, DOB 1970-01-01."}')
    assert unchanged.value.code == "review.edit-unchanged"
    narrower = '{"note": "Escalated to legal."}'
    edited = await reviewer.edit_review(
        tenant="tenant-a", candidate_id=pending.candidate_id, review_id=original.review_id,
        digest=original.digest, arguments=narrower, reason="no personal data in case notes")
    again = await reviewer.edit_review(  # sent twice: the same new candidate, nothing more
        tenant="tenant-a", candidate_id=pending.candidate_id, review_id=original.review_id,
        digest=original.digest, arguments=narrower)
    assert again.candidate_id == edited.candidate_id != pending.candidate_id

    # The original is closed, named to the edit, and can no longer be approved.
    closed = await run.wait(pending.candidate_id)
    # The agent learns what its call became: replaced, and by which candidate.
    assert (closed.status, closed.code, closed.successor) == (
        "replaced", "review.edited", edited.candidate_id)
    with pytest.raises(Refused) as late:
        await reviewer.decide_review(tenant="tenant-a", candidate_id=pending.candidate_id,
                                     review_id=original.review_id, digest=original.digest,
                                     approve=True)
    assert late.value.code == "review.closed"

    # The edit is a candidate of its own: its own digest, its own review (policy asks again).
    second = await run.wait(edited.candidate_id, past="")  # its first answer
    assert second.status == "pending_approval"
    fresh = await system.review_requested("tenant-a", edited.candidate_id)
    assert fresh.digest != original.digest and fresh.shown == {"note": "Escalated to legal."}
    await reviewer.decide_review(tenant="tenant-a", candidate_id=edited.candidate_id,
                                 review_id=fresh.review_id, digest=fresh.digest, approve=True)
    done = await run.wait(edited.candidate_id, past="pending_approval")
    assert done.status == "executed"
    new_writes = [row["intent_id"] for row in world.ledger()][len(writes):]
    assert new_writes == [edited.candidate_id]  # exactly one write, the edit's; the original's never
