"""The requests a service answers, and its status answer, on plain subscriptions of its connection.

Each request is answered in a task of its own; what its handler returns is the reply,
and a handler that fails is answered ``service.unavailable`` (``service.answer``), never
left to time out. Every answer of a spec'd request is timed and counted under its
reaction (``metrics.Reaction``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import Error as NatsError
from nats.js import JetStreamContext

from lockgate.contracts import subjects
from lockgate.contracts.status import ConsumerProgress, ProcessStatus
from lockgate.eventstore.partitions import Partitions
from lockgate.runtime import metrics
from lockgate.runtime.consumer import Delivery, connection_of, respond
from lockgate.runtime.durables import Progress
from lockgate.runtime.service import UNAVAILABLE
from lockgate.runtime.topology import EVENTS


def instance_id(service: str) -> str:
    """Identify this process in status answers and logs."""
    return f"{service}@{socket.gethostname()}:{os.getpid()}"


@dataclass
class Answering:
    """A request subject a service answers, and the handler whose bytes are the reply.

    Served on a plain subscription of the service's connection (queue group: the
    service, or none: every replica answers), each request in a task of its own, up to
    ``at_once``; ``meter`` times and counts every answer.
    """

    subject: str
    queue: str
    handler: Callable[[Delivery], Awaitable[bytes]]
    log: logging.Logger
    at_once: int = 64
    meter: metrics.Reaction | None = None
    subscription: Subscription | None = None
    running: set[asyncio.Task[None]] = field(default_factory=set)

    async def start(self, nc: Client) -> None:
        """Subscribe; each request is answered as it comes.

        A request received before the connection was made again is not answered
        (``consumer.respond``); its asker asks again, and the handlers are idempotent.
        """
        limit = asyncio.Semaphore(self.at_once)
        meter = self.meter

        async def reply(msg: Msg, asked_on: int) -> None:
            async with limit:
                started = time.perf_counter()
                try:
                    data = await self.handler(Delivery(msg))
                except Exception:  # noqa: BLE001 - a request is answered, never left to time out
                    self.log.exception("answering %s failed", msg.subject)
                    data = UNAVAILABLE
                if meter is not None:
                    # ``service.answer`` replies to a failure with this very object.
                    meter.replied(failed=data is UNAVAILABLE, seconds=time.perf_counter() - started)
                await respond(nc, msg, data, asked_on, self.log)

        async def received(msg: Msg) -> None:
            task = asyncio.create_task(reply(msg, connection_of(nc)))
            self.running.add(task)
            task.add_done_callback(self.running.discard)

        self.subscription = await nc.subscribe(self.subject, queue=self.queue, cb=received)

    async def stop(self, timeout_s: float) -> None:
        """Take no more requests; let those running be answered (up to ``timeout_s``)."""
        if self.subscription is not None:
            with contextlib.suppress(NatsError):
                await self.subscription.unsubscribe()
            self.subscription = None
        if self.running:
            await asyncio.wait(set(self.running), timeout=timeout_s)


def status_answer(
    service: str, progress: Mapping[str, Progress], ready: Callable[[], JetStreamContext | None],
    partitions: Partitions, metrics_url: Callable[[], str], log: logging.Logger,
) -> Answering:
    """Answer ``lg.status.<service>``: alive, and whether each durable makes progress.

    The answer carries, per durable, what the server holds for it (``pending``: not yet
    delivered) and what this process did (seconds since it last settled a message,
    age of its oldest running handler), so ``lockgate status`` and the supervisor can
    tell a stuck process from an idle one; and where the process serves its metrics.
    ``ready`` is ``None`` until the process consumes and answers (not ready before), then
    the JetStream context the backlogs are read through.
    """
    me = instance_id(service)

    async def status(_: Delivery) -> bytes:
        now = time.monotonic()
        js = ready()
        consumers: dict[str, ConsumerProgress] = {}
        for name, p in progress.items():
            pending = -1
            if js is not None:
                # An events durable is on every partition: its backlog is theirs summed.
                streams = partitions.streams if p.stream == EVENTS else (p.stream,)
                with contextlib.suppress(NatsError, TimeoutError):
                    infos = [await js.consumer_info(stream, name, timeout=0.5)
                             for stream in streams]
                    pending = sum(int(info.num_pending or 0) for info in infos)
            consumers[name] = ConsumerProgress(
                pending=pending,
                idle_s=round(now - p.last_settled, 1),
                busy_s=round(now - min(p.running.values()), 1) if p.running else 0.0,
            )
        return msgspec.json.encode(ProcessStatus(
            service=service, pid=os.getpid(), instance=me, ready=js is not None,
            consumers=consumers, metrics=metrics_url()))

    # No queue group: every replica answers, so the supervisor and ``lockgate status``
    # see each one (``status.gather_status``); a plain request takes the first answer.
    return Answering(subjects.status(service), "", status, log, at_once=1)
