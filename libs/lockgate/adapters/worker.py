"""The worker: serves adapters' capabilities to Lockgate from one process.

For each capability (``CapabilityWorker``) it

- publishes ``Describe`` into the ``LG_CAPABILITIES`` bucket under the capability name,
  and renews it every ``HEARTBEAT_S`` (catalogues offer only capabilities alive lately);
- answers ``lg.adapter.<capability>.{describe,normalize,facts,query}`` (queue group
  ``adapter.<capability>``, msgspec JSON; a bad request gets a ``Refusal``) and
  ``lg.status.adapter.<capability>``;
- consumes ``lg.exec.<capability>`` from ``LG_EXEC`` through its own durable pull
  consumer and hands each order to the adapter's ``execute`` (``lockgate.adapters.attempts``
  runs an order to its end);
- when the adapter crosses the send boundary, asks the executor to claim it
  (``lockgate.adapters.claims``): the executor checks the order against the intent's
  record and records the crossing, and the adapter writes only once it did;
- reports each attempt transition to ``lg.report.<capability>.<intent_id>`` with
  ``Nats-Msg-Id: <attempt_id>:<stage>:<digest of the report token>`` so a redelivered
  order reports nothing twice and nobody without the order can take the id first,
  echoing the order's ``report_token`` (the executor's proof that it sent the order).

After the send boundary the effect may have happened; from there an unexpected error
reports nothing at all, and the executor's deadline records the silence as
``OutcomeUnknown``. The adapter never writes the event store.

``serve`` runs the workers of several adapters on one connection; ``run_adapter`` is the
entry point of an adapter process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import Error as NatsError
from nats.errors import TimeoutError as NatsTimeout
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError
from nats.js.kv import KeyValue

from lockgate.adapters.api import Adapter, bounded
from lockgate.adapters.attempts import UNCHECKED_DELIVERIES as UNCHECKED_DELIVERIES
from lockgate.adapters.attempts import AttemptRunner
from lockgate.adapters.attempts import Claims as Claims
from lockgate.adapters.attempts import invocations as invocations
from lockgate.adapters.claims import ClaimClient
from lockgate.contracts import subjects
from lockgate.contracts.messages import (
    Describe,
    ExecutionOrder,
    Facts,
    FactsRequest,
    NormalizeRequest,
    QueryRequest,
    Refusal,
)
from lockgate.core.errors import LockgateError
from lockgate.core.ids import is_capability_name, is_subject_token
from lockgate.runtime import metrics
from lockgate.runtime.consumer import Delivery, connection_of, respond
from lockgate.runtime.entry import connect, until_signalled
from lockgate.runtime.metrics import start_endpoint, url_of
from lockgate.runtime.settings import Settings
from lockgate.runtime.settlement import Settlement, settle_as
from lockgate.runtime.topology import CAPABILITIES_BUCKET as CAPABILITIES_BUCKET
from lockgate.runtime.topology import EXEC as EXEC
from lockgate.runtime.topology import consumer_name as consumer_name
from lockgate.runtime.topology import exec_consumer_config
from lockgate.runtime.tracing import Tracing, start_tracing

log = logging.getLogger(__name__)

#: How often an adapter renews its registration (its heartbeat).
HEARTBEAT_S = 5.0
#: Redelivery delay after a transient failure (event store, broker).
RETRY_DELAY_S = 1.0
#: The facts a normalization answers with (``NormalizeRequest.with_facts``) must come
#: within this time and this size (encoded), well inside the normalization's own timeout
#: and an event's room; otherwise it is answered without them and policy asks.
FACTS_WITH_NORMALIZE_S = 0.5
FACTS_WITH_NORMALIZE_MAX_BYTES = 16_384


def queue_group(capability: str) -> str:
    """Return the queue group the adapter's replicas share."""
    return f"adapter.{capability}"


