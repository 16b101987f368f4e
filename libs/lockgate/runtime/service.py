"""What every service shares: binding to durables, settling messages, load → decide → append.

An entrypoint only decodes, calls its handler and maps the outcome onto JetStream:
success → ack; ``Retry`` (a timer) → nak with its delay; an error → nak with a backoff
and a logged traceback, until the message has failed too often, or for too long: then
it is given up *on the record* and acknowledged (invariant 7, docs/design.md). The rule is the
same for every consumer and lives here (``Bounds``, ``settle``):

- in the process only failures count, never deliveries a handler asked for (timers);
- a transient failure (the event store, an adapter, the broker not answering) may go
  on for ``transient_for_s``; any other failure counts toward ``permanent_failures``;
- every delivery counts on the server: each durable has a finite ``max_deliver``
  (``spec.max_deliver_for`` its consumer's ``deliveries``, timers included), and from
  ``spec.give_up_from`` of it on, read from the message's own delivery count, the
  message is given up without running the handler. A handler that takes its process
  down with it is never seen failing, and a process keeps no count across its deaths:
  the server's count is the evidence;
- giving up records what the consumer's stream calls for (``abandon_event`` for events,
  ``abandon_report`` for adapters' reports, intake's own refusal for candidates). Only
  if even that cannot be recorded is the message terminated, and said so loudly.

A swallowed exception would be a lost message. A stored event this code cannot read
(poison) is recorded as given up on the intent its subject names, at once; only one
whose subject names none is terminated, logged with its subject and counted as ``poison``.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import logging
import os
import socket
import time
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
from faststream import FastStream
from faststream.nats import NatsBroker, NatsMessage, NatsUserPassword
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription as NatsSubscription
from nats.errors import Error as NatsError

from lockgate.contracts import subjects
from lockgate.contracts.messages import AttemptReport, Refusal
from lockgate.core.errors import LockgateError
from lockgate.core.ids import is_subject_token
from lockgate.core.text import safe_text
from lockgate.eventstore.base import (
    RecordedEvent,
)
from lockgate.eventstore.jetstream import recorded_event as stored
from lockgate.eventstore.partitions import SINGLE, Partitions
from lockgate.eventstore.subjects import NotAnEventSubject, parse_event_subject
from lockgate.intent.codec import EventDecodeError
from lockgate.operations.status import ConsumerProgress, ProcessStatus
from lockgate.runtime import metrics
from lockgate.runtime.consumer import Delivery, PullConsumer, connection_of, respond
from lockgate.runtime.context import H, Ports, Service
from lockgate.runtime.crashes import CrashJournal
from lockgate.runtime.intents import Clock, record_abandonment
from lockgate.runtime.metrics import Endpoint, start_endpoint, url_of
from lockgate.runtime.settings import Settings
from lockgate.runtime.settlement import Abandonment
from lockgate.runtime.settlement import backoff_s as backoff_s
from lockgate.runtime.settlement import is_transient as is_transient
from lockgate.runtime.spec import Consumer, ServiceSpec, give_up_from
from lockgate.runtime.topology import CANDIDATES, EVENTS, REPORTS, Durable, durable
from lockgate.runtime.tracing import Tracing, start_tracing


def utc_now() -> datetime:
    """The wall clock, in UTC."""
    return datetime.now(UTC)


class Retry(LockgateError):
    """Ask for the message again after ``delay_s`` (a timer, not a failure)."""

    retryable = True

    def __init__(self, delay_s: float, why: str = "retry") -> None:
        super().__init__(why, code="service.retry")
        self.delay_s = delay_s


def deliveries(msg: Delivery) -> int:
    """How many times JetStream has delivered this message (1 on the first)."""
    try:
        return int(msg.raw_message.metadata.num_delivered)
    except (AttributeError, ValueError):
        return 1


@dataclass(frozen=True)
class Bounds:
    """When a consumer stops trying a message and records that it gave up."""

    permanent_failures: int = 5
    """Failures that are not transient, in a row, before giving up (about 6 s of backoff)."""
    transient_for_s: float = 600.0
    """How long transient failures (store, adapter or broker unavailable) may go on:
    generous, so that a broker restart or a redeploy never gives anything up."""
    deliveries: int | None = 100
    """The delivery (of any kind, timers too) from which the message is given up without
    running the handler: the durable's ``spec.give_up_from``; ``None``: never."""
    crashes: int = 3
    """Redeliveries in a row that took their process down (``runtime.crashes``) before the
    message is given up without running the handler again."""
    handler_timeout_s: float = 60.0
    """How long one handling may run before it counts as a failure (a hang): generous beside
    every adapter request's and store call's own timeout. Without it a handler that never
    returns is handed out again every ack wait, each copy hanging beside the last."""


