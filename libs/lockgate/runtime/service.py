"""What every service shares: binding to durables, settling messages, load → decide → append.

An entrypoint only decodes, calls its handler and maps the outcome onto JetStream:
success → ack; a retryable error → nak with a delay; anything else → nak with a longer
delay and a logged traceback. A swallowed exception would be a lost message, so the
only message ever terminated is one that can never be handled: a stored event this
code cannot read (it is logged with its subject and counted as ``poison``).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import socket
import time
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import msgspec
from faststream import AckPolicy, FastStream
from faststream.nats import JStream, NatsBroker, NatsMessage, PullSub
from nats.errors import Error as NatsError
from prometheus_client import Counter, Histogram, start_http_server

from lockgate.contracts.messages import Refusal
from lockgate.core.errors import LockgateError
from lockgate.eventstore.base import ConcurrencyConflict, EventStore, RecordedEvent
from lockgate.eventstore.jetstream import recorded_event as stored
from lockgate.eventstore.subjects import NotAnEventSubject
from lockgate.intent.aggregate import EffectIntent, Event
from lockgate.intent.codec import EventDecodeError, decode_event, encode_event, fold
from lockgate.runtime.context import H, Ports, Service
from lockgate.runtime.settings import Settings
from lockgate.runtime.status import ConsumerProgress, ProcessStatus
from lockgate.runtime.topology import consumer_config, durable

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    """The wall clock, in UTC."""
    return datetime.now(UTC)


class Retry(LockgateError):
    """Ask for the message again after ``delay_s`` (a timer, not a failure)."""

    retryable = True

    def __init__(self, delay_s: float, why: str = "retry") -> None:
        super().__init__(why, code="service.retry")
        self.delay_s = delay_s


def backoff_s(deliveries: int, *, base_s: float = 0.2, cap_s: float = 15.0) -> float:
    """Exponential redelivery delay for the ``deliveries``-th delivery."""
    return float(min(cap_s, base_s * 2 ** max(0, deliveries - 1)))


def deliveries(msg: NatsMessage) -> int:
    """How many times JetStream has delivered this message (1 on the first)."""
    try:
        return int(msg.raw_message.metadata.num_delivered)
    except (AttributeError, ValueError):
        return 1


MESSAGES = Counter(
    "lockgate_messages_total",
    "Messages a service's durable consumers settled, by outcome.",
    ["durable", "outcome"],
)
HANDLING = Histogram(
    "lockgate_handler_seconds",
    "Time from delivery to settlement of one message.",
    ["durable"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 2.5),
)


async def settle(
    msg: NatsMessage, work: Awaitable[None], log: logging.Logger, durable: str = ""
) -> None:
    """Run ``work`` and acknowledge ``msg`` according to how it ended."""
    with HANDLING.labels(durable).time():
        outcome = await _settle(msg, work, log)
    MESSAGES.labels(durable, outcome).inc()


async def _settle(msg: NatsMessage, work: Awaitable[None], log: logging.Logger) -> str:
    try:
        await work
    except (EventDecodeError, NotAnEventSubject) as exc:
        log.error("unreadable event %s terminated: %s", msg.raw_message.subject, exc)
        await msg.reject()
        return "poison"
    except Retry as exc:
        await msg.nack(delay=exc.delay_s)
        return "timer"
    except LockgateError as exc:
        delay = backoff_s(deliveries(msg))
        level = logging.INFO if exc.retryable else logging.ERROR
        log.log(level, "%s: %s (redelivery in %.1fs)", exc.code, exc, delay)
        await msg.nack(delay=delay)
        return "retry"
    except Exception:
        delay = backoff_s(deliveries(msg), cap_s=60.0)
        log.exception("unexpected error; message redelivered in %.1fs", delay)
        await msg.nack(delay=delay)
        return "error"
    await msg.ack()
    return "ack"


async def answer(work: Awaitable[bytes], log: logging.Logger, what: str) -> bytes:
    """Run a request/reply handler: an unexpected failure is answered, never left to time out.

    The reply says only that the service could not answer now (``service.unavailable``):
    the caller may ask again; the traceback goes to the service's log.
    """
    try:
        return await work
    except Exception:
        log.exception("%s failed", what)
        return _UNAVAILABLE


_UNAVAILABLE = msgspec.json.encode(Refusal("service.unavailable", "the service could not answer; ask again"))


def recorded_event(msg: NatsMessage) -> RecordedEvent:
    """The stored event a consumer of the events stream was handed."""
    raw = msg.raw_message
    return stored(raw.subject, raw.headers or {}, raw.data, int(raw.metadata.sequence.stream))


Step = Callable[[EffectIntent | None], Awaitable[Sequence[Event]]]


async def decide_and_append(
    store: EventStore, tenant: str, intent_id: str, step: Step, *, conflicts: int = 5
) -> list[Event]:
    """Load the aggregate, let ``step`` decide, append what it decided.

    On a concurrency conflict the whole step runs again on the fresh history; a step
    that finds the aggregate past its own stage returns no events.

    Raises:
        ConcurrencyConflict: still conflicting after ``conflicts`` tries.
    """
    for attempt in range(conflicts):
        history = await store.load(tenant, intent_id)
        intent = fold(decode_event(e) for e in history.events)
        events = list(await step(intent))
        if not events:
            return []
        try:
            await store.append(history, [encode_event(e) for e in events])
            return events
        except ConcurrencyConflict:
            if attempt == conflicts - 1:
                raise
    return []


async def load_intent(store: EventStore, tenant: str, intent_id: str) -> EffectIntent | None:
    """Return the folded aggregate, or ``None`` when it has no events."""
    history = await store.load(tenant, intent_id)
    return fold(decode_event(e) for e in history.events)


def instance_id(service: str) -> str:
    """Identify this process in status answers and logs."""
    return f"{service}@{socket.gethostname()}:{os.getpid()}"


def make_broker(settings: Settings, service: str) -> NatsBroker:
    """A broker for ``service`` (not connected until started)."""
    options = settings.connect_options()
    servers = options.pop("servers")
    broker_log = logging.getLogger(f"lockgate.{service}.broker")
    # FastStream logs every subscriber's shutdown at INFO; warnings and errors stay.
    broker_log.setLevel(logging.WARNING)
    return NatsBroker(
        servers,  # type: ignore[arg-type]
        name=f"lockgate-{service}",
        logger=broker_log,
        log_level=logging.DEBUG,
        graceful_timeout=10.0,
        **options,  # type: ignore[arg-type]
    )


@dataclass
class Progress:
    """What one durable of this process has done lately: the evidence that it makes progress."""

    stream: str
    last_settled: float = field(default_factory=time.monotonic)
    running: dict[int, float] = field(default_factory=dict)
    _ids: itertools.count[int] = field(default_factory=itertools.count)

    def started(self) -> int:
        """A handler started; returns its token for ``finished``."""
        token = next(self._ids)
        self.running[token] = time.monotonic()
        return token

    def finished(self, token: int) -> None:
        """The handler of ``token`` settled its message."""
        self.running.pop(token, None)
        self.last_settled = time.monotonic()


def add_status(
    broker: NatsBroker, service: str, progress: dict[str, Progress],
    ports: Callable[[], Ports | None],
) -> None:
    """Answer ``lg.status.<service>``: alive, and whether each durable makes progress.

    The answer carries, per durable, what the server holds for it (``pending``: not yet
    delivered) and what this process did (seconds since it last settled a message,
    age of its oldest running handler), so ``lockgate status`` and the supervisor can
    tell a stuck process from an idle one.
    """
    me = instance_id(service)

    @broker.subscriber(f"lg.status.{service}", queue=f"status.{service}")
    async def status() -> dict[str, Any]:
        now = time.monotonic()
        connected = ports()
        consumers: dict[str, ConsumerProgress] = {}
        for name, p in progress.items():
            pending = -1
            if connected is not None:
                with contextlib.suppress(NatsError, TimeoutError):
                    info = await connected.js.consumer_info(p.stream, name, timeout=0.5)
                    pending = int(info.num_pending or 0)
            consumers[name] = ConsumerProgress(
                pending=pending,
                idle_s=round(now - p.last_settled, 1),
                busy_s=round(now - min(p.running.values()), 1) if p.running else 0.0,
            )
        answer = ProcessStatus(service=service, pid=os.getpid(), instance=me,
                               ready=connected is not None, consumers=consumers)
        return answer.to_dict()


@dataclass(frozen=True)
class Subscription:
    """One durable consumer of a service and the handler of its messages."""

    durable: str
    handler: Callable[[NatsMessage], Awaitable[None]]
    batch: int = 16


#: Each broker's durables and what they did lately (``lg.status.<service>`` reports it).
_PROGRESS: weakref.WeakKeyDictionary[NatsBroker, dict[str, Progress]] = weakref.WeakKeyDictionary()


def progress_of(broker: NatsBroker) -> dict[str, Progress]:
    """The progress of every durable bound on ``broker``."""
    return _PROGRESS.setdefault(broker, {})


def add_durable(
    broker: NatsBroker, sub: Subscription, log: logging.Logger, *, ack_wait_s: float = 5.0
) -> None:
    """Bind ``sub.handler`` to its durable pull consumer (created by the topology)."""
    d = durable(sub.durable)
    progress = progress_of(broker).setdefault(d.name, Progress(d.stream))

    async def entry(msg: NatsMessage) -> None:
        token = progress.started()
        try:
            await settle(msg, sub.handler(msg), log, d.name)
        finally:
            progress.finished(token)

    broker.subscriber(
        stream=JStream(d.stream, declare=False),
        durable=d.name,
        config=consumer_config(d, ack_wait_s),
        pull_sub=PullSub(batch_size=sub.batch, timeout=1.0),
        ack_policy=AckPolicy.MANUAL,
    )(entry)


def service_app(
    settings: Settings, name: str, build: Callable[[Ports], H]
) -> tuple[FastStream, NatsBroker, Service[H]]:
    """The FastStream app, broker and handlers of one service, with its status answer."""
    broker = make_broker(settings, name)
    app = FastStream(broker, logger=None)
    service = Service(build)

    @app.on_startup
    async def connect() -> None:
        if settings.metrics_port:
            start_http_server(settings.metrics_port, addr=settings.metrics_addr)
        await service.start(broker, settings)

    add_status(broker, name, progress_of(broker), lambda: service.ports)
    return app, broker, service
