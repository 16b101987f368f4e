"""The whole system on three events partitions (one server): the same answers, the same
world, every intent's events in the stream its id hashes to, the views caught up on all.

The cluster suite runs partitions on three nodes (``make test-cluster``); this runs them
in ``make test``, so the wiring (topology, every service's durable on every partition,
the roles, the projector's positions) is checked on every change.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lockgate.client.sdk import Gateway
from lockgate.eventstore.partitions import Partitions
from lockgate.intent.codec import decode_event
from lockgate.testing.demo import play_table
from lockgate.testing.system import System, running
from lockgate.views.store import open_views

PARTITIONS = Partitions(3)


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    with running(System(tmp_path_factory.mktemp("partitioned"), partitions=PARTITIONS)) as s:
        yield s


async def test_the_demo_table_on_three_partitions(system: System, gw: Gateway) -> None:
    played = await play_table(system, gw, "tenant-a")
    assert played.wrong == []
    intents = played.intents
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
        assert "LG_EVENTS" not in {i.config.name for i in await js.streams_info()}
    finally:
        await nc.close()

    # The projector tracks each partition: the views reach every event stored.
    views = open_views(var_dir=system.root)
    try:
        await system.views_caught_up(views)
        for _, intent_id in intents:
            assert views.intent(intent_id) is not None, intent_id
    finally:
        views.close()