class CapabilityWorker:
    """Serves one adapter's capability on one connection: requests and execution orders."""

    def __init__(
        self,
        adapter: Adapter,
        nc: Client,
        *,
        name: str,
        ack_wait_s: float = 30.0,
        batch: int = 16,
        claims: Claims | None = None,
        js_prefix: str = "$JS.API",
        tracing: Tracing | None = None,
    ) -> None:
        self.adapter = adapter
        self.contract = adapter.contract
        self.capability = adapter.contract.name
        if not is_capability_name(self.capability):
            raise ValueError(f"capability name {self.capability!r} is not a capability name "
                             "(lower-case dotted)")
        self._nc = nc
        # An adapter's account reaches the services' JetStream by import, under its own
        # prefix (lockgate.operations.roles).
        self._js: JetStreamContext = nc.jetstream(prefix=js_prefix)
        self._name = name
        self._ack_wait_s = ack_wait_s
        self._batch = batch
        self._subs: list[Subscription] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._beat: asyncio.Task[None] | None = None
        #: Orders executing in this process, by attempt id (for interruptions).
        self._running: dict[str, ExecutionOrder] = {}
        self._kv: KeyValue | None = None
        self._meter = metrics.Adapter(self.capability)
        # The executor decides each crossing on the record (an adapter may not read the
        # event store); tests may hand in an arbiter of their own. Executions are traced
        # when tracing is on (``lockgate.runtime.tracing``).
        self._attempts = AttemptRunner(
            adapter, self._js, name=name, claims=claims or ClaimClient(nc, self.capability),
            ack_wait_s=ack_wait_s, meter=self._meter, running=self._running, tracing=tracing)
        self._handlers: dict[str, Callable[[bytes], Awaitable[msgspec.Struct]]] = {
            "describe": self._describe,
            "normalize": self._normalize,
            "facts": self._facts,
            "query": self._query,
        }

    # -- start and stop ---------------------------------------------------------------

    async def start(self) -> None:
        """Publish the description, answer requests and create the execution consumer."""
        try:
            kv = await self._js.key_value(CAPABILITIES_BUCKET)
        except NotFoundError as exc:
            raise LockgateError(
                f"bucket {CAPABILITIES_BUCKET} is missing: create the topology first",
                code="adapter.topology-missing",
            ) from exc
        self._kv = kv
        await self._register()
        self._beat = asyncio.create_task(self._heartbeat())
        # Idempotent: the same configuration the administrator may have created already
        # (``ensure_topology(capabilities=...)``, the cluster profile's topology step).
        await self._js.add_consumer(EXEC, exec_consumer_config(self.capability, self._ack_wait_s))
        for operation in self._handlers:
            sub = await self._nc.subscribe(
                subjects.adapter(self.capability, operation),
                queue=queue_group(self.capability),
                cb=self._on_request,
            )
            self._subs.append(sub)
        if self.contract.interruptible:
            # Every worker hears it; only the one running the attempt acts.
            self._subs.append(await self._nc.subscribe(
                subjects.interrupt(self.capability), cb=self._on_interrupt))
        status = await self._nc.subscribe(
            subjects.adapter_status(self.capability),
            queue=f"status.adapter.{self.capability}",
            cb=self._on_status,
        )
        self._subs.append(status)

    async def _on_interrupt(self, msg: Msg) -> None:
        """Pass an interruption on to the adapter if its attempt runs here."""
        try:
            attempt_id = str(json.loads(msg.data)["attempt_id"])
        except (ValueError, KeyError, TypeError):
            log.warning("unreadable interruption on %s", msg.subject)
            return
        order = self._running.get(attempt_id)
        if order is not None:
            await self.adapter.interrupt(order)

    async def _on_status(self, msg: Msg) -> None:
        """Answer ``lockgate status`` and the supervisor: this worker serves its capability."""
        body = {"service": f"adapter.{self.capability}", "pid": os.getpid(),
                "instance": f"{socket.gethostname()}:{os.getpid()}"}
        await msg.respond(json.dumps(body).encode())

    async def run_orders(self, stop: asyncio.Event) -> None:
        """Fetch and handle execution orders until ``stop`` is set."""
        sub = await self._js.pull_subscribe_bind(
            consumer_name(self.capability), stream=EXEC
        )
        stopped = asyncio.create_task(stop.wait())
        try:
            while not stop.is_set():
                fetch = asyncio.create_task(sub.fetch(self._batch, timeout=5.0))
                await asyncio.wait({fetch, stopped}, return_when=asyncio.FIRST_COMPLETED)
                if not fetch.done():
                    # Shutting down while idle. An order delivered in this instant is
                    # not lost: unacknowledged, it is redelivered after ack_wait.
                    fetch.cancel()
                    break
                try:
                    msgs = fetch.result()
                except (TimeoutError, NatsTimeout):
                    # nats-py raises the builtin TimeoutError when a fetch finds nothing.
                    continue
                except NatsError as exc:  # disconnected: the client reconnects
                    log.warning("fetch from %s failed: %r", EXEC, exc)
                    await asyncio.sleep(RETRY_DELAY_S)
                    continue
                await asyncio.gather(*(self._on_order(m) for m in msgs))
        finally:
            stopped.cancel()
            with contextlib.suppress(NatsError):
                await sub.unsubscribe()

    async def _register(self) -> None:
        if self._kv is None:
            raise LockgateError("adapter not started", code="adapter.not-started")
        described = Describe(self.contract, adapter=self._name, alive_at=datetime.now(UTC))
        await self._kv.put(subjects.capability_key(self.capability), msgspec.json.encode(described))

    async def _heartbeat(self) -> None:
        """Renew the registration so catalogues keep offering this capability."""
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            try:
                await self._register()
            except (NatsError, TimeoutError) as exc:  # the broker is away: next beat
                log.warning("heartbeat of %s not written: %r", self.capability, exc)

    async def close(self) -> None:
        """Stop answering requests and wait for the answers in flight."""
        if self._beat is not None:
            self._beat.cancel()
        for sub in self._subs:
            with contextlib.suppress(NatsError):
                await sub.unsubscribe()
        self._subs.clear()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- request/reply ----------------------------------------------------------------

    def _description(self) -> Describe:
        return Describe(self.contract, adapter=self._name)

    async def _on_request(self, msg: Msg) -> None:
        # One task per request: a slow facts lookup does not hold up the next request.
        task = asyncio.create_task(self._answer(msg, connection_of(self._nc)))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer(self, msg: Msg, asked_on: int) -> None:
        operation = msg.subject.rsplit(".", 1)[-1]
        started = time.perf_counter()
        reply: msgspec.Struct
        try:
            reply = await self._handlers[operation](msg.data)
            result = "refused" if isinstance(reply, Refusal) else "ok"
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            reply, result = Refusal("request.malformed", bounded(str(exc))), "malformed"
        except Exception as exc:  # a refusal, never a dead subscription
            log.exception("%s %s failed", self.capability, operation)
            reply, result = Refusal("adapter.error", bounded(f"{type(exc).__name__}: {exc}")), "error"
        if operation in self._handlers:  # only the SDK's verbs: the label stays bounded
            self._meter.request(operation, result, time.perf_counter() - started)
        await respond(self._nc, msg, msgspec.json.encode(reply), asked_on, log)

    async def _describe(self, data: bytes) -> msgspec.Struct:
        return self._description()

    async def _normalize(self, data: bytes) -> msgspec.Struct:
        request = msgspec.json.decode(data, type=NormalizeRequest)
        result = await self.adapter.normalize(request)
        if not request.with_facts or result.reason is not None:
            return result
        # Policy's evidence in the same round trip, if it comes quickly and well formed;
        # otherwise the normalization is answered without it and policy asks ``facts``
        # itself (a slow or broken facts lookup pauses a decision, it never fails a
        # normalization).
        try:
            async with asyncio.timeout(FACTS_WITH_NORMALIZE_S):
                answered = await self.adapter.facts(FactsRequest(
                    tenant=request.tenant, actor=request.actor, resource=dict(result.resource)))
            encoded = msgspec.json.encode(answered)
            if len(encoded) > FACTS_WITH_NORMALIZE_MAX_BYTES:
                raise ValueError(f"{len(encoded)} bytes of facts")
            facts = msgspec.json.decode(encoded, type=Facts)
        except Exception:  # noqa: BLE001 - normalization stands without its facts
            log.warning("%s: facts with the normalization not answered; policy will ask",
                        self.capability, exc_info=True)
            return result
        return msgspec.structs.replace(result, facts=facts)

    async def _facts(self, data: bytes) -> msgspec.Struct:
        return await self.adapter.facts(msgspec.json.decode(data, type=FactsRequest))

    async def _query(self, data: bytes) -> msgspec.Struct:
        return await self.adapter.query(msgspec.json.decode(data, type=QueryRequest))

    # -- execution orders -------------------------------------------------------------

    async def _on_order(self, msg: Msg) -> None:
        """Handle one order; whatever happens, the message is acked, naked or termed."""
        try:
            settle = await self._handle_order(msg)
        except Exception:  # a swallowed error would be a lost message
            log.exception("order on %s could not be handled; retrying", msg.subject)
            settle = Settlement.NAK
        self._meter.order(settle.value)
        with contextlib.suppress(NatsError):
            await settle_as(Delivery(msg), settle, delay_s=RETRY_DELAY_S)

    async def _handle_order(self, msg: Msg) -> Settlement:
        try:
            order = msgspec.json.decode(msg.data, type=ExecutionOrder)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            log.error("malformed order on %s, terminated: %s", msg.subject, bounded(str(exc)))
            return Settlement.TERM
        if not (is_subject_token(order.tenant) and is_subject_token(order.intent_id)):
            log.error("order with invalid tenant or intent id on %s, terminated", msg.subject)
            return Settlement.TERM
        if order.capability != self.capability:
            log.error("order for %r on %s, terminated", order.capability[:64], msg.subject)
            return Settlement.TERM
        # No read of the record here: the executor checks the order against it when the
        # adapter crosses its send boundary, and nothing before the boundary has an effect.
        # A redelivered order goes the same way: if an earlier delivery crossed, its claim
        # is on the record and this one is refused (or, where the remote deduplicates by
        # the intent key, may write again).
        return await self._attempts.execute(order, msg)


