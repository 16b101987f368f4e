"""The shape in which a process declares its wiring, once.

A service's spec names, with the classes and constants themselves: the event classes each
of its durable consumers is handed and the reaction (a method of its handlers) that
handles them, the events it appends, the requests it answers and by which reaction, the
buckets it reads, lists and writes, the adapter requests it asks and the subjects it
publishes. An adapter's spec names the capabilities it serves; the adapter SDK fixes the
subjects every adapter uses.

Everything else is derived from the specs (``lockgate.runtime.specs``): the durable
consumers (``topology.DURABLES``), the broker permissions (``roles.service_role``), what
``make run`` supervises (``status.CHILDREN``) and the AsyncAPI channels. Each service's spec
is a subclass that names its consumers and requests as attributes called after their
reactions (``EXECUTOR.ready``), so an app binds a reaction by reference
(``lockgate.runtime.host``): a misspelt one fails the type check, not a start-up.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

from lockgate.contracts import channels
from lockgate.contracts.channels import Channel
from lockgate.eventstore.subjects import PREFIX, legacy_type_filter, type_filter
from lockgate.intent.aggregate import Event
from lockgate.intent.events import ProcessingAbandoned
from lockgate.runtime.streams import EVENTS

#: Unacknowledged messages a shared durable holds (delivered and not yet settled, or
#: nak'd to come back later). Every tenant's candidates pass the same durables, so this
#: is kept well above what one tenant can have in flight (intake's per-tenant cap, 128
#: in the demo bundle): one tenant's stuck or slow work fills at most an eighth of it.
SHARED_PENDING = 1024
#: Timer consumers hold one message per open deadline (nak'd with a delay until it
#: falls due), so their pending limit bounds how many deadlines can be open at once.
TIMERS = 100_000

#: Deliveries of one message after which a consumer without timers gives it up on the
#: record without running its handler (a handler that takes its process down with it is
#: never seen failing: the server's count is the only evidence).
DELIVERIES = 100
#: Deliveries past a consumer's bound that the server still makes, so that a give-up the
#: store could not take (unavailable, say) is tried again rather than left undelivered:
#: at the kit's backoff (capped at 15 s) ten minutes of an outage, as long as the kit
#: lets transient failures go on (``Bounds.transient_for_s``).
RECORD_TRIES = 40


def max_deliver_for(deliveries: int) -> int:
    """The server's ``max_deliver`` for a consumer that gives up from ``deliveries`` on."""
    return deliveries + RECORD_TRIES