#: The rule for a consumer without timers (its durable's bound replaces ``deliveries``).
BOUNDS = Bounds()


Abandon = Callable[[Delivery, Abandonment], Awaitable[None]]
"""Records that a consumer gave a message up; raises ``Unaddressed`` when the message
names no intent to record it on."""


class HandlerHung(LockgateError):
    """A handler ran past ``Bounds.handler_timeout_s`` and was cancelled: a failure like any other."""

    retryable = False

    def __init__(self, timeout_s: float) -> None:
        super().__init__(f"the handler ran {timeout_s:g}s without finishing; cancelled",
                         code="service.handler-hung")


class Unaddressed(LockgateError):
    """A message given up names no intent its giving up could be recorded on."""

    retryable = False

    def __init__(self, subject: str, why: str) -> None:
        super().__init__(f"{subject}: {why}", code="service.unaddressed")
        self.subject = subject


class Failures:
    """Failures of the messages one consumer is working on, in this process.

    Bounded: the oldest entries go first. Kept per process on purpose: the count is a
    bound, not a record (each replica gives up after its own ``permanent_failures``), and
    it costs nothing on the path of messages that succeed.
    """

    def __init__(self, capacity: int = 10_000, clock: Callable[[], float] = time.monotonic) -> None:
        self._capacity = capacity
        self._clock = clock
        self._seen: OrderedDict[int, tuple[int, float]] = OrderedDict()

    def failed(self, key: int, *, transient: bool) -> tuple[int, float]:
        """Count one failure; return (permanent failures so far, seconds since the first)."""
        permanent, since = self._seen.pop(key, (0, self._clock()))
        permanent = 0 if transient else permanent + 1
        self._seen[key] = (permanent, since)
        if len(self._seen) > self._capacity:
            self._seen.popitem(last=False)
        return permanent, self._clock() - since

    def forget(self, key: int) -> None:
        """The message was settled."""
        self._seen.pop(key, None)


def give_up_now(bounds: Bounds, *, permanent: int, failing_for_s: float) -> str | None:
    """Why to give a failing message up now, or ``None`` to try again."""
    if permanent >= bounds.permanent_failures:
        return f"failed {permanent} times"
    if failing_for_s >= bounds.transient_for_s:
        return f"failing for {failing_for_s:.0f}s"
    return None


@dataclass
class Guard:
    """One consumer's side of the rule: its bounds, its failures, what giving up records."""

    durable: str
    bounds: Bounds
    abandon: Abandon
    failures: Failures
    #: Where redeliveries in flight are written down, once the process consumes.
    crashes: CrashJournal | None = None


async def settle(
    msg: Delivery, work: Awaitable[None], log: logging.Logger, guard: Guard | None = None,
    meter: metrics.Reaction | None = None,
) -> str:
    """Run ``work`` and acknowledge ``msg`` according to how it ended; return how it ended.

    The outcome is one of ``metrics.SETTLEMENT_OF`` (``ack``, ``timer``, ``retry``,
    ``error``, ``abandoned``, ``poison``, ``lost``); ``meter`` counts it and times the whole.
    Without a ``guard`` nothing is ever given up (tests of the mapping alone).
    """
    if meter is None:
        return await _settle(msg, work, log, guard)
    started = time.perf_counter()
    outcome = await _settle(msg, work, log, guard)
    meter.settled(outcome, time.perf_counter() - started)
    return outcome


