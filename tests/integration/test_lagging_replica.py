"""A direct get answered by a replica behind the leader, completed by the leader.

The store's direct gets are made to answer like a lagging replica (nothing stored after
a cut-off sequence); its message gets still go to the real server, as only a stream's
leader answers them. A load that knows a later version exists gets it, whole and in
order; one that knows nothing takes what the replica said; what the leader holds
stands, and a handler never acts on less than its trigger.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.errors import NotFoundError

from lockgate.eventstore import ConcurrencyConflict, EventStoreUnavailable, NewEvent
from lockgate.eventstore.jetstream import JetStreamEventStore, events_stream_config
from lockgate.runtime.ports.intents import load_known

STREAM, PREFIX = "LAG_EVENTS", "lag.evt"


class LaggingReplica(JetStreamEventStore):
    """Direct gets see the stream only up to ``applied`` (a replica's last applied write)."""

    applied = 0

    async def _direct_get(self, request: dict[str, Any], *route: Any) -> tuple[str, list[Msg]]:
        status, messages = await super()._direct_get(request, *route)
        kept = [m for m in messages if int((m.headers or {})["Nats-Sequence"]) <= self.applied]
        return ("404" if not kept and status == "204" else status), kept


@pytest.fixture
async def store(nc: Client) -> LaggingReplica:
    js = nc.jetstream()
    with contextlib.suppress(NotFoundError):
        await js.delete_stream(STREAM)
    await js.add_stream(events_stream_config(STREAM, subject_prefix=PREFIX))
    await js.purge_stream(STREAM)
    return LaggingReplica(nc, stream=STREAM, subject_prefix=PREFIX)


async def four_events(nc: Client) -> tuple[str, int]:
    """An aggregate of four events, written by another process; the stream's last sequence."""
    writer = JetStreamEventStore(nc, stream=STREAM, subject_prefix=PREFIX)
    history = await writer.load("tenant-a", "i1")
    for n in range(1, 5):
        history = await writer.append(history, [NewEvent(f"e{n}", "Noted", b"{}")])
    return "i1", history.last_sequence


async def test_a_load_that_knows_the_version_is_completed_by_the_leader(
    nc: Client, store: LaggingReplica
) -> None:
    intent_id, last = await four_events(nc)
    store.applied = last - 2  # the replica has not applied the last two events
    history = await store.load("tenant-a", intent_id, at_least=4)
    assert [e.event_id for e in history.events] == ["e1", "e2", "e3", "e4"]
    assert [e.version for e in history.events] == [1, 2, 3, 4]
    assert history.last_sequence == last and store.behind == 1


async def test_a_load_that_knows_nothing_takes_the_replicas_answer(
    nc: Client, store: LaggingReplica
) -> None:
    intent_id, last = await four_events(nc)
    store.applied = last - 2
    assert (await store.load("tenant-a", intent_id)).version == 2 and store.behind == 0
    # Known to this store now at version 2: the next load goes on from there.
    assert (await store.load("tenant-a", intent_id, at_least=3)).version == 4


async def test_the_leaders_answer_stands_even_when_shorter(nc: Client, store: LaggingReplica) -> None:
    # An order ahead of the record, or a forged one: the caller judges what the store holds.
    intent_id, last = await four_events(nc)
    store.applied = last
    history = await store.load("tenant-a", intent_id, at_least=9)
    assert history.version == 4 and store.behind == 1
    assert (await store.load("tenant-a", "never-written", at_least=3)).events == ()


async def test_a_handler_never_acts_on_less_than_its_trigger(nc: Client, store: LaggingReplica) -> None:
    intent_id, last = await four_events(nc)
    store.applied = last
    with pytest.raises(EventStoreUnavailable):
        await load_known(store, "tenant-a", intent_id, at_least=5)


async def test_a_conflicting_append_reloads_past_the_conflict(
    nc: Client, store: LaggingReplica
) -> None:
    intent_id, last = await four_events(nc)
    store.applied = last
    stale = await store.load("tenant-a", intent_id)
    writer = JetStreamEventStore(nc, stream=STREAM, subject_prefix=PREFIX)
    await writer.append(await writer.load("tenant-a", intent_id), [NewEvent("theirs", "Noted", b"{}")])
    # The replica has not applied "theirs": the reload after the refusal must still see it,
    # or "mine" would be reported as landed / retried on a history that is not the store's.
    with pytest.raises(ConcurrencyConflict):
        await store.append(stale, [NewEvent("mine", "Noted", b"{}")])
    assert store.behind == 1
