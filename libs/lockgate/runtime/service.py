"""What every service shares: binding to durables, settling messages, load → decide → append.

An entrypoint only decodes, calls its handler and maps the outcome onto JetStream:
success → ack; a retryable error → nak with a delay; anything else → nak with a longer
delay and a logged traceback. A swallowed exception would be a lost message, so the
only message ever terminated is one that can never be handled: a stored event this
code cannot read (it is logged with its subject and counted as ``poison``).
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from faststream import AckPolicy, FastStream
from faststream.nats import JStream, NatsBroker, NatsMessage, PullSub
from prometheus_client import Counter, Histogram, start_http_server

from lockgate.core.errors import LockgateError
from lockgate.eventstore.base import ConcurrencyConflict, EventStore, RecordedEvent
from lockgate.eventstore.jetstream import recorded_event as stored
from lockgate.eventstore.subjects import NotAnEventSubject
from lockgate.intent.aggregate import EffectIntent, Event
from lockgate.intent.codec import EventDecodeError, decode_event, encode_event, fold
from lockgate.runtime.context import H, Ports, Service
from lockgate.runtime.settings import Settings
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


def add_status(broker: NatsBroker, service: str) -> None:
    """Answer ``lg.status.<service>`` so the supervisor and ``lockgate status`` see us."""
    me = instance_id(service)

    @broker.subscriber(f"lg.status.{service}", queue=f"status.{service}", decoder=raw_body)
    async def status() -> dict[str, Any]:
        return {"service": service, "pid": os.getpid(), "instance": me}


@dataclass(frozen=True)
class Subscription:
    """One durable consumer of a service and the handler of its messages."""

    durable: str
    handler: Callable[[NatsMessage], Awaitable[None]]
    batch: int = 16


async def raw_body(msg: NatsMessage) -> bytes:
    """FastStream decoder that leaves a message's body as bytes.

    FastStream's default runs ``json.loads`` on every body without a content type before
    the handler is called: a body nested a few thousand levels deep raises
    ``RecursionError`` there, outside any handler, and the message is never settled.
    Handlers decode what they read themselves (msgspec, bounded), so nothing is lost.
    """
    return msg.body


def add_durable(
    broker: NatsBroker, sub: Subscription, log: logging.Logger, *, ack_wait_s: float = 5.0
) -> None:
    """Bind ``sub.handler`` to its durable pull consumer (created by the topology)."""
    d = durable(sub.durable)

    async def entry(msg: NatsMessage) -> None:
        await settle(msg, sub.handler(msg), log, d.name)

    broker.subscriber(
        stream=JStream(d.stream, declare=False),
        durable=d.name,
        config=consumer_config(d, ack_wait_s),
        pull_sub=PullSub(batch_size=sub.batch, timeout=1.0),
        ack_policy=AckPolicy.MANUAL,
        decoder=raw_body,
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

    add_status(broker, name)
    return app, broker, service
