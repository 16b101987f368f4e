"""How every consumer settles its messages, and when it gives one up on the record.

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
import inspect
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import msgspec

from lockgate.contracts.messages import AttemptReport, Refusal
from lockgate.core.clock import Clock, utc_now
from lockgate.core.errors import LockgateError
from lockgate.core.ids import is_subject_token
from lockgate.core.text import safe_text
from lockgate.eventstore.base import RecordedEvent
from lockgate.eventstore.jetstream import recorded_event as stored
from lockgate.eventstore.subjects import NotAnEventSubject
from lockgate.intent.codec import EventDecodeError
from lockgate.runtime import metrics
from lockgate.runtime.consumer import Delivery
from lockgate.runtime.context import Ports
from lockgate.runtime.crashes import CrashJournal
from lockgate.runtime.ports.intents import record_abandonment
from lockgate.runtime.settlement import Abandonment
from lockgate.runtime.settlement import backoff_s as backoff_s
from lockgate.runtime.settlement import is_transient as is_transient


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
        return UNAVAILABLE


#: The reply to a request whose handler failed (``answer``, ``answers.Answering``).
UNAVAILABLE = msgspec.json.encode(Refusal("service.unavailable", "the service could not answer; ask again"))


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