def _sequence(msg: Delivery) -> int:
    try:
        return int(msg.raw_message.metadata.sequence.stream)
    except (AttributeError, ValueError):
        return 0


def _delivery_key(msg: Delivery) -> str:
    """The message's place on its stream (partitions share durable names, not sequences)."""
    try:
        metadata = msg.raw_message.metadata
        return f"{metadata.stream}/{int(metadata.sequence.stream)}"
    except (AttributeError, ValueError):
        return ""


async def _settle(msg: Delivery, work: Awaitable[None], log: logging.Logger,
                  guard: Guard | None) -> str:
    n = deliveries(msg)
    if guard is not None and guard.bounds.deliveries is not None and n >= guard.bounds.deliveries:
        # Before the handler: one that took its process down on every delivery so far
        # would take this one down too, and the record would never be written.
        if inspect.iscoroutine(work):
            work.close()
        return await _give_up(msg, guard, log, f"delivered {n} times without being settled", n)
    journal = guard.crashes if guard is not None and n > 1 else None
    key = _delivery_key(msg) if journal is not None else ""
    if journal is None or guard is None or not key:
        return await _handle(msg, work, log, guard, n)
    taken = journal.begin(key)
    try:
        if taken >= guard.bounds.crashes:
            if inspect.iscoroutine(work):
                work.close()
            return await _give_up(msg, guard, log, f"took its process down {taken} times in a row", n)
        return await _handle(msg, work, log, guard, n)
    finally:
        journal.end(key)


async def _handle(msg: Delivery, work: Awaitable[None], log: logging.Logger,
                  guard: Guard | None, n: int) -> str:
    """Run the handler within its time bound and settle ``msg`` by how it ended."""
    timeout_s = (guard.bounds if guard is not None else BOUNDS).handler_timeout_s
    bound = asyncio.timeout(timeout_s)
    try:
        async with bound:
            await work
    except (EventDecodeError, NotAnEventSubject) as exc:
        if guard is not None:
            # It can never be handled: the intent it is about is told so now.
            return await _give_up(msg, guard, log, f"unreadable event: {type(exc).__name__}: {exc}", n)
        log.error("unreadable event %s terminated: %s", msg.raw_message.subject, exc)
        await msg.reject()
        return "poison"
    except Unaddressed as exc:
        # Never handled, and no intent to say so on: the log and the count are the record.
        log.error("%s terminated: %s", msg.raw_message.subject, exc)
        if guard is not None:
            guard.failures.forget(_sequence(msg))
        await msg.reject()
        return "poison"
    except Retry as exc:
        await msg.nack(delay=exc.delay_s)
        return "timer"
    except Exception as raised:
        # The bound's own expiry, not a timeout the handler met inside (those are transient).
        failure: Exception = HandlerHung(timeout_s) if isinstance(raised, TimeoutError) and bound.expired() else raised
        transient = is_transient(failure)
        if guard is not None:
            permanent, since = guard.failures.failed(_sequence(msg), transient=transient)
            why = give_up_now(guard.bounds, permanent=permanent, failing_for_s=since)
            if why is not None:
                cause = f"{why}; last: {type(failure).__name__}: {failure}"
                return await _give_up(msg, guard, log, cause, n)
        if isinstance(failure, LockgateError):
            delay = backoff_s(n)
            level = logging.INFO if failure.retryable else logging.ERROR
            log.log(level, "%s: %s (redelivery in %.1fs)", failure.code, failure, delay)
        else:
            delay = backoff_s(n, cap_s=15.0 if transient else 60.0)
            log.log(logging.INFO if transient else logging.ERROR,
                    "%s: %s (redelivery in %.1fs)", type(failure).__name__, failure, delay,
                    exc_info=not transient)
        await msg.nack(delay=delay)
        return "retry" if transient else "error"
    if guard is not None:
        guard.failures.forget(_sequence(msg))
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


