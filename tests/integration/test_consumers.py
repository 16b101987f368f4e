"""How a service's durable consumers share their work: a slow message holds up nobody else."""

from __future__ import annotations

import asyncio
import logging
import uuid

import nats
from faststream.nats import NatsMessage

from lockgate.runtime.natsserver import NatsServer
from lockgate.runtime.service import Subscription, add_durable, service_app
from lockgate.runtime.settings import Settings
from lockgate.runtime.specs import NORMALIZATION
from lockgate.runtime.topology import ensure_topology

LOG = logging.getLogger("test")


async def test_a_slow_handler_does_not_hold_up_the_messages_after_it(fresh_server: NatsServer) -> None:
    nc = await nats.connect(fresh_server.url)
    await ensure_topology(nc.jetstream())
    slow_started, fast_done = asyncio.Event(), asyncio.Event()
    app, broker, service = service_app(Settings(nats_url=fresh_server.url), "probe", lambda ports: ports)

    async def handler(msg: NatsMessage) -> None:
        if msg.raw_message.data == b"slow":
            slow_started.set()
            # FastStream's plain pull subscriber fetches the next batch only when this
            # one is done: the fast message would wait here until this gave up.
            await asyncio.wait_for(fast_done.wait(), 20)
        else:
            fast_done.set()

    add_durable(broker, Subscription(NORMALIZATION.consumer("normalization"), handler), LOG, service)
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
