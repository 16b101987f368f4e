"""One service process, built from its spec: its connection, ports, durables, answers and status.

An app builds a ``ServiceHost`` from its spec and the function that builds its handlers
from the ports, then binds each of the spec's reactions by reference::

    host = ServiceHost(settings, EXECUTOR, build, log)
    host.durable(EXECUTOR.ready, on_ready)
    host.answer(EXECUTOR.claim, claim)

A consumer or request of the spec left unbound, bound twice, or one the spec does not
declare is refused (``WiringError``) before anything connects. Once started the host
connects as the process's user, builds the ports and the handlers, pulls every durable,
answers every request and, from then on, reports itself ready on ``lg.status.<name>``.
While it runs it serves its metrics (``lockgate.runtime.metrics``) and traces what it
handles when an endpoint is configured (``lockgate.runtime.tracing``).

Everything here is the kit's own over nats-py: measured on two cores, a request answered
on a plain subscription costs its process a quarter of the CPU FastStream's subscriber
took, and a durable pulled continuously carries twice the chains FastStream's pull
subscribers did (docs/design.md, "Service host").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from nats.aio.client import Client
from nats.js import JetStreamContext

from lockgate.core.errors import LockgateError
from lockgate.runtime import metrics
from lockgate.runtime.answers import Answering, status_answer
from lockgate.runtime.consumer import Delivery
from lockgate.runtime.context import Ports, ports_for
from lockgate.runtime.durables import Binding, TraceKey, bind
from lockgate.runtime.entry import connect
from lockgate.runtime.metrics import Endpoint, start_endpoint, url_of
from lockgate.runtime.service import Abandon, abandon_event, abandon_report
from lockgate.runtime.settings import Settings
from lockgate.runtime.spec import Answer, Consumer, ServiceSpec
from lockgate.runtime.topology import EVENTS, REPORTS
from lockgate.runtime.tracing import Tracing, start_tracing
from lockgate.runtime.watchdog import Watchdog

H = TypeVar("H")

#: How long stopping lets running handlers settle their messages and answer their requests.
STOP_TIMEOUT_S = 10.0


class WiringError(LockgateError):
    """An app's bindings do not match its spec: a reaction unbound, bound twice, or unknown."""

    def __init__(self, service: str, why: str, *, code: str) -> None:
        super().__init__(f"{service}: {why}", code=code)