async def _give_up(msg: Delivery, guard: Guard, log: logging.Logger, cause: str, n: int) -> str:
    """Record that ``guard``'s consumer gives ``msg`` up, then acknowledge it."""
    why = Abandonment(guard.durable, safe_text(cause, 300), n)
    try:
        await guard.abandon(msg, why)
    except Unaddressed as exc:
        # No record can say it: the log and the ``poison`` count are all there is.
        log.error("%s gave up %s, which names no intent (%s); terminated: %s", guard.durable,
                  msg.raw_message.subject, exc, why.cause)
        guard.failures.forget(_sequence(msg))
        await msg.reject()
        return "poison"
    except Exception as exc:
        if is_transient(exc):
            # The record must come first; it will, once the store answers again.
            await msg.nack(delay=backoff_s(n))
            return "retry"
        log.exception("%s could not record giving up %s (%s); terminated", guard.durable,
                      msg.raw_message.subject, why.cause)
        await msg.reject()
        return "lost"
    log.error("%s gave up %s after %d deliveries: %s", guard.durable, msg.raw_message.subject, n,
              why.cause)
    guard.failures.forget(_sequence(msg))
    await msg.ack()
    return "abandoned"


def recorded_event(msg: Delivery) -> RecordedEvent:
    """The stored event a consumer of the events stream was handed."""
    raw = msg.raw_message
    return stored(raw.subject, raw.headers or {}, raw.data, int(raw.metadata.sequence.stream))



def abandon_event(ports: Callable[[], Ports], clock: Clock = utc_now) -> Abandon:
    """Giving up an event: ``ProcessingAbandoned`` on its intent.

    A ``ProcessingAbandoned`` that its own consumers cannot handle is not answered with
    another one (that would never end): it is already the record.
    """

    async def abandon(msg: Delivery, why: Abandonment) -> None:
        try:
            recorded = recorded_event(msg)
        except NotAnEventSubject as exc:
            raise Unaddressed(msg.raw_message.subject, "not an event's subject") from exc
        if recorded.event_type == "ProcessingAbandoned":
            return
        trigger = recorded.event_id or f"seq-{recorded.sequence}"
        await record_abandonment(ports().store, recorded.tenant, recorded.intent_id, why, trigger, clock)

    return abandon


def abandon_report(ports: Callable[[], Ports], clock: Clock = utc_now) -> Abandon:
    """Giving up an adapter's report: ``ProcessingAbandoned`` on the intent it reports on.

    The attempt's outcome is then unknown to the record, so an intent that may have been
    sent waits for an operator. A report too broken to name its intent in its body is put
    on no record (``Unaddressed``: logged, counted as poison); the attempt's deadline turns
    its silence into ``OutcomeUnknown``.
    """

    async def abandon(msg: Delivery, why: Abandonment) -> None:
        subject = msg.raw_message.subject
        try:
            report = msgspec.json.decode(msg.raw_message.data, type=AttemptReport)
        except msgspec.MsgspecError as exc:
            raise Unaddressed(subject, "an unreadable report") from exc
        if not (is_subject_token(report.tenant) and is_subject_token(report.intent_id)):
            raise Unaddressed(subject, "a report whose body names no intent")
        trigger = safe_text(f"report-{report.attempt_id}-{report.stage}", 128)
        await record_abandonment(ports().store, report.tenant, report.intent_id, why, trigger, clock)

    return abandon


def instance_id(service: str) -> str:
    """Identify this process in status answers and logs."""
    return f"{service}@{socket.gethostname()}:{os.getpid()}"


