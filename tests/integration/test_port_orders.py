"""One contract for the orders, timers and proposals ports: the in-memory fakes and the broker.

What the broker was handed is read back from it (the stream, a subscription, a consumer's
pending count); what a fake was handed is read from the fake.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import msgspec
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, StreamConfig
from nats.js.errors import NotFoundError

from lockgate.contracts import subjects
from lockgate.contracts.messages import ExecutionOrder
from lockgate.core.ids import random_id
from lockgate.runtime.context import MemoryPorts, Ports


def order(capability: str, attempt_id: str = "a1") -> ExecutionOrder:
    return ExecutionOrder(tenant="tenant-a", intent_id=random_id(), attempt_id=attempt_id,
                          intent_key="k", capability=capability, digest="sha256:d", arguments={},
                          resource={}, actor="user-42", preconditions={}, authorized_version=3)


async def sent(ports: Ports, capability: str) -> list[ExecutionOrder]:
    """Every order of ``capability`` the ports handed on."""
    if isinstance(ports, MemoryPorts):
        return [o for o in ports.orders.sent if o.capability == capability]
    info = await ports.js.stream_info("LG_EXEC", subjects_filter=subjects.order(capability))
    count = (info.state.subjects or {}).get(subjects.order(capability), 0)
    if not count:
        return []
    last = await ports.js.get_last_msg("LG_EXEC", subjects.order(capability))
    return [msgspec.json.decode(last.data, type=ExecutionOrder)] * count


async def test_an_order_is_handed_on_once_per_attempt(ports: Ports) -> None:
    capability = f"port.o{random_id()[:12]}"
    first = order(capability, attempt_id=f"a-{random_id()}")
    await ports.orders.send(first)
    await ports.orders.send(first)  # handed again (a redelivered trigger)
    assert await sent(ports, capability) == [first]


async def test_a_request_to_stop_reaches_the_capability_s_workers(ports: Ports, nc: Client) -> None:
    capability = f"port.i{random_id()[:12]}"
    heard: asyncio.Queue[bytes] = asyncio.Queue()

    async def on(msg: Msg) -> None:
        await heard.put(msg.data)

    sub = await nc.subscribe(subjects.interrupt(capability), cb=on)
    await nc.flush()
    try:
        await ports.orders.interrupt(capability, "i1", "a1")
        if isinstance(ports, MemoryPorts):
            assert ports.orders.interrupted == [(capability, "i1", "a1")]
        else:
            asked = msgspec.json.decode(await asyncio.wait_for(heard.get(), 5))
            assert asked == {"intent_id": "i1", "attempt_id": "a1"}
    finally:
        await sub.unsubscribe()


@pytest.fixture
async def held(nc: Client) -> AsyncIterator[tuple[str, str]]:
    """A delivery held unacknowledged on a durable: (its reply subject, the durable)."""
    js = nc.jetstream()
    stream = f"PT_TIMERS_{random_id()[:8]}"
    with contextlib.suppress(NotFoundError):
        await js.delete_stream(stream)
    await js.add_stream(StreamConfig(name=stream, subjects=[f"pt.{stream}"]))
    await js.publish(f"pt.{stream}", b"trigger")
    await js.add_consumer(stream, ConsumerConfig(durable_name="timer", ack_policy=AckPolicy.EXPLICIT,
                                                 ack_wait=60))
    sub = await js.pull_subscribe_bind("timer", stream)
    (msg,) = await sub.fetch(1, timeout=5)
    assert msg.reply
    try:
        yield msg.reply, stream
    finally:
        await js.delete_stream(stream)


async def test_a_timer_let_go_is_no_longer_pending(ports: Ports, nc: Client,
                                                   held: tuple[str, str]) -> None:
    reply, stream = held
    await ports.timers.done(reply)
    if isinstance(ports, MemoryPorts):
        assert ports.timers.done_timers == [reply]
        return
    js = nc.jetstream()
    for _ in range(100):  # poll with a deadline: the acknowledgement is a core publish
        if (await js.consumer_info(stream, "timer")).num_ack_pending == 0:
            return
        await asyncio.sleep(0.05)
    pytest.fail("the held trigger is still pending")


async def test_a_proposal_is_put_forward_once_per_message_id(ports: Ports) -> None:
    run_id = f"run-{random_id()}"
    message_id = f"{run_id}.call-2.edit"
    for _ in range(2):
        await ports.proposals.propose("tenant-a", run_id, b'{"call_id": "call-2"}', message_id=message_id)
    if isinstance(ports, MemoryPorts):
        assert ports.proposals.proposed == {message_id: ("tenant-a", run_id, b'{"call_id": "call-2"}')}
        return
    subject = subjects.propose_subject("tenant-a", run_id)
    stream = await ports.js.find_stream_name_by_subject(subject)
    info = await ports.js.stream_info(stream, subjects_filter=subject)
    assert (info.state.subjects or {}).get(subject) == 1
    assert (await ports.js.get_last_msg(stream, subject)).data == b'{"call_id": "call-2"}'