def give_up_from(max_deliver: int) -> int | None:
    """The delivery from which a consumer whose server bound is ``max_deliver`` gives a
    message up instead of handling it; ``None`` when the server bounds nothing (-1).

    The inverse of ``max_deliver_for``; on a bound too small to keep ``RECORD_TRIES``
    spare, half of it is kept, and at least the last delivery gives up.
    """
    if max_deliver <= 0:
        return None
    return max_deliver - min(RECORD_TRIES, (max_deliver - 1) // 2)


#: What every consumer may append whatever its spec says: giving a message up is
#: recorded on its intent (``lockgate.runtime.service``, invariant 7 of docs/design.md).
GIVING_UP: tuple[type[Event], ...] = (ProcessingAbandoned,)

#: What every process answers, whatever its spec says: ``lg.status.<its status name>``.
EVERY_PROCESS_ANSWERS: tuple[Channel, ...] = (channels.STATUS,)


def _events_only(where: str, events: Sequence[object]) -> None:
    strays = [e for e in events if not (isinstance(e, type) and issubclass(e, Event))]
    if strays:
        raise TypeError(f"{where}: {strays!r} are not event classes of EffectIntent")


@dataclass(frozen=True)
class Consumer:
    """One durable pull consumer of a service: what it is handed and the reaction to it.

    On the events stream it is handed ``events`` (classes of ``EffectIntent``); of a
    routed event (``Event.routed_by``) only the routes named in ``routes``, when it names
    the event there (its filter then carries them, so the broker hands it nothing else).
    On another stream (candidates, reports) it is handed every message of ``channel``. ``timers``: its reaction asks
    for messages again later on purpose (``Retry``), so only failures count toward giving
    one up in the process; ``deliveries`` bounds every delivery, timers included (the
    server's ``max_deliver_for`` it), so a consumer with timers declares how many its
    longest legitimate wait takes. ``batch`` and ``workers`` are how many messages one
    process fetches at once and handles at once.
    """

    name: str
    reaction: str
    events: tuple[type[Event], ...] = ()
    routes: tuple[tuple[type[Event], tuple[str, ...]], ...] = ()
    channel: Channel | None = None
    stream: str = EVENTS
    timers: bool = False
    max_ack_pending: int = SHARED_PENDING
    deliveries: int = DELIVERIES
    batch: int = 16
    workers: int = 16

    def __post_init__(self) -> None:
        if self.stream == EVENTS and (self.channel is not None or not self.events):
            raise ValueError(f"{self.name}: a consumer of {EVENTS} names the events it is handed")
        if self.stream != EVENTS and (self.channel is None or self.events):
            raise ValueError(f"{self.name}: a consumer of {self.stream} names its channel")
        if self.deliveries < 1:
            raise ValueError(f"{self.name}: a consumer gives a message up after some deliveries")
        if len(set(self.events)) != len(self.events):
            raise ValueError(f"{self.name}: an event named twice")
        _events_only(self.name, self.events)
        for event, routes in self.routes:
            if event not in self.events or not event.routed_by or not routes:
                raise ValueError(f"{self.name}: {event.__name__} is not a routed event it is handed")

    def routes_of(self, event: type[Event]) -> tuple[str, ...] | None:
        """The routes of ``event`` this consumer is handed (``None``: every one)."""
        return dict(self.routes).get(event)

    @property
    def filters(self) -> tuple[str, ...]:
        """The consumer's subject filters on its stream."""
        return self.filters_for(PREFIX)

    def filters_for(self, prefix: str) -> tuple[str, ...]:
        """Its filters on an events stream whose subjects are under ``prefix`` (a partition's)."""
        if self.channel is not None:
            return self.channel.subjects
        filters: list[str] = []
        for event in self.events:
            name = event.__name__
            routes = self.routes_of(event)
            filters += ([type_filter(name, r, prefix=prefix) for r in routes] if routes
                        else [type_filter(name, prefix=prefix)])
            if prefix == PREFIX:
                # Events stored before subjects carried a route (their handlers still
                # check); partitioned streams are younger than routes.
                filters.append(legacy_type_filter(name))
        return tuple(filters)


@dataclass(frozen=True)
class Answer:
    """A request a process answers, and the reaction that answers it."""

    channel: Channel
    reaction: str


@dataclass(frozen=True)
class ServiceSpec:
    """What a service consumes, appends, answers and may touch: the one place it is written.

    ``consumes``: its durables, each with its events and reaction. ``appends``: the event
    types it records (and ``GIVING_UP``, which every consumer may). ``answers``: the
    requests it serves. ``reads``, ``lists``, ``writes``: buckets by name
    (``lockgate.runtime.streams``). ``asks``: the adapter requests it makes.
    ``publishes``: what it publishes besides events (responses, orders, interruptions).

    A subclass may name its consumers and requests as its own fields instead, each called
    after its reaction (``ready: Consumer``): ``consumes`` and ``answers`` are then those
    fields, in the order they are declared.
    """

    name: str
    consumes: tuple[Consumer, ...] = ()
    appends: tuple[type[Event], ...] = ()
    answers: tuple[Answer, ...] = ()
    reads: tuple[str, ...] = ()
    lists: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    asks: tuple[Channel, ...] = ()
    publishes: tuple[Channel, ...] = ()

    def __post_init__(self) -> None:
        named = self._named_reactions()
        if named:
            if self.consumes or self.answers:
                raise ValueError(f"{self.name}: reactions named as fields and in consumes/answers")
            # Frozen: the derived tuples are set once, here.
            object.__setattr__(self, "consumes", tuple(r for r in named if isinstance(r, Consumer)))
            object.__setattr__(self, "answers", tuple(r for r in named if isinstance(r, Answer)))
        durables = [c.name for c in self.consumes]
        if len(set(durables)) != len(durables):
            raise ValueError(f"{self.name}: a durable named twice in {durables}")
        reactions = [c.reaction for c in self.consumes] + [a.reaction for a in self.answers]
        if len(set(reactions)) != len(reactions):
            raise ValueError(f"{self.name}: a reaction bound twice in {reactions}")
        _events_only(self.name, self.appends)

    def _named_reactions(self) -> list[Consumer | Answer]:
        """A subclass's consumers and requests, each checked to be called after its reaction."""
        named: list[Consumer | Answer] = []
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Consumer | Answer):
                if value.reaction != f.name:
                    raise ValueError(f"{self.name}.{f.name}: its reaction is {value.reaction!r}")
                named.append(value)
        return named

    @property
    def module(self) -> str:
        """The module ``python -m`` runs the service as."""
        return f"lockgate.{self.name}"

    @property
    def status_name(self) -> str:
        """Where it answers ``lg.status.<name>``."""
        return self.name

    @property
    def may_append(self) -> tuple[type[Event], ...]:
        """Its own event types, and what every consumer may append (``GIVING_UP``)."""
        return (*self.appends, *(e for e in GIVING_UP if e not in self.appends))

    def consumer(self, name: str) -> Consumer:
        """The durable consumer called ``name``.

        Raises:
            KeyError: the service has no such durable.
        """
        for c in self.consumes:
            if c.name == name:
                return c
        raise KeyError(f"{self.name} has no durable {name!r}")


#: The subjects every adapter uses: the adapter SDK (``lockgate.adapters.sdk``) serves
#: them for each capability the adapter process runs.
ADAPTER_ANSWERS: tuple[Channel, ...] = (
    channels.ADAPTER_DESCRIBE, channels.ADAPTER_NORMALIZE, channels.ADAPTER_FACTS,
    channels.ADAPTER_QUERY,
)
ADAPTER_CONSUMES: tuple[Channel, ...] = (channels.EXEC, channels.INTERRUPT)
ADAPTER_PUBLISHES: tuple[Channel, ...] = (channels.REPORT,)
ADAPTER_ASKS: tuple[Channel, ...] = (channels.CLAIM,)


@dataclass(frozen=True)
class AdapterSpec:
    """An adapter process: its name, its module and the capabilities it serves.

    It never writes the event store; what it does on the broker is the SDK's, the same
    for every adapter (``ADAPTER_ANSWERS`` and the rest), for its own capabilities only.
    """

    name: str
    module: str
    capabilities: tuple[str, ...]
    answers: tuple[Channel, ...] = ADAPTER_ANSWERS
    consumes: tuple[Channel, ...] = ADAPTER_CONSUMES
    publishes: tuple[Channel, ...] = ADAPTER_PUBLISHES
    asks: tuple[Channel, ...] = ADAPTER_ASKS

    def __post_init__(self) -> None:
        if not self.capabilities:
            raise ValueError(f"adapter {self.name} serves no capability")

    @property
    def status_name(self) -> str:
        """Where the process answers ``lg.status.<name>`` (``adapter.casenotes``)."""
        return f"adapter.{self.name}"