def make_broker(settings: Settings, service: str) -> NatsBroker:
    """A broker for ``service`` (not connected until started)."""
    options = settings.connect_options()
    servers = options.pop("servers")
    user, password = options.pop("user", None), options.pop("password", None)
    if isinstance(user, str):
        # FastStream takes a user and password as its security option only.
        options["security"] = NatsUserPassword(username=user, password=str(password or ""))
    broker_log = logging.getLogger(f"lockgate.{service}.broker")
    # FastStream logs every subscriber's shutdown at INFO; warnings and errors stay.
    broker_log.setLevel(logging.WARNING)
    # apply_types=False: no FastDepends. With it, every delivery resolved the handler's
    # ``msg: NatsMessage`` (an Annotated Context) through a worker thread (FastDepends'
    # run_in_threadpool for a sync resolver), the largest single cost FastStream added.
    # Without it a handler is called with the decoded body, and as_message makes that
    # the message itself, so handlers keep their one ``msg`` parameter.
    return NatsBroker(
        servers,  # type: ignore[arg-type]
        name=f"lockgate-{service}",
        logger=broker_log,
        log_level=logging.DEBUG,
        graceful_timeout=10.0,
        apply_types=False,
        decoder=as_message,
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
    tell a stuck process from an idle one; and where the process serves its metrics.
    """
    me = instance_id(service)
    watch = instruments(broker)

    # No queue group: every replica answers, so the supervisor and ``lockgate status``
    # see each one (``status.gather_status``); a plain request takes the first answer.
    @broker.subscriber(subjects.status(service))
    async def status(msg: NatsMessage) -> dict[str, Any]:
        now = time.monotonic()
        connected = ports()
        consumers: dict[str, ConsumerProgress] = {}
        for name, p in progress.items():
            pending = -1
            if connected is not None:
                # An events durable is on every partition: its backlog is theirs summed.
                streams = connected.store.partitions.streams if p.stream == EVENTS else (p.stream,)
                with contextlib.suppress(NatsError, TimeoutError):
                    infos = [await connected.js.consumer_info(stream, name, timeout=0.5)
                             for stream in streams]
                    pending = sum(int(info.num_pending or 0) for info in infos)
            consumers[name] = ConsumerProgress(
                pending=pending,
                idle_s=round(now - p.last_settled, 1),
                busy_s=round(now - min(p.running.values()), 1) if p.running else 0.0,
            )
        answer = ProcessStatus(service=service, pid=os.getpid(), instance=me,
                               ready=connected is not None, consumers=consumers,
                               metrics=url_of(watch.endpoint))
        return answer.to_dict()


#: Which candidate a message is about (its intent id), for its span; ``None``: not known.
TraceKey = Callable[[Delivery], str | None]


def event_intent(msg: Delivery) -> str | None:
    """The intent a stored event belongs to (from its subject)."""
    try:
        return parse_event_subject(msg.raw_message.subject).intent_id
    except NotAnEventSubject:
        return None


def report_intent(msg: Delivery) -> str | None:
    """The intent an adapter's report names in its subject."""
    address = subjects.parse_report_subject(msg.raw_message.subject)
    return address.intent_id if address is not None else None


#: How a durable's messages name their candidate, by stream (the candidates' consumer
#: says for itself: the intent id is derived from the candidate's body).
TRACE_KEYS: dict[str, TraceKey] = {EVENTS: event_intent, REPORTS: report_intent}


@dataclass(frozen=True)
class Subscription:
    """One durable consumer of a service (from its spec) and the handler of its messages.

    ``abandon`` records that the consumer gave a message up; by default what the
    durable's stream calls for (``abandon_event``, ``abandon_report``). The candidates'
    consumer must say (intake's own refusal). ``trace`` names the candidate a message is
    about, for its span when tracing is on; by default what its stream's subjects say
    (``TRACE_KEYS``).
    """

    consumer: Consumer
    handler: Callable[[Delivery], Awaitable[None]]
    abandon: Abandon | None = None
    trace: TraceKey | None = None


async def as_message(msg: NatsMessage) -> NatsMessage:
    """FastStream decoder that hands every handler the message itself, body undecoded.

    FastStream's default runs ``json.loads`` on every body without a content type before
    the handler is called: a body nested a few thousand levels deep raises
    ``RecursionError`` there, outside any handler, and the message is never settled.
    Handlers decode what they read themselves (msgspec, bounded), so nothing is lost,
    and a stdlib parse of every event every consumer receives is saved.
    """
    return msg


#: Each broker's durables and what they did lately (``lg.status.<service>`` reports it).
_PROGRESS: weakref.WeakKeyDictionary[NatsBroker, dict[str, Progress]] = weakref.WeakKeyDictionary()


def progress_of(broker: NatsBroker) -> dict[str, Progress]:
    """The progress of every durable bound on ``broker``."""
    return _PROGRESS.setdefault(broker, {})


@dataclass
class Instruments:
    """How a service process observes itself: its name, its metrics endpoint, its tracing.

    The endpoint and the tracing exist only while the app runs (``service_app`` starts and
    stops them); handlers read them when a message comes.
    """

    service: str
    endpoint: Endpoint | None = None
    tracing: Tracing | None = None


#: Each broker's instruments (``service_app`` names them after the service).
_INSTRUMENTS: weakref.WeakKeyDictionary[NatsBroker, Instruments] = weakref.WeakKeyDictionary()


def instruments(broker: NatsBroker) -> Instruments:
    """The instruments of the service ``broker`` belongs to."""
    return _INSTRUMENTS.setdefault(broker, Instruments(service=""))


def add_durable(
    broker: NatsBroker, sub: Subscription, log: logging.Logger, service: Service[Any],
) -> None:
    """Bind ``sub.handler`` to its durable pull consumer (created by the topology).

    The consumer starts pulling once the service connected (``start_consumers``). Every
    delivery is timed and counted under the service's name and the consumer's reaction
    (``metrics.Reaction``), and traced when tracing is on.

    Raises:
        ValueError: a candidates' consumer without its own ``abandon``.
    """
    d = durable(sub.consumer.name)
    abandon = sub.abandon
    if abandon is None:
        if d.stream == EVENTS:
            abandon = abandon_event(lambda: service.ports)
        elif d.stream == REPORTS:
            abandon = abandon_report(lambda: service.ports)
        else:
            raise ValueError(f"{d.name} on {d.stream} must say what giving a message up records")
    # The declared bound until the server's own is read (``start_consumers``).
    guard = Guard(d.name, replace(BOUNDS, deliveries=give_up_from(d.max_deliver)), abandon, Failures())

    progress = progress_of(broker).setdefault(d.name, Progress(d.stream))
    watch = instruments(broker)
    reaction = sub.consumer.reaction
    meter = metrics.Reaction(watch.service, reaction)
    trace_key = sub.trace or TRACE_KEYS.get(d.stream)
    span_name = f"{watch.service} {reaction}"
    # The candidate's first step is the root of its trace; every later step hangs under it.
    starts_trace = d.stream == CANDIDATES

    async def traced(msg: Delivery, tracing: Tracing) -> None:
        attributes: dict[str, str | int] = {
            "lockgate.service": watch.service, "lockgate.reaction": reaction,
            "lockgate.durable": d.name, "messaging.system": "nats",
            "messaging.destination.name": msg.raw_message.subject,
            "lockgate.deliveries": deliveries(msg),
        }
        intent_id = trace_key(msg) if trace_key is not None else None
        with tracing.span(span_name, intent_id, root=starts_trace, attributes=attributes) as span:
            tracing.outcome(span, await settle(msg, sub.handler(msg), log, guard, meter))

    async def entry(msg: Delivery) -> None:
        token = progress.started()
        try:
            tracing = watch.tracing
            if tracing is None:
                await settle(msg, sub.handler(msg), log, guard, meter)
            else:
                await traced(msg, tracing)
        finally:
            progress.finished(token)

    # Not a FastStream subscriber: its pull subscribers fetch (a probe and a waiting
    # pull per message at a pipeline's pace) and wrap every delivery in middlewares and
    # a task group; a continuous pull costs a delivery one message and one ack.
    _bindings(broker).append(Binding(d, entry, sub.consumer.workers, log, guard))


@dataclass
class Binding:
    """A durable of a service and the entry point its messages go to, once connected."""

    durable: Durable
    entry: Callable[[Delivery], Awaitable[None]]
    workers: int
    log: logging.Logger
    #: When its messages are given up; its delivery bound is the server's, once connected.
    guard: Guard | None = None
    #: Pulling once connected: one per partition for a durable of the events stream.
    consumers: list[PullConsumer] = field(default_factory=list)


#: Each broker's durables, started once its service connected.
_BINDINGS: weakref.WeakKeyDictionary[NatsBroker, list[Binding]] = weakref.WeakKeyDictionary()


def _bindings(broker: NatsBroker) -> list[Binding]:
    return _BINDINGS.setdefault(broker, [])


def bindings(broker: NatsBroker) -> tuple[Binding, ...]:
    """The durables bound on ``broker`` (what its app will consume once connected)."""
    return tuple(_bindings(broker))


@dataclass
class Answering:
    """A request subject a service answers, and the handler whose bytes are the reply.

    Served on a plain subscription of the service's connection (queue group: the
    service), each request in a task of its own, up to ``at_once``: the hot ones
    (adapters' claims, one per order) skip FastStream's per-message machinery
    (and so FastStream's Prometheus middleware, which would see only the status
    requests: ``meter`` times and counts every answer instead).
    """

    subject: str
    queue: str
    handler: Callable[[Delivery], Awaitable[bytes]]
    log: logging.Logger
    at_once: int = 64
    meter: metrics.Reaction | None = None
    subscription: NatsSubscription | None = None
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
                    data = _UNAVAILABLE
                if meter is not None:
                    # ``answer`` replies to a failure with this very object.
                    meter.replied(failed=data is _UNAVAILABLE, seconds=time.perf_counter() - started)
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


#: Each broker's request subjects, answered once its service connected.
_ANSWERS: weakref.WeakKeyDictionary[NatsBroker, list[Answering]] = weakref.WeakKeyDictionary()


def add_answer(
    broker: NatsBroker, subject: str, queue: str, handler: Callable[[Delivery], Awaitable[bytes]],
    log: logging.Logger, *, reaction: str = "",
) -> None:
    """Answer requests on ``subject`` (queue group ``queue``) with ``handler``'s bytes.

    ``handler`` never raises (wrap it in ``answer``): what it returns is the reply. With
    a ``reaction`` (the spec's name for it), every answer is timed and counted under it.
    """
    meter = metrics.Reaction(instruments(broker).service, reaction) if reaction else None
    _ANSWERS.setdefault(broker, []).append(Answering(subject, queue, handler, log, meter=meter))


def add_answers(
    broker: NatsBroker, spec: ServiceSpec,
    entries: Mapping[str, Callable[[Delivery], Awaitable[bytes]]], log: logging.Logger,
) -> None:
    """Answer every request ``spec`` declares with the entry of its reaction (``add_answer``).

    Raises:
        ValueError: ``entries`` misses a reaction of the spec, or names one it lacks.
    """
    spec.requests(entries)
    for a in spec.answers:
        for subject in a.channel.subjects:
            add_answer(broker, subject, spec.name, entries[a.reaction], log, reaction=a.reaction)


def answers(broker: NatsBroker) -> tuple[Answering, ...]:
    """The request subjects bound on ``broker``."""
    return tuple(_ANSWERS.get(broker, ()))


async def start_consumers(broker: NatsBroker, nc: Client, partitions: Partitions = SINGLE,
                          journals: Path | None = None) -> None:
    """Start pulling every durable bound on ``broker``, and answering its requests, over ``nc``.

    A durable of the events stream is pulled on every partition's stream (the same name
    on each), its workers shared out among them. With ``journals``, each durable's
    redeliveries in flight are written down there (``runtime.crashes``).
    """
    for b in _bindings(broker):
        if b.consumers:
            continue
        streams = partitions.streams if b.durable.stream == EVENTS else (b.durable.stream,)
        if b.guard is not None:
            await _bound_by_server(nc, streams, b.guard, b.log)
            if journals is not None and b.guard.crashes is None:
                b.guard.crashes = _open_journal(journals, b.durable.name, b.log)
        workers = max(2, -(-b.workers // len(streams))) if len(streams) > 1 else b.workers
        b.consumers = [PullConsumer(nc, stream, b.durable.name, b.entry, workers=workers, log=b.log)
                       for stream in streams]
        for consumer in b.consumers:
            await consumer.start()
    for a in _ANSWERS.get(broker, ()):
        if a.subscription is None:
            await a.start(nc)


def _open_journal(folder: Path, durable: str, log: logging.Logger) -> CrashJournal | None:
    """The durable's crash journal, having adopted those of dead processes; ``None`` if it cannot be kept."""
    journal = CrashJournal(folder, durable)
    try:
        counts = journal.open()
    except OSError as exc:
        log.error("%s: no crash journal in %s (%s): a message that takes the process down is "
                  "bounded by the server's delivery count alone", durable, folder, exc)
        return None
    if counts:
        log.warning("%s: redeliveries that took a process down: %s", durable, counts)
    return journal


async def _bound_by_server(nc: Client, streams: Sequence[str], guard: Guard, log: logging.Logger) -> None:
    """Give messages up from the delivery the server's ``max_deliver`` leaves for it.

    The server's bound, not this code's: should the durable be bounded otherwise (an
    operator's choice, a deployment not yet brought up to date), the process still gives
    a message up before the server stops delivering it. The lowest over the partitions.
    """
    bounds: list[int] = []
    for stream in streams:
        try:
            info = await nc.jetstream().consumer_info(stream, guard.durable, timeout=2.0)
        except (NatsError, TimeoutError) as exc:
            log.warning("%s: its delivery bound on %s not read (%s); the declared one holds",
                        guard.durable, stream, exc)
            return
        bounds.append(int(info.config.max_deliver or -1))
    finite = [b for b in bounds if b > 0]
    if len(finite) < len(bounds):
        log.error("%s: unbounded on the server (max_deliver -1): run the topology step to bound "
                  "it; giving up from delivery %s meanwhile", guard.durable, guard.bounds.deliveries)
    if finite:
        guard.bounds = replace(guard.bounds, deliveries=give_up_from(min(finite)))


async def stop_consumers(broker: NatsBroker, timeout_s: float = 10.0) -> None:
    """Stop asking for messages; let running handlers settle theirs (up to ``timeout_s``)."""
    running = [c for b in _bindings(broker) for c in b.consumers]
    await asyncio.gather(*(c.stop(timeout_s) for c in running),
                         *(a.stop(timeout_s) for a in _ANSWERS.get(broker, ())))
    for b in _bindings(broker):
        b.consumers = []
        if b.guard is not None and b.guard.crashes is not None:
            b.guard.crashes.close()
            b.guard.crashes = None


def service_app(
    settings: Settings, name: str, build: Callable[[Ports], H]
) -> tuple[FastStream, NatsBroker, Service[H]]:
    """The FastStream app, broker and handlers of one service, with its status answer.

    While it runs, the process serves its metrics (``lockgate.runtime.metrics``, on by
    default) and traces what it handles when an endpoint is configured
    (``lockgate.runtime.tracing``).
    """
    broker = make_broker(settings, name)
    app = FastStream(broker, logger=None)
    service = Service(build)
    watch = _INSTRUMENTS.setdefault(broker, Instruments(service=name))

    @app.on_startup
    async def connect() -> None:
        watch.endpoint = start_endpoint(settings)
        watch.tracing = start_tracing(settings, name)
        await service.start(broker, settings)

    consuming: list[bool] = []

    @app.after_startup
    async def consume() -> None:
        await start_consumers(broker, service.ports.nc, settings.partitions,
                              journals=settings.var_dir / "journals")
        consuming.append(True)  # ready: its status says so from now on

    @app.on_shutdown
    async def stop_consuming() -> None:
        await stop_consumers(broker)

    @app.after_shutdown
    async def stop_watching() -> None:
        endpoint, tracing = watch.endpoint, watch.tracing
        watch.endpoint = watch.tracing = None
        if endpoint is not None:
            await asyncio.to_thread(endpoint.stop)
        if tracing is not None:
            await asyncio.to_thread(tracing.shutdown)

    # Ready once it consumes and answers, not merely connected: a client told "ready"
    # must find every durable pulled and every request subject answered.
    add_status(broker, name, progress_of(broker),
               lambda: service.connected if consuming else None)
    return app, broker, service
