"""Effects happen once, through response loss and adapter crashes, against the real broker.

Server P (draft.prepare_private) is idempotent by the intent key; server Q
(item.publish) is not, but answers queries by client reference. Faults are armed
in the simulated world; the adapter process really dies where a fault says so.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Iterator

import pytest

from lockgate.client.sdk import Gateway, Run
from lockgate.contracts.responses import ModelResponse
from lockgate.core.ids import intent_id_for
from lockgate.eventstore.jetstream import JetStreamEventStore
from lockgate.intent.codec import decode_event
from lockgate.intent.events import Event, ExecutionAuthorized, OutcomeUnknown, Reconciled
from lockgate.testing.invariants import by_intent, violations
from lockgate.testing.system import System, running
from lockgate.worlds.casenotes.world import DEMO_CREDENTIAL as CASE_CREDENTIAL
from lockgate.worlds.items.adapter import STALL_PAST_DEADLINE_S
from lockgate.worlds.items.world import DEMO_CREDENTIAL as ITEMS_CREDENTIAL
from lockgate.worlds.items.world import World as ItemsWorld

#: Long enough for a redelivered order (ack_wait 5 s) to land before it.
DEADLINE_S = 8
ADAPTER = "adapter.items"
ARGS = '{"title": "Release notes", "body": "Version 2 is out."}'


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    with running(System(tmp_path_factory.mktemp("effects"), extra_env={
            "LOCKGATE_ITEMS_WORLD_OUTCOME_DEADLINE_S": str(DEADLINE_S)})) as s:
        yield s


@pytest.fixture
def items(system: System) -> ItemsWorld:
    return ItemsWorld(system.items_dir)


async def events_of(system: System, candidate_id: str) -> list[Event]:
    nc = await system.connect()
    try:
        history = await JetStreamEventStore(nc).load("tenant-a", candidate_id)
    finally:
        await nc.close()
    return [decode_event(r) for r in history.events]


def authorizations(events: list[Event]) -> list[ExecutionAuthorized]:
    return [e for e in events if isinstance(e, ExecutionAuthorized)]


async def propose(gw: Gateway, tool: str, call_id: str) -> tuple[Run, asyncio.Task[ModelResponse]]:
    run = await gw.open_run(tenant="tenant-a", actor="user-42", context={"space_id": "space-1"})
    turn = await run.open_turn()
    return run, asyncio.create_task(turn.propose(tool=tool, arguments=ARGS, call_id=call_id, timeout_s=90))


async def survive_crash(system: System) -> None:
    """The adapter dies where the fault says; bring it back as a supervisor would."""
    proc = system.processes[ADAPTER]
    for _ in range(400):
        if proc.poll() is not None:
            break
        await asyncio.sleep(0.05)
    assert proc.returncode == 137, "the armed fault should have killed the adapter"
    await system.restart(ADAPTER)


async def executed_after_unknown(
    system: System, run: Run, pending: asyncio.Task[ModelResponse],
) -> ModelResponse:
    """The outcome is recorded unknown, then settled ``executed``; the model is never told it failed.

    The model is told ``outcome_unknown`` first, unless the reconciler settled the intent
    before the proposal's answer was read (the stream keeps the latest answer: on a busy
    machine that can be ``executed`` already). Either way the record shows the unknown
    outcome before its settlement.
    """
    first = await pending
    assert (first.status, first.code) in (
        ("outcome_unknown", "operation.outcome-unknown"), ("executed", "operation.executed"))
    final = (first if first.status == "executed"
             else await run.wait(first.candidate_id, past="outcome_unknown", timeout_s=60))
    assert (final.status, final.code) == ("executed", "operation.executed")
    kinds = [type(e) for e in await events_of(system, final.candidate_id)]
    assert OutcomeUnknown in kinds
    assert kinds.index(OutcomeUnknown) < kinds.index(Reconciled)
    return final


def mine(rows: list[dict[str, str]], candidate_id: str) -> list[dict[str, str]]:
    return [r for r in rows if r["intent_id"] == candidate_id]


async def test_p_redelivery_after_a_crash_returns_the_same_draft(
    system: System, gw: Gateway, items: ItemsWorld
) -> None:
    items.inject("P", "crash_after_commit")
    calls = items.invocations("P")
    _, pending = await propose(gw, "draft.prepare_private", "p-crash")
    await survive_crash(system)
    response = await pending
    assert (response.status, response.code) == ("executed", "operation.executed")
    assert len(mine(items.drafts(), response.candidate_id)) == 1  # one draft...
    assert items.invocations("P") - calls == 2  # ...though the world was asked twice, same key
    events = await events_of(system, response.candidate_id)
    assert len(authorizations(events)) == 1  # the same attempt, redelivered


async def test_q_lost_response_is_reconciled_not_repeated(
    system: System, gw: Gateway, items: ItemsWorld
) -> None:
    items.inject("Q", "drop_response")
    calls = items.invocations("Q")
    run, pending = await propose(gw, "item.publish", "q-lost")
    final = await executed_after_unknown(system, run, pending)
    assert len(mine(items.publications(), final.candidate_id)) == 1
    assert len(mine(items.notifications(), final.candidate_id)) == 3  # one fan-out
    assert items.invocations("Q") - calls == 1
    events = await events_of(system, final.candidate_id)
    assert len(authorizations(events)) == 1  # no second attempt was dispatched
    (reconciled,) = [e for e in events if isinstance(e, Reconciled)]
    assert (reconciled.finding, reconciled.resolution, reconciled.by) == (
        "confirmed", "completed", "reconciler")


async def test_q_crash_after_commit_is_found_by_query(
    system: System, gw: Gateway, items: ItemsWorld
) -> None:
    items.inject("Q", "crash_after_commit")
    run, pending = await propose(gw, "item.publish", "q-commit-crash")
    await survive_crash(system)
    first = await pending
    final = await run.wait(first.candidate_id, past="outcome_unknown", timeout_s=60)
    assert final.status == "executed"
    assert len(mine(items.publications(), final.candidate_id)) == 1
    assert len(authorizations(await events_of(system, final.candidate_id))) == 1


async def test_q_absent_after_a_crash_is_retried_as_the_same_intent(
    system: System, gw: Gateway, items: ItemsWorld
) -> None:
    items.inject("Q", "crash_after_send")
    run, pending = await propose(gw, "item.publish", "q-send-crash")
    await survive_crash(system)
    first = await pending
    final = await run.wait(first.candidate_id, past="outcome_unknown", timeout_s=60)
    assert final.status == "executed"
    assert len(mine(items.publications(), final.candidate_id)) == 1
    events = await events_of(system, final.candidate_id)
    first_try, second_try = authorizations(events)
    assert first_try.intent_key == second_try.intent_key  # same intent, same key
    assert first_try.attempt_id != second_try.attempt_id
    (reconciled,) = [e for e in events if isinstance(e, Reconciled)]
    assert (reconciled.finding, reconciled.resolution) == ("absent", "retry")


async def test_q_write_held_up_past_its_deadline_never_lands_beside_the_retry(
    system: System, gw: Gateway, items: ItemsWorld
) -> None:
    """A write that crossed its send boundary, then was held up past the attempt's deadline
    (a worker frozen between its crossing and its write): the outcome is recorded unknown,
    the query finds nothing, the same intent is tried again and publishes. The first write
    reaches the server after that, and the server refuses it as too late (the boundary's
    ``not_after``), so subscribers are notified once, not twice."""
    items.inject("Q", "stall_before_write")
    calls = items.invocations("Q")
    run, pending = await propose(gw, "item.publish", "q-stalled")
    final = await executed_after_unknown(system, run, pending)
    # The held-up write reaches the server STALL_PAST_DEADLINE_S after the deadline.
    until = time.monotonic() + DEADLINE_S + STALL_PAST_DEADLINE_S + 15
    while items.invocations("Q") - calls < 2 and time.monotonic() < until:
        await asyncio.sleep(0.2)
    assert items.invocations("Q") - calls == 2  # both writes reached the server...
    assert len(mine(items.publications(), final.candidate_id)) == 1  # ...one took effect
    assert len(mine(items.notifications(), final.candidate_id)) == 3
    events = await events_of(system, final.candidate_id)
    first_try, second_try = authorizations(events)
    assert first_try.intent_key == second_try.intent_key
    (reconciled,) = [e for e in events if isinstance(e, Reconciled)]
    assert (reconciled.finding, reconciled.resolution) == ("absent", "retry")


async def test_invariants_hold_after_the_faults(system: System, items: ItemsWorld) -> None:
    nc = await system.connect()
    try:
        recorded = [e async for e in JetStreamEventStore(nc).scan()]
    finally:
        await nc.close()
    ledger = [{**p, "idempotency_key": p["client_ref"]} for p in items.publications()]
    ledger += [{**d, "idempotency_key": d["idempotency_key"]} for d in items.drafts()]
    assert violations(by_intent(recorded), ledger) == []


async def lockgate_cli(system: System, *args: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "lockgate.cli", *args, "--url", system.url,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "LOCKGATE_VAR_DIR": str(system.root)},  # its users' credentials
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    return out.decode()


async def test_an_operator_settles_what_no_query_can(
    system: System, gw: Gateway, items: ItemsWorld
) -> None:
    items.inject("Q", "drop_response")
    run, pending = await propose(gw, "item.publish", "q-operator")
    candidate_id = intent_id_for("tenant-a", run.id, "q-operator")
    for _ in range(400):  # the publication lands; the adapter never says so
        if mine(items.publications(), candidate_id):
            break
        await asyncio.sleep(0.05)
    system.kill(ADAPTER)  # and now nobody can answer the reconciler's query
    try:
        first = await pending
        assert first.status == "outcome_unknown"
        listed = [json.loads(line) for line in (await lockgate_cli(
            system, "intents", "--state", "unknown", "--tenant", "tenant-a", "--json")).splitlines()]
        assert candidate_id in {row["intent"] for row in listed}
        recorded = await lockgate_cli(
            system, "reconcile", candidate_id, "--tenant", "tenant-a", "--confirmed",
            "--why", "the item is visible in space-1", "--as", "ops", "--json")
        assert json.loads(recorded) == {"recorded": "Reconciled", "by": "ops"}
        final = await run.wait(candidate_id, past="outcome_unknown", timeout_s=30)
        assert final.status == "executed"
    finally:
        await system.restart(ADAPTER)
    (reconciled,) = [e for e in await events_of(system, candidate_id) if isinstance(e, Reconciled)]
    assert (reconciled.by, reconciled.why, reconciled.resolution) == (
        "operator:ops", "the item is visible in space-1", "completed")
    assert len(mine(items.publications(), candidate_id)) == 1


async def test_no_credential_reaches_the_record_or_the_model(system: System) -> None:
    nc = await system.connect()
    js = nc.jetstream()
    try:
        recorded = [e async for e in JetStreamEventStore(nc).scan()]
        info = await js.stream_info("LG_RESPONSES")
        responses = [(await js.get_msg("LG_RESPONSES", seq)).data or b""
                     for seq in range(info.state.first_seq, info.state.last_seq + 1)]
    finally:
        await nc.close()
    assert recorded and responses
    for secret in (ITEMS_CREDENTIAL.encode(), CASE_CREDENTIAL.encode()):
        assert not any(secret in e.data for e in recorded)
        assert not any(secret in r for r in responses)
