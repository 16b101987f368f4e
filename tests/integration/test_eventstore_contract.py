"""One contract for every event store: the in-memory fake and JetStream behave alike."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.errors import NotFoundError

from lockgate.eventstore import (
    AggregateHistory,
    ConcurrencyConflict,
    EventStore,
    EventStoreUnavailable,
    MemoryEventStore,
    NewEvent,
)
from lockgate.eventstore.base import TenantLookup
from lockgate.eventstore.jetstream import (
    DirectGet,
    JetStreamEventStore,
    events_stream_config,
    partition_stream_configs,
)
from lockgate.eventstore.partitions import Partitions


@pytest.fixture(params=["memory", "jetstream", "partitioned"])
async def store(request: pytest.FixtureRequest, nc: Client) -> AsyncIterator[EventStore]:
    if request.param == "memory":
        yield MemoryEventStore()
        return
    # Partitioned under a stem and prefix of its own: ``lg.evt.p<k>.>`` overlaps ``lg.evt.>``.
    partitions = Partitions(3, "PT_EVENTS", "pt.evt") if request.param == "partitioned" else Partitions()
    js = nc.jetstream()
    for config in partition_stream_configs(partitions):
        with contextlib.suppress(NotFoundError):  # absent on the first test
            await js.delete_stream(config.name)
        await js.add_stream(config)
        # A delete the server had not finished when the same stream was added again leaves
        # the old messages under the new one: each test starts from an empty stream.
        await js.purge_stream(config.name)
    yield JetStreamEventStore(nc, partitions=partitions)


def ev(event_id: str, event_type: str = "Noted", data: bytes = b"{}") -> NewEvent:
    return NewEvent(event_id=event_id, event_type=event_type, data=data)


async def test_unknown_aggregate_loads_empty(store: EventStore) -> None:
    history = await store.load("tenant-a", "nope")
    assert history.events == ()
    assert history.version == 0


async def test_append_then_load_round_trips(store: EventStore) -> None:
    h0 = await store.load("tenant-a", "i1")
    h1 = await store.append(h0, [ev("e1", "CandidateReceived", b'{"a":1}')])
    loaded = await store.load("tenant-a", "i1")
    assert [(e.version, e.event_type, e.event_id, e.data) for e in loaded.events] == [
        (1, "CandidateReceived", "e1", b'{"a":1}')
    ]
    assert loaded.last_sequence == h1.last_sequence


async def test_aggregates_are_separate(store: EventStore) -> None:
    await store.append(await store.load("tenant-a", "i1"), [ev("a1")])
    await store.append(await store.load("tenant-a", "i2"), [ev("b1"), ev("b2")])
    await store.append(await store.load("tenant-b", "i1"), [ev("c1")])
    assert [e.event_id for e in (await store.load("tenant-a", "i1")).events] == ["a1"]
    assert [e.event_id for e in (await store.load("tenant-a", "i2")).events] == ["b1", "b2"]
    assert [e.event_id for e in (await store.load("tenant-b", "i1")).events] == ["c1"]


async def test_an_intent_id_alone_names_its_tenant(store: EventStore) -> None:
    await store.append(await store.load("tenant-b", "i7"), [ev("t1"), ev("t2")])
    assert isinstance(store, TenantLookup)
    assert await store.tenant_of("i7") == "tenant-b"
    assert await store.tenant_of("i8") is None and await store.tenant_of("no.token") is None


async def test_stale_writer_gets_conflict_across_event_types(store: EventStore) -> None:
    h0 = await store.load("tenant-a", "i1")
    await store.append(h0, [ev("e1", "TypeA")])
    with pytest.raises(ConcurrencyConflict):
        await store.append(h0, [ev("e2", "TypeB")])
    h1 = await store.load("tenant-a", "i1")
    await store.append(h1, [ev("e2", "TypeB")])
    with pytest.raises(ConcurrencyConflict):
        await store.append(h1, [ev("e3", "TypeC")])
    assert [e.event_id for e in (await store.load("tenant-a", "i1")).events] == ["e1", "e2"]


async def test_retry_after_lost_ack_is_success_not_conflict(store: EventStore) -> None:
    h0 = await store.load("tenant-a", "i1")
    first = await store.append(h0, [ev("e1")])
    # The same append again, as a writer whose first acknowledgement was lost would.
    again = await store.append(h0, [ev("e1")])
    assert again.version == first.version == 1
    assert [e.event_id for e in (await store.load("tenant-a", "i1")).events] == ["e1"]


async def test_retried_batch_after_lost_ack_is_success(store: EventStore) -> None:
    h0 = await store.load("tenant-a", "i1")
    await store.append(h0, [ev("e1"), ev("e2")])
    again = await store.append(h0, [ev("e1"), ev("e2")])
    assert again.version == 2
    assert len((await store.load("tenant-a", "i1")).events) == 2


async def test_batch_is_all_or_nothing(store: EventStore) -> None:
    h0 = await store.load("tenant-a", "i1")
    await store.append(h0, [ev("e1")])
    with pytest.raises(ConcurrencyConflict):
        await store.append(h0, [ev("x1"), ev("x2"), ev("x3")])
    assert [e.event_id for e in (await store.load("tenant-a", "i1")).events] == ["e1"]


async def test_concurrent_writers_one_wins_each_version(store: EventStore) -> None:
    writers, rounds = 8, 12

    async def writer(n: int) -> int:
        wins = 0
        for r in range(rounds):
            while True:
                history = await store.load("tenant-a", "hot")
                if history.version >= (r + 1):
                    break  # someone else took this round's version
                try:
                    await store.append(history, [ev(f"w{n}-r{r}")])
                    wins += 1
                    break
                except ConcurrencyConflict:
                    await asyncio.sleep(0)
        return wins

    wins = await asyncio.gather(*(writer(n) for n in range(writers)))
    history = await store.load("tenant-a", "hot")
    assert [e.version for e in history.events] == list(range(1, rounds + 1))
    assert sum(wins) == rounds
    assert len({e.event_id for e in history.events}) == rounds
    sequences = [e.sequence for e in history.events]
    assert sequences == sorted(sequences)


async def test_long_aggregate_loads_whole(store: EventStore) -> None:
    history = await store.load("tenant-a", "long")
    for start in range(0, 1100, 100):
        history = await store.append(history, [ev(f"e{i}") for i in range(start, start + 100)])
    await store.append(await store.load("tenant-a", "other"), [ev("o1")])
    loaded = await store.load("tenant-a", "long")
    assert len(loaded.events) == 1100
    assert [e.version for e in loaded.events] == list(range(1, 1101))
    assert loaded.events[-1].event_id == "e1099"
    after = await store.append(loaded, [ev("e1100")])
    assert after.version == 1101


async def test_invalid_tokens_are_refused(store: EventStore) -> None:
    with pytest.raises(ValueError):
        await store.load("tenant.a", "i1")
    with pytest.raises(ValueError):
        await store.load("tenant-a", "i*")
    h = AggregateHistory("tenant-a", "i1")
    with pytest.raises(ValueError):
        await store.append(h, [ev("e1", "Bad.Type")])


async def test_an_event_id_reused_at_a_later_position_is_refused(store: EventStore) -> None:
    h1 = await store.append(await store.load("tenant-a", "i1"), [ev("e1")])
    with pytest.raises(ConcurrencyConflict):
        await store.append(h1, [ev("e1", "Again")])
    assert [e.event_type for e in (await store.load("tenant-a", "i1")).events] == ["Noted"]


async def test_a_known_aggregate_loads_what_another_writer_appended_since(nc: Client) -> None:
    """A store that loaded an aggregate goes on from where it left off: events another
    writer appended (before and after other aggregates' events) all arrive, in order."""
    js = nc.jetstream()
    with contextlib.suppress(NotFoundError):
        await js.delete_stream("LG_EVENTS")
    await js.add_stream(events_stream_config())
    mine, theirs = JetStreamEventStore(nc), JetStreamEventStore(nc)
    h = await mine.append(await mine.load("tenant-a", "i1"), [ev("a1"), ev("a2")])
    assert [e.event_id for e in (await mine.load("tenant-a", "i1")).events] == ["a1", "a2"]
    other = await theirs.load("tenant-a", "i1")
    other = await theirs.append(other, [ev("a3")])
    await theirs.append(await theirs.load("tenant-a", "i2"), [ev("b1")])
    await theirs.append(other, [ev("a4"), ev("a5")])
    loaded = await mine.load("tenant-a", "i1")
    assert [(e.version, e.event_id) for e in loaded.events] == [
        (1, "a1"), (2, "a2"), (3, "a3"), (4, "a4"), (5, "a5")]
    assert loaded.last_sequence > h.last_sequence
    again = await mine.load("tenant-a", "i1")  # nothing new: the same history
    assert again.events == loaded.events
    # And a stale writer on what it knows is still refused by the server.
    with pytest.raises(ConcurrencyConflict):
        await mine.append(h, [ev("late")])


async def test_partitions_hold_their_own_intents_and_scan_covers_all(nc: Client) -> None:
    """K = 3: each intent's events are in the stream its id hashes to, under that stream's
    prefix, and nowhere else; a scan hands every one of them over."""
    partitions = Partitions(3, "PT_EVENTS", "pt.evt")
    js = nc.jetstream()
    for config in partition_stream_configs(partitions):
        with contextlib.suppress(NotFoundError):
            await js.delete_stream(config.name)
        await js.add_stream(config)
        await js.purge_stream(config.name)
    store = JetStreamEventStore(nc, partitions=partitions)
    ids = [f"i{n}" for n in range(30)]
    for i in ids:
        await store.append(await store.load("tenant-a", i), [ev(f"{i}-1"), ev(f"{i}-2")])
    where = {i: partitions.of(i) for i in ids}
    assert len({p.index for p in where.values()}) == 3  # thirty ids reach every partition
    for p in partitions:
        info = await js.stream_info(p.stream)
        mine = [i for i in ids if where[i] == p]
        assert info.state.messages == 2 * len(mine), p.stream
        stored = [e async for e in store.scan_partition(p.index)]
        assert {e.intent_id for e in stored} == set(mine)
    assert sorted([e.event_id async for e in store.scan()]) == sorted(
        f"{i}-{n}" for i in ids for n in (1, 2))
    # A fresh store (another process) finds each where it is.
    again = JetStreamEventStore(nc, partitions=partitions)
    assert [e.event_id for e in (await again.load("tenant-a", "i7")).events] == ["i7-1", "i7-2"]


async def test_a_direct_get_nobody_answers_times_out_and_forgets_it(nc: Client) -> None:
    """A direct get the server never answers (here: a subscriber that keeps quiet) fails as
    the store being unavailable after its timeout, and leaves nothing waiting; a late
    reply to it is dropped."""
    heard: list[str] = []

    async def quiet(msg: Msg) -> None:
        heard.append(msg.reply)

    sub = await nc.subscribe("probe.quiet.DIRECT.GET.LG_EVENTS", cb=quiet)
    get = DirectGet(nc, "LG_EVENTS", timeout_s=0.2, api_prefix="probe.quiet")
    try:
        with pytest.raises(EventStoreUnavailable, match="timed out"):
            await get.request({"multi_last": ["lg.evt.tenant-a.i1.>"]})
        assert heard and not get._waiting  # noqa: SLF001 - nothing left waiting
        await nc.publish(heard[0], b"", headers={"Status": "404"})  # too late: dropped
        await nc.flush()
    finally:
        await sub.unsubscribe()
