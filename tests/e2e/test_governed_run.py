"""What every framework integration stands on, against the real system: a run's tool calls
answered by Lockgate, a review as a pause, a resume as the same call, an edit said truthfully.

Each scenario counts the case-notes world's writes: a resumed call, a second process, a
retried step never make a second effect.
"""

from __future__ import annotations

import json
import os

import pytest

from lockgate.client.sdk import Gateway, Refused
from lockgate.integrations import GovernedRun, call_id_for
from lockgate.operations.deployment import write_run_info
from lockgate.runtime.credentials import RunInfo
from lockgate.testing.system import System
from lockgate.worlds.casenotes.world import World

NOTE = "case.add_note"
TENANT = "tenant-a"


async def approve(system: System, reviewer: Gateway, candidate_id: str, *, yes: bool = True) -> None:
    review = await system.review_requested(TENANT, candidate_id)
    await reviewer.decide_review(tenant=TENANT, candidate_id=candidate_id, review_id=review.review_id,
                                 digest=review.digest, approve=yes, reason="" if yes else "not now")


def note(text: str) -> str:
    return json.dumps({"note": text})


async def governed(gw: Gateway, case: str = "case-123") -> GovernedRun:
    return await GovernedRun.open(tenant=TENANT, actor="user-42", context={"case_id": case},
                                  capabilities=[NOTE], gateway=gw)


async def test_executed_refused_and_denied_are_the_models_to_read(gw: Gateway, world: World) -> None:
    run = await governed(gw)
    assert [t.name for t in run.tools] == [NOTE]
    before = len(world.ledger())
    done = await run.propose(NOTE, note("Called back."), call_id="call_exec_1")
    assert done.executed and not done.pending
    content = json.loads(done.text())
    assert content["status"] == "executed" and "untrusted_data" in content["result"]
    assert len(world.ledger()) == before + 1

    bad = await run.propose(NOTE, '{"note": ""}', call_id="call_bad_1")
    assert bad.refused and json.loads(bad.text())["code"] == "argument.note.empty"

    closed = await GovernedRun.open(tenant=TENANT, actor="user-42", context={"case_id": "case-closed"},
                                    capabilities=[NOTE], gateway=gw)
    denied = await closed.propose(NOTE, note("Reopen it."), call_id="call_denied_1")
    assert denied.refused and denied.status == "unavailable"
    assert "case.closed" not in denied.text()  # an internal reason never reaches the model
    assert len(world.ledger()) == before + 1


async def test_a_review_is_a_pause_and_a_resume_in_a_new_process_is_one_effect(
    system: System, gw: Gateway, reviewer: Gateway, world: World,
) -> None:
    run = await governed(gw, "case-sensitive")
    before = len(world.ledger())
    waiting = await run.propose(NOTE, note("Refund agreed."), call_id="call_review_1")
    assert waiting.pending and json.loads(waiting.text())["status"] == "pending_approval"
    # The framework resumes before anybody decided: still waiting, nothing happened.
    assert (await run.resume(NOTE, note("Refund agreed."), call_id="call_review_1")).pending
    await approve(system, reviewer, waiting.candidate_id)

    # The agent process died; a new one takes up the run and re-issues the call.
    other = await system.gateway(TENANT)
    try:
        again = await GovernedRun.attach(tenant=TENANT, run_id=run.run_id, gateway=other)
        resumed = await again.resume(NOTE, note("Refund agreed."), call_id="call_review_1", wait_s=20)
        assert resumed.executed and resumed.candidate_id == waiting.candidate_id
        twice = await again.resume(NOTE, note("Refund agreed."), call_id="call_review_1")
        assert twice.executed and twice.candidate_id == waiting.candidate_id
    finally:
        await other.close()
    writes = world.ledger()[before:]
    assert [w["intent_id"] for w in writes] == [waiting.candidate_id]


async def test_a_denied_review_is_what_the_resume_learns(
    system: System, gw: Gateway, reviewer: Gateway, world: World,
) -> None:
    run = await governed(gw, "case-sensitive")
    before = len(world.ledger())
    waiting = await run.propose(NOTE, note("Close everything."), call_id="call_review_2")
    await approve(system, reviewer, waiting.candidate_id, yes=False)
    resumed = await run.resume(NOTE, note("Close everything."), call_id="call_review_2", wait_s=20)
    assert resumed.refused and resumed.status == "unavailable"  # a reviewer said no
    assert len(world.ledger()) == before


