"""A service's durables: each bound to its entry, pulled once connected, and what they did lately.

A durable's every delivery is settled by the kit's rule (``lockgate.runtime.service``),
timed and counted under the service's name and the consumer's reaction
(``metrics.Reaction``), traced when tracing is on, and noted in its ``Progress`` (the
status answer's evidence that it moves). It is pulled by the kit's own continuous-pull
consumer (``lockgate.runtime.consumer``), one per partition for a durable of the events
stream.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from nats.aio.client import Client
from nats.errors import Error as NatsError

from lockgate.contracts import subjects
from lockgate.eventstore.partitions import Partitions
from lockgate.eventstore.subjects import NotAnEventSubject, parse_event_subject
from lockgate.runtime import metrics
from lockgate.runtime.consumer import Delivery, PullConsumer
from lockgate.runtime.crashes import CrashJournal
from lockgate.runtime.service import BOUNDS, Abandon, Failures, Guard, deliveries, settle
from lockgate.runtime.spec import Consumer, give_up_from
from lockgate.runtime.topology import CANDIDATES, EVENTS, REPORTS, Durable, durable
from lockgate.runtime.tracing import Tracing

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


@dataclass
class Binding:
    """A durable of a service and the entry point its messages go to, once connected."""

    durable: Durable
    entry: Callable[[Delivery], Awaitable[None]]
    workers: int
    log: logging.Logger
    #: When its messages are given up; its delivery bound is the server's, once connected.
    guard: Guard
    progress: Progress
    #: Pulling once connected: one per partition for a durable of the events stream.
    consumers: list[PullConsumer] = field(default_factory=list)

    async def start(self, nc: Client, partitions: Partitions, journals: Path | None) -> None:
        """Start pulling over ``nc``, its workers shared out among the partitions' streams.

        With ``journals``, its redeliveries in flight are written down there
        (``runtime.crashes``).
        """
        if self.consumers:
            return
        streams = partitions.streams if self.durable.stream == EVENTS else (self.durable.stream,)
        await _bound_by_server(nc, streams, self.guard, self.log)
        if journals is not None and self.guard.crashes is None:
            self.guard.crashes = _open_journal(journals, self.durable.name, self.log)
        workers = max(2, -(-self.workers // len(streams))) if len(streams) > 1 else self.workers
        self.consumers = [PullConsumer(nc, stream, self.durable.name, self.entry, workers=workers, log=self.log)
                          for stream in streams]
        for consumer in self.consumers:
            await consumer.start()

    async def stop(self, timeout_s: float) -> None:
        """Stop asking for messages; let running handlers settle theirs (up to ``timeout_s``)."""
        await asyncio.gather(*(c.stop(timeout_s) for c in self.consumers))
        self.consumers = []
        if self.guard.crashes is not None:
            self.guard.crashes.close()
            self.guard.crashes = None


def bind(
    service: str, consumer: Consumer, handler: Callable[[Delivery], Awaitable[None]], *,
    abandon: Abandon, trace: TraceKey | None, tracing: Callable[[], Tracing | None],
    log: logging.Logger,
) -> Binding:
    """``handler`` bound to ``consumer``'s durable: settled, timed, counted and traced.

    ``abandon`` records a message given up; ``trace`` names the candidate a message is
    about (by default what its stream's subjects say, ``TRACE_KEYS``); ``tracing`` is read
    at each delivery (on only while the service runs).
    """
    d = durable(consumer.name)
    # The declared bound until the server's own is read (``Binding.start``).
    guard = Guard(d.name, replace(BOUNDS, deliveries=give_up_from(d.max_deliver)), abandon, Failures())
    progress = Progress(d.stream)
    reaction = consumer.reaction
    meter = metrics.Reaction(service, reaction)
    trace_key = trace or TRACE_KEYS.get(d.stream)
    span_name = f"{service} {reaction}"
    # The candidate's first step is the root of its trace; every later step hangs under it.
    starts_trace = d.stream == CANDIDATES

    async def traced(msg: Delivery, tracing: Tracing) -> None:
        attributes: dict[str, str | int] = {
            "lockgate.service": service, "lockgate.reaction": reaction,
            "lockgate.durable": d.name, "messaging.system": "nats",
            "messaging.destination.name": msg.raw_message.subject,
            "lockgate.deliveries": deliveries(msg),
        }
        intent_id = trace_key(msg) if trace_key is not None else None
        with tracing.span(span_name, intent_id, root=starts_trace, attributes=attributes) as span:
            tracing.outcome(span, await settle(msg, handler(msg), log, guard, meter))

    async def entry(msg: Delivery) -> None:
        token = progress.started()
        try:
            on = tracing()
            if on is None:
                await settle(msg, handler(msg), log, guard, meter)
            else:
                await traced(msg, on)
        finally:
            progress.finished(token)

    return Binding(d, entry, consumer.workers, log, guard, progress)


def _open_journal(folder: Path, name: str, log: logging.Logger) -> CrashJournal | None:
    """The durable's crash journal, having adopted those of dead processes; ``None`` if it cannot be kept."""
    journal = CrashJournal(folder, name)
    try:
        counts = journal.open()
    except OSError as exc:
        log.error("%s: no crash journal in %s (%s): a message that takes the process down is "
                  "bounded by the server's delivery count alone", name, folder, exc)
        return None
    if counts:
        log.warning("%s: redeliveries that took a process down: %s", name, counts)
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
