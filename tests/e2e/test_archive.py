"""The archiver on the real broker: ended intents leave the hot store, nothing else does.

What it must not do, tried from outside: purge a live intent however old, purge what
the views do not hold, free an identity (a retried call id after archiving executes
nothing again), or lose the timeline (``lockgate events`` still shows every event).
A SIGKILL between the mark and the purge is finished by the next start.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Iterator

import pytest

from lockgate.eventstore.jetstream import JetStreamEventStore
from lockgate.testing.system import System, running
from lockgate.views.store import Views, open_views
from lockgate.worlds.casenotes.world import World

NOTE = "case.add_note"


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    with running(System(tmp_path_factory.mktemp("archive"), extra_env={
            "LOCKGATE_ARCHIVE_AFTER_S": "1", "LOCKGATE_ARCHIVE_EVERY_S": "0.3"})) as s:
        yield s


@pytest.fixture
def views(system: System) -> Iterator[Views]:
    opened = open_views(var_dir=system.root)
    try:
        yield opened
    finally:
        opened.close()


async def stored_types(system: System, intent_id: str) -> list[str]:
    nc = await system.connect()
    try:
        return [e.event_type for e in (await JetStreamEventStore(nc).load("tenant-a", intent_id)).events]
    finally:
        await nc.close()


async def until(check: object, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.2)


async def test_an_ended_intent_leaves_the_hot_store_and_its_identity_stays(
    system: System, views: Views,
) -> None:
    world = World(system.world_dir)
    gw = await system.gateway()
    try:
        run = await gw.open_run(tenant="tenant-a", actor="user-42", context={"case_id": "case-123"})
        turn = await run.open_turn()
        args = json.dumps({"note": "archived later"})
        first = await turn.propose(tool=NOTE, arguments=args, call_id="archive-me", timeout_s=30)
        assert first.status == "executed"
        writes = len(world.ledger())

        async def archived() -> bool:
            return await stored_types(system, first.candidate_id) == ["IntentArchived"]

        await until(archived)

        async def projected() -> bool:
            row = views.intent(first.candidate_id)
            return row is not None and row.archived

        await until(projected)
        # The timeline is whole in the views, the mark last.
        timeline = [e.event_type for e in views.events_of(first.candidate_id)]
        assert timeline[0] == "CandidateReceived" and timeline[-2:] == ["EffectCompleted", "IntentArchived"]
        row = views.intent(first.candidate_id)
        assert row is not None and row.archived and row.state == "completed"

        # The same call again: its identity is the mark, so nothing is recorded or run again.
        again = await turn.propose(tool=NOTE, arguments=args, call_id="archive-me", timeout_s=30)
        assert (again.candidate_id, again.status) == (first.candidate_id, "executed")
        await asyncio.sleep(1.0)
        assert await stored_types(system, first.candidate_id) == ["IntentArchived"]
        assert len(world.ledger()) == writes
    finally:
        await gw.close()

    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "lockgate.cli", "events", first.candidate_id, "--tenant",
        "tenant-a", "--json", "--url", system.url, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env={**os.environ, "LOCKGATE_VAR_DIR": str(system.root)})
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    assert [json.loads(line)["type"] for line in out.decode().splitlines()] == timeline


async def test_a_live_intent_is_never_archived_however_old(system: System, views: Views) -> None:
    gw = await system.gateway()
    try:
        run = await gw.open_run(tenant="tenant-a", actor="user-42",
                                context={"case_id": "case-sensitive"})
        turn = await run.open_turn()
        pending = await turn.propose(tool=NOTE, arguments=json.dumps({"note": "waits"}), timeout_s=30)
        assert pending.status == "pending_approval"
    finally:
        await gw.close()
    await asyncio.sleep(3.0)  # three times the age, ten rounds
    types = await stored_types(system, pending.candidate_id)
    assert types[0] == "CandidateReceived" and "IntentArchived" not in types
    row = views.intent(pending.candidate_id)
    assert row is not None and not row.archived and row.state == "awaiting_approval"


async def test_a_purge_a_crash_cut_short_is_finished_by_the_next_start(
    system: System, views: Views,
) -> None:
    from lockgate.archiver.domain import archived
    from lockgate.intent.codec import decode_event, encode_event, fold

    system.kill("archiver")
    gw = await system.gateway()
    try:
        run = await gw.open_run(tenant="tenant-a", actor="user-42", context={"case_id": "case-123"})
        turn = await run.open_turn()
        done = await turn.propose(tool=NOTE, arguments=json.dumps({"note": "cut short"}), timeout_s=30)
        assert done.status == "executed"
    finally:
        await gw.close()
    # What a killed archiver leaves: the mark appended, the purge not made.
    nc = await system.connect("archiver")
    try:
        store = JetStreamEventStore(nc)
        history = await store.load("tenant-a", done.candidate_id)
        intent = fold(decode_event(r) for r in history.events)
        assert intent is not None
        from datetime import UTC, datetime

        await store.append(history, [encode_event(archived(intent, now=datetime.now(UTC)))])
    finally:
        await nc.close()

    async def marked_in_views() -> bool:
        row = views.intent(done.candidate_id)
        return row is not None and row.archived

    await until(marked_in_views)
    assert (await stored_types(system, done.candidate_id))[0] == "CandidateReceived"
    await system.restart("archiver")

    async def purged() -> bool:
        return await stored_types(system, done.candidate_id) == ["IntentArchived"]

    await until(purged)