async def test_a_reviewers_edit_is_said_truthfully(
    system: System, gw: Gateway, reviewer: Gateway, world: World,
) -> None:
    run = await governed(gw, "case-sensitive")
    waiting = await run.propose(NOTE, note("Customer Jane Doe, DOB 1970-01-01, escalated."),
                                call_id="call_edit_1")
    review = await system.review_requested(TENANT, waiting.candidate_id)
    edited = await reviewer.edit_review(tenant=TENANT, candidate_id=waiting.candidate_id,
                                        review_id=review.review_id, digest=review.digest,
                                        arguments=note("Escalated."), reason="no personal data")
    # The edit is judged again: it waits for its own approval. (The original's answer
    # follows the edit's record by a moment.)
    await run.run.wait(waiting.candidate_id, past="pending_approval")
    replaced = await run.resume(NOTE, note("Customer Jane Doe, DOB 1970-01-01, escalated."),
                                call_id="call_edit_1")
    assert replaced.status == "replaced" and replaced.replacement is not None
    assert replaced.replacement.candidate_id == edited.candidate_id and replaced.pending
    await approve(system, reviewer, edited.candidate_id)
    done = await run.resume(NOTE, note("Customer Jane Doe, DOB 1970-01-01, escalated."),
                            call_id="call_edit_1", wait_s=20)
    assert done.executed and done.status == "replaced"
    content = json.loads(done.text())
    assert content["status"] == "replaced" and content["replacement"]["status"] == "executed"
    assert [w["intent_id"] for w in world.ledger() if w["intent_id"] in (
        waiting.candidate_id, edited.candidate_id)] == [edited.candidate_id]


async def test_closing_the_run_withdraws_what_it_left_waiting(
    system: System, gw: Gateway, reviewer: Gateway, world: World,
) -> None:
    run = await governed(gw, "case-sensitive")
    before = len(world.ledger())
    waiting = await run.propose(NOTE, note("Nobody will wait for this."), call_id="call_left_1")
    assert waiting.pending
    await run.close()
    after = await gw.run(tenant=TENANT, run_id=run.run_id).wait(waiting.candidate_id, past="", timeout_s=5)
    assert after.status == "withdrawn"
    review = await system.review_requested(TENANT, waiting.candidate_id)
    with pytest.raises(Refused) as late:
        await reviewer.decide_review(tenant=TENANT, candidate_id=waiting.candidate_id,
                                     review_id=review.review_id, digest=review.digest, approve=True)
    assert late.value.code == "review.closed"
    assert len(world.ledger()) == before


async def test_a_detached_run_keeps_its_waiting_calls_for_a_later_process(
    system: System, gw: Gateway, reviewer: Gateway, world: World,
) -> None:
    before = len(world.ledger())
    other = await system.gateway(TENANT)
    run = await GovernedRun.open(tenant=TENANT, actor="user-42", context={"case_id": "case-sensitive"},
                                 capabilities=[NOTE], gateway=other)
    waiting = await run.propose(NOTE, note("Handed over."), call_id="call_detach_1")
    run.owned = other  # as if open() had made the connection
    await run.detach()
    assert other.nc.is_closed
    await approve(system, reviewer, waiting.candidate_id)
    later = await GovernedRun.attach(tenant=TENANT, run_id=run.run_id, gateway=gw)
    done = await later.resume(NOTE, note("Handed over."), call_id="call_detach_1", wait_s=20)
    assert done.executed and [w["intent_id"] for w in world.ledger()[before:]] == [waiting.candidate_id]


async def test_a_run_that_ended_while_nobody_was_there_says_what_became_of_its_calls(
    system: System, gw: Gateway, world: World,
) -> None:
    before = len(world.ledger())
    run = await governed(gw, "case-sensitive")
    waiting = await run.propose(NOTE, note("Left behind."), call_id="call_ended_1")
    assert waiting.pending
    await run.run.close(why="the host gave up")
    later = await GovernedRun.attach(tenant=TENANT, run_id=run.run_id, gateway=gw)
    assert later.tools == ()
    resumed = await later.resume(NOTE, note("Left behind."), call_id="call_ended_1")
    assert (resumed.candidate_id, resumed.status) == (waiting.candidate_id, "withdrawn")
    fresh = await later.propose(NOTE, note("Something new."), call_id="call_ended_2")
    assert fresh.refused and fresh.status == "rejected"
    assert len(world.ledger()) == before


async def test_open_finds_the_running_system_and_its_users(system: System, world: World) -> None:
    """Without a URL or a credentials file: what `lockgate run` wrote says where and who."""
    write_run_info(system.root, RunInfo(url=system.url, pid=os.getpid(),
                                        credentials_dir=str(system.root / "credentials")))
    try:
        async with await GovernedRun.open(tenant=TENANT, actor="user-42", context={"case_id": "case-123"},
                                          capabilities=[NOTE], var_dir=system.root) as run:
            done = await run.propose(NOTE, note("Found it."), call_id="call_found_1")
            assert done.executed
    finally:
        (system.root / "run.json").unlink()


def test_framework_ids_that_are_no_call_ids_map_to_stable_ones() -> None:
    assert call_id_for("call_abc-123") == "call_abc-123"
    mapped = call_id_for("run:7/step:3 tool#1")
    assert mapped == call_id_for("run:7/step:3 tool#1") != call_id_for("run:7/step:3 tool#2")
    assert len(mapped) <= 64 and mapped.replace("-", "").replace("_", "").isalnum()