class ServiceHost(Generic[H]):
    """A service process built from its spec: what it consumes and answers, bound by reference.

    ``build`` makes the handlers from the ports once connected (``handlers``); the
    entries an app binds read them when a message comes, never before.
    """

    def __init__(self, settings: Settings, spec: ServiceSpec, build: Callable[[Ports], H],
                 log: logging.Logger) -> None:
        self.settings = settings
        self.spec = spec
        self.log = log
        self._build = build
        self._bindings: dict[str, Binding] = {}
        self._answers: dict[str, list[Answering]] = {}
        self._nc: Client | None = None
        self._js: JetStreamContext | None = None
        #: The ports and the handlers built from them, once connected.
        self._wired: tuple[Ports, H] | None = None
        self._consuming = False
        self._status: Answering | None = None
        #: Exist only while the host runs (``start`` to ``stop``).
        self.endpoint: Endpoint | None = None
        self.tracing: Tracing | None = None

    # -- binding ---------------------------------------------------------------------

    def durable(self, consumer: Consumer, handler: Callable[[Delivery], Awaitable[None]], *,
                abandon: Abandon | None = None, trace: TraceKey | None = None) -> None:
        """Bind ``handler`` to ``consumer``'s durable (an attribute of the spec).

        ``abandon`` records that the consumer gave a message up; by default what the
        durable's stream calls for (``abandon_event``, ``abandon_report``); the candidates'
        consumer must say. ``trace`` names the candidate a message is about, for its span
        (by default what its stream's subjects say).

        Raises:
            WiringError: ``consumer`` is not the spec's, is bound already, or is a
                candidates' consumer without its own ``abandon``.
        """
        self._declared(consumer, self.spec.consumes, consumer.reaction, bound=consumer.name in self._bindings)
        if abandon is None:
            abandon = self._default_abandon(consumer)
        self._bindings[consumer.name] = bind(
            self.spec.name, consumer, handler, abandon=abandon, trace=trace,
            tracing=lambda: self.tracing, log=self.log)

    def answer(self, request: Answer, handler: Callable[[Delivery], Awaitable[bytes]]) -> None:
        """Answer ``request`` (an attribute of the spec) with ``handler``'s bytes, on each of its subjects.

        ``handler`` never raises (wrap it in ``service.answer``): what it returns is the
        reply. Every answer is timed and counted under the request's reaction.

        Raises:
            WiringError: ``request`` is not the spec's, or is bound already.
        """
        self._declared(request, self.spec.answers, request.reaction, bound=request.reaction in self._answers)
        meter = metrics.Reaction(self.spec.name, request.reaction)
        self._answers[request.reaction] = [
            Answering(subject, self.spec.name, handler, self.log, meter=meter)
            for subject in request.channel.subjects]

    def check(self) -> None:
        """Refuse to run with a consumer or request of the spec left unbound.

        Raises:
            WiringError: a reaction of the spec has no entry.
        """
        unbound = [c.reaction for c in self.spec.consumes if c.name not in self._bindings]
        unbound += [a.reaction for a in self.spec.answers if a.reaction not in self._answers]
        if unbound:
            raise WiringError(self.spec.name, f"reactions of the spec left unbound: {unbound}",
                              code="service.unbound")

    def _declared(self, reaction: Consumer | Answer, declared: tuple[Consumer, ...] | tuple[Answer, ...],
                  name: str, *, bound: bool) -> None:
        if reaction not in declared:
            raise WiringError(self.spec.name, f"{name!r} is not a reaction of its spec",
                              code="service.not-in-spec")
        if bound:
            raise WiringError(self.spec.name, f"{name!r} is bound twice", code="service.bound-twice")

    def _default_abandon(self, consumer: Consumer) -> Abandon:
        if consumer.stream == EVENTS:
            return abandon_event(lambda: self.ports)
        if consumer.stream == REPORTS:
            return abandon_report(lambda: self.ports)
        raise WiringError(self.spec.name, f"{consumer.name} on {consumer.stream} must say what giving "
                          "a message up records", code="service.no-abandon")

    # -- what the entries read -------------------------------------------------------

    @property
    def bindings(self) -> tuple[Binding, ...]:
        """The durables bound, in the order bound."""
        return tuple(self._bindings.values())

    @property
    def answering(self) -> tuple[Answering, ...]:
        """The request subjects bound (the status answer not among them)."""
        return tuple(a for answers in self._answers.values() for a in answers)

    @property
    def handlers(self) -> H:
        """The handlers, built from the ports once connected.

        Raises:
            RuntimeError: used before the host connected.
        """
        return self._connected()[1]

    @property
    def ports(self) -> Ports:
        """The ports the handlers were built with.

        Raises:
            RuntimeError: used before the host connected.
        """
        return self._connected()[0]

    def _connected(self) -> tuple[Ports, H]:
        if self._wired is None:
            raise RuntimeError(f"{self.spec.name} used before it connected")
        return self._wired

    def closed(self) -> bool:
        """True once its connection closed for good (the watchdog then ends the process)."""
        return self._nc is not None and self._nc.is_closed

    # -- running ---------------------------------------------------------------------

    async def start(self, stop: asyncio.Event | None = None) -> None:
        """Connect (waiting for the broker until connected or ``stop`` is set), then consume and answer.

        Ready (its status says so) once every durable is pulled and every request
        subject answered, not merely connected.

        Raises:
            WiringError: a reaction of the spec is unbound; nothing connected.
            ConfigurationError: the broker refused the process's user.
            Stopped: ``stop`` was set before the connection was made.
        """
        self.check()
        self.endpoint = start_endpoint(self.settings)
        self.tracing = start_tracing(self.settings, self.spec.name)
        self._nc = await connect(self.settings, name=f"lockgate-{self.spec.name}", stop=stop)
        self._js = self._nc.jetstream()
        ports = await ports_for(self._nc, self.settings)
        self._wired = (ports, self._build(ports))
        progress = {b.durable.name: b.progress for b in self._bindings.values()}
        self._status = status_answer(self.spec.name, progress, self._ready, self.settings.partitions,
                                     lambda: url_of(self.endpoint), self.log)
        await self._status.start(self._nc)
        journals = self.settings.var_dir / "journals"
        for binding in self._bindings.values():
            await binding.start(self._nc, self.settings.partitions, journals)
        for answering in self.answering:
            await answering.start(self._nc)
        self._consuming = True

    def _ready(self) -> JetStreamContext | None:
        return self._js if self._consuming else None

    async def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Stop asking for messages and taking requests; let running handlers settle theirs
        (up to ``timeout_s``); then close the connection and stop the metrics and tracing."""
        self._consuming = False
        await asyncio.gather(*(b.stop(timeout_s) for b in self._bindings.values()),
                             *(a.stop(timeout_s) for a in self.answering))
        if self._status is not None:
            await self._status.stop(timeout_s)
            self._status = None
        nc, self._nc = self._nc, None
        if nc is not None:
            with contextlib.suppress(Exception):  # a connection already lost has nothing to drain
                await nc.drain()
        endpoint, tracing = self.endpoint, self.tracing
        self.endpoint = self.tracing = None
        if endpoint is not None:
            await asyncio.to_thread(endpoint.stop)
        if tracing is not None:
            await asyncio.to_thread(tracing.shutdown)

    async def serve(self, stop: asyncio.Event, watchdog: Watchdog | None = None) -> None:
        """Run until ``stop`` is set, ``watchdog`` (if any) watching it from ready to stop."""
        try:
            await self.start(stop)
            if watchdog is not None:
                watchdog.start(asyncio.get_running_loop())
            await stop.wait()
        finally:
            if watchdog is not None:
                watchdog.stop()
            await self.stop()
