"""How a service's durable consumers share their work: a slow message holds up nobody else."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable

import nats
import nats.aio.client
from nats.js.api import AckPolicy, ConsumerConfig

from lockgate.operations.natsserver import NatsServer
from lockgate.runtime.consumer import Delivery, PullConsumer
from lockgate.runtime.host import ServiceHost
from lockgate.runtime.settings import Settings
from lockgate.runtime.specs import NORMALIZATION
from lockgate.runtime.topology import ensure_topology

LOG = logging.getLogger("test")


async def test_a_slow_handler_does_not_hold_up_the_messages_after_it(fresh_server: NatsServer) -> None:
    nc = await nats.connect(fresh_server.url)
    await ensure_topology(nc.jetstream())
    slow_started, fast_done = asyncio.Event(), asyncio.Event()
    app = ServiceHost(Settings(nats_url=fresh_server.url), NORMALIZATION, lambda ports: ports, LOG)

    async def handler(msg: Delivery) -> None:
        if msg.raw_message.data == b"slow":
            slow_started.set()
            # A pull loop that fetches the next batch only when this one is done would
            # keep the fast message waiting here until this gave up.
            await asyncio.wait_for(fast_done.wait(), 20)
        else:
            fast_done.set()

    app.durable(NORMALIZATION.received, handler)
    await app.start()
    try:
        js = nc.jetstream()
        subject = f"lg.evt.tenant-a.{uuid.uuid4().hex}.1.CandidateReceived"
        await js.publish(subject, b"slow")
        await asyncio.wait_for(slow_started.wait(), 20)
        await js.publish(subject.replace(".1.", ".2."), b"fast")
        await asyncio.wait_for(fast_done.wait(), 10)
    finally:
        await app.stop()
        await nc.close()


async def pulling(nc: nats.aio.client.Client, stream: str, handler: Callable[[Delivery], Awaitable[None]],
                  **options: float) -> PullConsumer:
    js = nc.jetstream()
    await js.add_stream(name=stream, subjects=[f"{stream.lower()}.>"])
    await js.add_consumer(stream, ConsumerConfig(durable_name="d", ack_policy=AckPolicy.EXPLICIT,
                                                 ack_wait=5.0))
    consumer = PullConsumer(nc, stream, "d", handler, workers=4, log=LOG, **options)  # type: ignore[arg-type]
    await consumer.start()
    return consumer


async def test_every_message_is_handled_once_with_a_few_requests_not_one_per_message(
    fresh_server: NatsServer,
) -> None:
    nc = await nats.connect(fresh_server.url)
    seen: list[bytes] = []
    done = asyncio.Event()

    async def handler(msg: Delivery) -> None:
        seen.append(msg.body)
        await msg.ack()
        if len(seen) == 200:
            done.set()

    consumer = await pulling(nc, "PROBE", handler)
    try:
        js = nc.jetstream()
        for i in range(200):
            await js.publish(f"probe.{i}", str(i).encode())
        await asyncio.wait_for(done.wait(), 20)
        await asyncio.sleep(0.3)
        assert sorted(seen, key=int) == [str(i).encode() for i in range(200)]
        info = await js.consumer_info("PROBE", "d")
        assert info.num_ack_pending == 0 and info.num_redelivered == 0
        # A request asks for the free workers once half of them are free: at most one
        # per two messages, never one (or two) per message as a fetch loop does.
        assert consumer.requests <= 200 // 2 + 1
    finally:
        await consumer.stop()
        await nc.close()


async def test_a_stored_message_with_a_status_header_is_a_message_not_a_status(
    fresh_server: NatsServer,
) -> None:
    """A publisher may set any header: an empty body with ``Status: 408`` and a pending
    count is still a stored message to handle, not the server ending a request."""
    nc = await nats.connect(fresh_server.url)
    got = asyncio.Event()

    async def handler(msg: Delivery) -> None:
        await msg.ack()
        got.set()

    consumer = await pulling(nc, "FORGED", handler)
    try:
        await nc.jetstream().publish("forged.x", b"", headers={
            "Status": "408", "Nats-Pending-Messages": "4", "Description": "Request Timeout"})
        await asyncio.wait_for(got.wait(), 10)
    finally:
        await consumer.stop()
        await nc.close()


async def test_requests_lost_with_a_restarted_broker_are_made_again(fresh_server: NatsServer) -> None:
    nc = await nats.connect(fresh_server.url, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    got: list[bytes] = []
    arrived = asyncio.Event()

    async def handler(msg: Delivery) -> None:
        got.append(msg.body)
        await msg.ack()
        arrived.set()

    consumer = await pulling(nc, "LOST", handler, heartbeat_s=0.5)
    try:
        fresh_server.stop()
        fresh_server.start()
        await asyncio.sleep(1.0)  # reconnected; the server forgot the waiting requests
        js = nc.jetstream()
        for _ in range(50):
            try:
                await js.publish("lost.after", b"after the restart")
                break
            except Exception:  # noqa: BLE001 - JetStream still recovering
                await asyncio.sleep(0.2)
        await asyncio.wait_for(arrived.wait(), 15)
        assert got == [b"after the restart"]
    finally:
        await consumer.stop()
        await nc.close()