# -- entry points -----------------------------------------------------------------------


async def serve(
    adapters: Sequence[Adapter],
    nc: Client,
    *,
    name: str,
    stop: asyncio.Event,
    ack_wait_s: float = 30.0,
    ready: asyncio.Event | None = None,
    js_prefix: str = "$JS.API",
    metrics_url: str = "",
    tracing: Tracing | None = None,
) -> None:
    """Serve ``adapters`` on ``nc`` until ``stop`` is set.

    Args:
        adapters: one per capability; names must be distinct.
        nc: a connected client; the topology (``ensure_topology``) must exist.
        name: this adapter process's name, published in ``Describe``.
        stop: set it to shut down after the orders in hand are settled.
        ack_wait_s: how long an order may stay unacknowledged before redelivery.
        ready: set once every capability is described, subscribed and consuming.
        js_prefix: the JetStream API prefix of ``nc``'s account (its credentials say).
        metrics_url: where this process serves its metrics (its status answer says so).
        tracing: spans of executions, when tracing is on.

    Raises:
        ValueError: duplicate or malformed capability names.
        LockgateError: the topology is missing.
    """
    names = [a.contract.name for a in adapters]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate capabilities: {names}")
    workers = [
        CapabilityWorker(a, nc, name=name, ack_wait_s=ack_wait_s, js_prefix=js_prefix,
                         tracing=tracing)
        for a in adapters
    ]
    consumers: list[asyncio.Task[None]] = []
    serving: list[bool] = []

    async def status(msg: Msg) -> None:
        # Ready once every capability is registered, answered and consumed.
        body = {"service": f"adapter.{name}", "pid": os.getpid(), "capabilities": names,
                "ready": bool(serving), "metrics": metrics_url}
        await msg.respond(json.dumps(body).encode())

    # The process answers for itself (the supervisor's view), each capability for itself.
    process_status = await nc.subscribe(subjects.adapter_status(name), cb=status)
    try:
        for worker in workers:
            await worker.start()
        consumers = [asyncio.create_task(w.run_orders(stop)) for w in workers]
        serving.append(True)
        if ready is not None:
            ready.set()
        log.info("adapter %s serving %s", name, ", ".join(names))
        await asyncio.gather(*consumers)
    finally:
        # Only on an error does a consumer still run here; its orders are redelivered.
        with contextlib.suppress(Exception):
            await process_status.unsubscribe()
        for task in consumers:
            task.cancel()
        await asyncio.gather(*consumers, return_exceptions=True)
        for worker in workers:
            await worker.close()


