"""A durable pull consumer that keeps its messages coming: continuous pull, no fetch loop.

A fetch loop asks the server for a batch, waits for it, then asks again: two or three
requests per message at a pipeline's pace (a ``no_wait`` probe, then a waiting pull, for
every message that arrives alone), and a library's per-message machinery around each.
Here a consumer keeps requests outstanding for as many messages as it may run at once
(``workers``) and asks for more as its handlers finish, so at a steady pace a delivery
costs the server one message and the process one acknowledgement, nothing else.

The pull protocol (JetStream's ``CONSUMER.MSG.NEXT``), as every official client's
``consume`` speaks it: a request names a batch, an expiry and an idle heartbeat; the
server delivers up to the batch to the request's inbox and, when the request ends
unfilled, says so with a status (``408`` expired, ``409`` ended by the server) carrying
``Nats-Pending-Messages``, how many of it were not delivered. While a request waits the
server sends a heartbeat (status ``100``) every ``heartbeat_s``; a consumer that hears
nothing for two of them takes its requests for lost (the server restarted, the
connection moved) and asks again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import Error as NatsError


class Delivery:
    """One message a consumer was handed, and how it is settled.

    The surface the service kit uses (``raw_message``, ``body``, ``ack``, ``nack``,
    ``reject``), over the client's own message.
    """

    __slots__ = ("raw_message",)

    def __init__(self, msg: Msg) -> None:
        self.raw_message = msg

    @property
    def body(self) -> bytes:
        """The message's payload, undecoded."""
        return self.raw_message.data

    async def ack(self) -> None:
        """Done with: the server forgets it."""
        await self.raw_message.ack()

    async def nack(self, delay: float | None = None) -> None:
        """Not done: deliver it again (after ``delay`` seconds)."""
        await self.raw_message.nak(delay=delay)

    async def reject(self) -> None:
        """Never deliver it again."""
        await self.raw_message.term()


Handler = Callable[[Delivery], Awaitable[None]]


def connection_of(nc: Client) -> int:
    """Which connection of ``nc`` this is (it counts the times it was made again)."""
    return int(nc.stats["reconnects"])


async def respond(nc: Client, msg: Msg, data: bytes, asked_on: int, log: logging.Logger) -> bool:
    """Answer a request ``msg`` received on connection ``asked_on`` (``connection_of``).

    Not across a reconnection: the broker grants a reply when it delivers the request,
    to that connection, and forgets the grant with it, so the reply would be refused as
    a publish outside the process's role (and logged as one). The asker times out and
    asks again. Returns whether the answer was sent.
    """
    if not msg.reply:
        return False
    if connection_of(nc) != asked_on:
        log.info("not answering %s: asked before the connection was made again", msg.subject)
        return False
    with contextlib.suppress(NatsError):
        await msg.respond(data)
        return True
    return False


class PullConsumer:
    """Continuous pull on one existing durable, up to ``workers`` handlers at once.

    The durable is created by the topology; this only asks for its messages, so the
    process needs nothing beyond its ``CONSUMER.MSG.NEXT`` subject and its inbox.
    """

    def __init__(
        self, nc: Client, stream: str, durable: str, handle: Handler, *, workers: int = 16,
        log: logging.Logger, api_prefix: str = "$JS.API", expires_s: float = 30.0,
        heartbeat_s: float = 5.0,
    ) -> None:
        self._nc = nc
        self._subject = f"{api_prefix}.CONSUMER.MSG.NEXT.{stream}.{durable}"
        self._handle = handle
        self._workers = max(1, workers)
        self._log = log
        self._expires_ns = int(expires_s * 1e9)
        self._heartbeat_s = heartbeat_s
        self.durable = durable
        #: Messages asked for and neither delivered nor given back by the server yet.
        self._requested = 0
        self._running: set[asyncio.Task[None]] = set()
        self._heard = time.monotonic()
        self._inbox = ""
        self._sub: Subscription | None = None
        self._watch: asyncio.Task[None] | None = None
        self._stopping = False
        #: Pull requests sent so far (the path's cost, for tests and benchmarks).
        self.requests = 0

    async def start(self) -> None:
        """Subscribe the inbox and ask for the first messages."""
        self._inbox = self._nc.new_inbox()
        self._sub = await self._nc.subscribe(self._inbox, cb=self._received)
        self._watch = asyncio.create_task(self._watching(), name=f"pull {self.durable}")
        await self._ask()

    async def stop(self, timeout_s: float = 10.0) -> None:
        """Ask for nothing more; let running handlers finish (up to ``timeout_s``)."""
        self._stopping = True
        if self._watch is not None:
            self._watch.cancel()
        if self._sub is not None:
            with contextlib.suppress(NatsError, asyncio.TimeoutError):
                await self._sub.unsubscribe()
        if self._running:
            await asyncio.wait(set(self._running), timeout=timeout_s)

    @property
    def running(self) -> int:
        """Handlers running now."""
        return len(self._running)

    async def _ask(self) -> None:
        """Request messages for every free worker, once at least half are free."""
        free = self._workers - self._requested - len(self._running)
        if self._stopping or free <= 0 or (free < self._workers // 2 and self._requested):
            return
        request = {"batch": free, "expires": self._expires_ns,
                   "idle_heartbeat": int(self._heartbeat_s * 1e9)}
        self._requested += free
        self.requests += 1
        try:
            await self._nc.publish(self._subject, msgspec.json.encode(request), reply=self._inbox)
        except NatsError as exc:
            self._requested -= free  # the watch asks again
            self._log.info("%s: pull request not sent: %s", self.durable, exc)

    async def _received(self, msg: Msg) -> None:
        self._heard = time.monotonic()
        if msg.reply:
            # A stored message (its reply subject is its acknowledgement). Only those
            # have one: a publisher's own "Status" header cannot pass for the server's.
            self._requested = max(0, self._requested - 1)
            task = asyncio.create_task(self._run(Delivery(msg)))
            self._running.add(task)
            return
        headers = msg.headers or {}
        status = headers.get("Status", "")
        if status == "100":
            return  # idle heartbeat: the requests are alive
        left = headers.get("Nats-Pending-Messages", "")
        if left.isdigit():
            self._requested = max(0, self._requested - int(left))
            await self._ask()
        else:
            # Ended without saying how much was left (no responders: the durable is not
            # there, or the server not ready yet): the watch asks again in a moment.
            self._requested = 0
            self._log.warning("%s: pull ended: %s %s", self.durable, status,
                              headers.get("Description", ""))

    async def _run(self, delivery: Delivery) -> None:
        try:
            await self._handle(delivery)
        except Exception:  # noqa: BLE001 - a handler's own failure must not stop the consumer
            self._log.exception("%s: handler failed outside its settlement", self.durable)
        finally:
            task = asyncio.current_task()
            if task is not None:
                self._running.discard(task)
            await self._ask()

    async def _watching(self) -> None:
        """Take requests nothing was heard about for two heartbeats for lost, and ask again."""
        while not self._stopping:
            await asyncio.sleep(1.0)
            if self._requested and time.monotonic() - self._heard > 2 * self._heartbeat_s:
                self._log.info("%s: no heartbeat for %.0fs; asking again", self.durable,
                               time.monotonic() - self._heard)
                self._requested = 0
                self._heard = time.monotonic()
            if not self._requested:
                await self._ask()
