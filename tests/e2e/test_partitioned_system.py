"""The whole system on three events partitions (one server): the same answers, the same
world, every intent's events in the stream its id hashes to, the views caught up on all.

The cluster suite runs partitions on three nodes (``make test-cluster``); this runs them
in ``make test``, so the wiring (topology, every service's durable on every partition,
the roles, the projector's positions) is checked on every change.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from lockgate.client.demo import SCENARIOS
from lockgate.client.sdk import Gateway
from lockgate.core.ids import random_id
from lockgate.eventstore.partitions import Partitions
from lockgate.intent.codec import decode_event
from lockgate.testing.system import System, running
from lockgate.views.store import open_views, views_position
from lockgate.worlds.casenotes.world import World

PARTITIONS = Partitions(3)


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    with running(System(tmp_path_factory.mktemp("partitioned"), partitions=PARTITIONS)) as s:
        yield s


async def test_the_demo_table_on_three_partitions(system: System, gw: Gateway) -> None:
    world = World(system.world_dir)
    wrong, intents = [], []
    for s in SCENARIOS:
        scenario_gw = gw if s.tenant == "tenant-a" else await system.gateway(s.tenant)
        try:
            before = (world.invocations, len(world.ledger()))
            run = await scenario_gw.open_run(tenant=s.tenant, actor=s.actor, context={"case_id": s.case})
            turn = await run.open_turn()
            call_id = random_id()
            response = await turn.propose(tool=s.tool, arguments=s.arguments, call_id=call_id)
            if s.repeat:
                assert await turn.propose(tool=s.tool, arguments=s.arguments, call_id=call_id) == response
            after = (world.invocations, len(world.ledger()))
            got = (response.status, response.code, response.field, after[0] - before[0], after[1] - before[1])
            if got != (s.status, s.code, s.field, s.invocations, s.ledger):
                wrong.append((s.name, got))
            intents.append((s.tenant, response.candidate_id))
        finally:
            if scenario_gw is not gw:
                await scenario_gw.close()
    assert wrong == []

    nc = await system.connect()
    try:
        store, js = system.store(nc), nc.jetstream()
        used = set()
        for tenant, intent_id in intents:
            where = PARTITIONS.of(intent_id)
            history = await store.load(tenant, intent_id)
            assert history.events, intent_id
            # Stored in its own partition, under that partition's prefix, and nowhere else.
            for p in PARTITIONS:
                found = [e async for e in store.scan_partition(p.index) if e.intent_id == intent_id]
                assert bool(found) == (p == where), (intent_id, p.stream)
            used.add(where.index)
            assert type(decode_event(history.events[0])).__name__ in ("CandidateReceived", "CandidateRejected")
        assert len(used) > 1  # the table's intents did not all hash to one partition
        last = sum([(await js.stream_info(p.stream)).state.last_seq for p in PARTITIONS])
        assert not [s for s in ("LG_EVENTS",) if s in {i.config.name for i in await js.streams_info()}]
    finally:
        await nc.close()

    # The projector tracks each partition: the views reach every event stored.
    views = open_views(var_dir=system.root)
    try:
        deadline = time.monotonic() + 30
        while (views_position(views, PARTITIONS.streams) or 0) < last:
            assert time.monotonic() < deadline, (views_position(views, PARTITIONS.streams), last)
            await asyncio.sleep(0.2)
        for _, intent_id in intents:
            assert views.intent(intent_id) is not None, intent_id
    finally:
        views.close()