async def run_adapter(
    adapters: Sequence[Adapter], settings: Settings, *, name: str | None = None
) -> None:
    """Connect with ``settings`` and serve ``adapters`` until SIGINT or SIGTERM.

    Settings left unset are found the way the CLI finds them (``Settings.located``): the
    broker of the system ``lockgate run`` runs, and, for an adapter ``name``d, its
    credentials file under the deployment's ``credentials/``.

    The process serves its metrics (``lockgate.runtime.metrics``) and, when an endpoint
    is configured, traces its executions (``lockgate.runtime.tracing``). It stops within
    seconds of a signal whatever it is doing (``lockgate.runtime.entry.until_signalled``),
    ending the whole process if its shutdown hangs: it is a process's entry point (a
    program embedding workers calls ``serve``).

    Raises:
        ConfigurationError: the broker refused the credentials, or there are none to read.
    """
    process = name or f"{socket.gethostname()}-{os.getpid()}"
    # Outside ``lockgate run``: the broker it runs and this adapter's user, found as the CLI finds them.
    settings = settings.located(name)
    await until_signalled(lambda stop: _serve_process(adapters, settings, process, stop),
                          name=f"adapter.{process}")


async def _serve_process(
    adapters: Sequence[Adapter], settings: Settings, process: str, stop: asyncio.Event
) -> None:
    endpoint = start_endpoint(settings)
    tracing = start_tracing(settings, f"adapter.{process}")
    try:
        # Named for the broker's connection list (and the bench's count of each process).
        nc = await connect(settings, name="adapter." + "+".join(sorted(a.contract.name for a in adapters)),
                           stop=stop)
        try:
            await serve(
                adapters,
                nc,
                name=process,
                stop=stop,
                ack_wait_s=settings.ack_wait_s,
                js_prefix=settings.js_prefix,
                metrics_url=url_of(endpoint),
                tracing=tracing,
            )
        finally:
            await nc.drain()
    finally:
        if endpoint is not None:
            await asyncio.to_thread(endpoint.stop)
        if tracing is not None:
            await asyncio.to_thread(tracing.shutdown)
