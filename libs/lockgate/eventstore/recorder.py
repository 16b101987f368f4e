"""The ``eventsourcing`` library's recorder interface on a stream laid out like ``LG_EVENTS``.

The library's projection machinery (``ApplicationSubscription``, ``ProjectionRunner``)
reads an application's recorder; ``JetStreamApplicationRecorder`` is that recorder over
Lockgate's event store, so a projector folds the very stream the services write. Set
``PERSISTENCE_MODULE=lockgate.eventstore.recorder`` (its ``Factory``) or use
``lockgate.intent.record.LockgateRecord``, whose mapper turns stored events into
``EffectIntent`` events.

Layout and identity (``lockgate.eventstore.subjects``):

- An event is one message on ``<prefix>.<tenant>.<intent>.<version>.<Type>.<route>``;
  its stream sequence is its notification id. The originator id is ``UUID(hex=intent)``
  (a token that is not 32 hex digits stays a ``str``), the version is the subject's.
- A Lockgate event's topic is the library's topic of its class
  (``lockgate.intent.codec.TOPICS``); its ``state`` is the stored bytes, exactly.
- An event another application stores here (the library's own test cases, a tool) is
  *foreign*: it goes under the configured foreign tenant with the type token
  ``foreign-event`` (a hyphen: no Python class, so no ``EffectIntent`` event, can have
  that name), its topic in the ``Lg-Topic`` header and a digest of the topic as the
  route, which is what a subscription to that topic filters on. Reading decides by the
  type token alone: a foreign event is never read as a Lockgate one, nor the reverse.

Writes are optimistic per aggregate, as ``JetStreamEventStore``'s: the head of the
aggregate is read (one direct get), the versions must follow it, and the publish carries
``Nats-Expected-Last-Subject-Sequence`` on the aggregate's filter, so a writer that
raced it is refused by the server (``IntegrityError``). The events of one insert, of one
aggregate or several, are one atomic batch: all are stored or none. Versions must grow
past the aggregate's head: an append-only log cannot fill a gap below it, which an
event-sourced application never asks for.

Lockgate's own event types are refused on insert: each is appended by the service that
owns it, through ``JetStreamEventStore`` (event ids, routes, broker permissions).

The library's API is synchronous and threaded, nats-py is asyncio: each recorder owns a
connection on an event loop in a thread of its own (``lockgate.eventstore.bridge``).
Tracking and process recorders are not offered: a projection's views live in SQLite or
PostgreSQL, next to the tracking records they are written with.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import heapq
import logging
import re
import threading
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from uuid import UUID

import nats
import nats.errors
from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
    DataError,
    InfrastructureFactory,
    IntegrityError,
    InterfaceError,
    Notification,
    NotSupportedError,
    OperationalError,
    ProcessRecorder,
    ProgrammingError,
    StoredEvent,
    Subscription,
    TrackingRecorder,
)
from eventsourcing.utils import Environment, EnvType
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy

from lockgate.core.bounded import keep
from lockgate.core.ids import is_subject_token
from lockgate.eventstore.base import EventStoreUnavailable
from lockgate.eventstore.bridge import LoopClosed, LoopThread
from lockgate.eventstore.jetstream import (
    CONFLICT_CODES,
    STREAM,
    DirectGet,
    publish_atomically,
)
from lockgate.eventstore.subjects import (
    PREFIX,
    SNAPSHOTS_PREFIX,
    EventAddress,
    NotAnEventSubject,
    all_events_filter,
    check_prefix,
    event_subject,
    intent_filter,
    legacy_type_filter,
    parse_event_subject,
    type_filter,
)
from lockgate.intent.codec import event_type_of, topic_of
from lockgate.runtime.settings import Settings

T = TypeVar("T")

log = logging.getLogger(__name__)

#: The type token of an event another application stored (not a Python identifier).
FOREIGN_TYPE = "foreign-event"
#: The tenant token foreign events are stored under unless told otherwise.
FOREIGN_TENANT = "foreign"
#: The header that keeps a foreign event's topic.
TOPIC_HEADER = "Lg-Topic"
#: The stream refuses atomic batches (``allow_atomic`` is off).
_ATOMIC_DISABLED = 10174
#: A batch longer than the server's atomic batch limit (1000 messages by default).
_BATCH_TOO_LARGE = 10199
#: Messages one direct get asks for.
_PAGE = 1024
_UUID_HEX = re.compile(r"[0-9a-f]{32}")
#: Intents whose tenant a recorder remembers from what it read.
TENANTS_KEPT = 8192
#: Notifications a subscription holds, read but not yet iterated, before the consumer
#: waits (and with it, through flow control, the server).
SUBSCRIPTION_BUFFER = 4096
#: Notifications one wake-up of an iterating thread takes over at most.
_TAKE = 512
#: The server's idle heartbeat to a subscription: two missed ones (a restarted server
#: forgot the in-memory consumer) and nats-py recreates it from where it was.
SUBSCRIPTION_HEARTBEAT_S = 2.0


class RecorderConflict(IntegrityError):
    """An insert would write a version an aggregate already has, or the aggregate moved
    while it was written.

    Retryable: reload the aggregate, decide again, insert again.
    """

    retryable = True

    def __init__(self, message: str, *, originator_id: UUID | str | None = None) -> None:
        super().__init__(message)
        self.originator_id = originator_id


class RecorderUnavailable(OperationalError):
    """The server did not answer, or answered with an error that is not a conflict."""

    retryable = True


def topic_route(topic: str) -> str:
    """The route token of a foreign event: a digest of its topic (32 hex digits)."""
    return hashlib.sha256(topic.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def originator_token(originator_id: UUID | str) -> str:
    """The subject token of an originator id: a UUID's 32 hex digits, a str as it is.

    Raises:
        DataError: a str that is not a subject token, or is 32 hex digits (it would read
            back as a UUID).
    """
    if isinstance(originator_id, UUID):
        return originator_id.hex
    if _UUID_HEX.fullmatch(originator_id) or not is_subject_token(originator_id):
        raise DataError(
            f"originator id {originator_id!r} cannot be a subject token: a str id must be "
            "1-64 of [A-Za-z0-9_-] and not 32 hex digits (that reads back as a UUID)"
        )
    return originator_id


def originator_of(token: str) -> UUID | str:
    """The originator id a subject token stands for."""
    return UUID(hex=token) if _UUID_HEX.fullmatch(token) else token


async def _log_error(exc: Exception) -> None:
    # nats-py's default prints a traceback for every failed (re)connect attempt.
    log.warning("broker connection: %s", exc)


def _sequence(msg: Msg) -> int:
    return int((msg.headers or {})["Nats-Sequence"])


def _check_topic(topic: str) -> None:
    if event_type_of(topic) is not None:
        raise ProgrammingError(
            f"{topic} is a Lockgate event: the service that owns its type appends it, through "
            "lockgate.eventstore.jetstream.JetStreamEventStore, not through this recorder"
        )
    if not topic or not topic.isascii() or not topic.isprintable() or topic != topic.strip():
        raise DataError(f"topic {topic!r} cannot be kept in a message header (printable ASCII only)")


@dataclass(frozen=True, slots=True)
class _Head:
    """The last stored event of an aggregate."""

    sequence: int
    address: EventAddress


class JetStreamAggregateRecorder(AggregateRecorder):
    """The library's aggregate recorder on one JetStream stream (see the module's notes)."""

    def __init__(
        self,
        *,
        connect_options: Mapping[str, Any] | None = None,
        stream: str = STREAM,
        subject_prefix: str = PREFIX,
        api_prefix: str = "$JS.API",
        foreign_tenant: str = FOREIGN_TENANT,
        timeout_s: float = 5.0,
        connect_timeout_s: float = 10.0,
    ) -> None:
        """Start the recorder's loop thread and connect.

        Args:
            connect_options: keyword arguments of ``nats.connect`` (``servers``, user,
                password, ``inbox_prefix``; ``Settings.connect_options()`` gives them).
                Default: a server on ``nats://127.0.0.1:4222``.
            stream: the stream, which must exist (``events_stream_config``).
            subject_prefix: its subjects are ``<subject_prefix>.>``.
            api_prefix: the JetStream API as this connection's account reaches it.
            foreign_tenant: the tenant token foreign events are stored under.
            timeout_s: how long one request to the server may take.
            connect_timeout_s: how long the first connection may take (nats-py retries
                within it; once connected, it reconnects as ``connect_options`` say).

        Raises:
            DataError: a prefix or tenant that cannot be part of a subject.
            OperationalError: the server could not be reached.
        """
        try:
            self._prefix = check_prefix(subject_prefix)
        except ValueError as exc:
            raise DataError(str(exc)) from None
        if not is_subject_token(foreign_tenant) or not is_subject_token(stream):
            raise DataError(f"stream {stream!r} and tenant {foreign_tenant!r} must be subject tokens")
        self._stream = stream
        self._foreign_tenant = foreign_tenant
        self._timeout_s = timeout_s
        self._closed = False
        self._state = threading.Lock()
        #: Intent id → tenant token, of the Lockgate events read lately (touched on the loop).
        self._tenants: OrderedDict[str, str] = OrderedDict()
        options: dict[str, Any] = {
            "servers": ["nats://127.0.0.1:4222"], "name": f"recorder.{stream}", "error_cb": _log_error,
        }
        options.update(connect_options or {})
        self._loop = LoopThread(name=f"recorder-{stream}")
        try:
            self._nc: Client = self._loop.run(asyncio.wait_for(nats.connect(**options), connect_timeout_s))
        except BaseException as exc:
            self._loop.close()
            if isinstance(exc, (nats.errors.Error, OSError, TimeoutError)):
                raise RecorderUnavailable(f"cannot connect to NATS: {exc!r}") from exc
            raise
        self._get = DirectGet(self._nc, stream, timeout_s=timeout_s, api_prefix=api_prefix)

    # -- plumbing --------------------------------------------------------------------

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the recorder's loop; the library's errors for what goes wrong."""
        try:
            return self._loop.run(coro)
        except LoopClosed as exc:
            raise InterfaceError(f"the recorder of {self._stream} is closed") from exc
        except EventStoreUnavailable as exc:
            raise RecorderUnavailable(str(exc)) from exc
        except nats.errors.Error as exc:
            raise RecorderUnavailable(f"NATS: {exc!r}") from exc

    def close(self) -> None:
        """Close the connection and stop the loop's thread. Idempotent."""
        with self._state:
            if self._closed:
                return
            self._closed = True
        if not self._loop.in_loop_thread():
            with contextlib.suppress(LoopClosed, nats.errors.Error, OSError):
                self._loop.run(self._nc.close())
        self._loop.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    # -- reading ---------------------------------------------------------------------

    def _address(self, subject: str) -> EventAddress:
        try:
            return parse_event_subject(subject, prefix=self._prefix)
        except NotAnEventSubject as exc:
            raise DataError(f"{self._stream} holds {subject!r}, which is no event subject") from exc

    def _notification(self, subject: str, headers: Mapping[str, str], data: bytes, seq: int) -> Notification:
        """The notification of one stored message (runs on the loop)."""
        address = self._address(subject)
        if address.event_type == FOREIGN_TYPE:
            topic = headers.get(TOPIC_HEADER)
            if topic is None or topic_route(topic) != address.route:
                raise DataError(f"{subject} (sequence {seq}) has no topic that its route names")
        else:
            topic = topic_of(address.event_type)
            keep(self._tenants, address.intent_id, address.tenant, TENANTS_KEPT)
        return Notification(
            originator_id=originator_of(address.intent_id),
            originator_version=address.version,
            topic=topic,
            state=data,
            id=seq,
        )

    def _stored(self, msg: Msg) -> Notification:
        headers = msg.headers or {}
        return self._notification(headers["Nats-Subject"], headers, msg.data, _sequence(msg))

    async def _scan(self, subject_filter: str, first: int, limit: int | None, stop: int | None) -> list[Msg]:
        """Messages on ``subject_filter`` from sequence ``first`` on, in store order."""
        out: list[Msg] = []
        seq = first
        while limit is None or len(out) < limit:
            want = _PAGE if limit is None else min(_PAGE, limit - len(out))
            status, page = await self._get.request({"seq": seq, "next_by_subj": subject_filter, "batch": want})
            if status not in ("204", "404"):
                raise EventStoreUnavailable(f"direct get answered status {status}")
            for msg in page:
                if stop is not None and _sequence(msg) > stop:
                    return out
                out.append(msg)
            if len(page) < want:
                return out
            seq = _sequence(page[-1]) + 1
        return out

    async def _aggregate(self, token: str) -> list[Notification]:
        """Every stored event of one aggregate, in version order."""
        subject_filter = intent_filter(token, prefix=self._prefix)
        status, messages = await self._get.request({"multi_last": [subject_filter]})
        if status == "413":  # more subjects than multi_last answers: page through them
            messages = await self._scan(subject_filter, 1, None, None)
        elif status not in ("204", "404"):
            raise EventStoreUnavailable(f"direct get answered status {status}")
        return sorted((self._stored(m) for m in messages), key=lambda n: n.originator_version)

    async def _head(self, token: str) -> _Head | None:
        msg = await self._get.last(intent_filter(token, prefix=self._prefix))
        if msg is None:
            return None
        return _Head(_sequence(msg), self._address((msg.headers or {})["Nats-Subject"]))

    def select_events(
        self,
        originator_id: UUID | str,
        *,
        gt: int | None = None,
        lte: int | None = None,
        desc: bool = False,
        limit: int | None = None,
    ) -> Sequence[StoredEvent]:
        """The aggregate's events with ``gt < version <= lte``, ascending (or ``desc``), at
        most ``limit`` of them.

        Raises:
            DataError: an id that cannot be a subject token, or a stored message that is
                not an event.
            OperationalError: the server did not answer.
        """
        token = originator_token(originator_id)
        found = self._call(self._select_events(token, gt, lte, desc, limit))
        return [StoredEvent(n.originator_id, n.originator_version, n.topic, n.state) for n in found]

    async def _select_events(
        self, token: str, gt: int | None, lte: int | None, desc: bool, limit: int | None
    ) -> list[Notification]:
        if desc and limit == 1 and lte is None:
            # The last one (a snapshot store's question): one direct get, whatever the length.
            msg = await self._get.last(intent_filter(token, prefix=self._prefix))
            events = [self._stored(msg)] if msg is not None else []
        else:
            events = await self._aggregate(token)
        chosen = [
            n for n in events
            if (gt is None or n.originator_version > gt) and (lte is None or n.originator_version <= lte)
        ]
        if desc:
            chosen.reverse()
        return chosen if limit is None else chosen[:limit]

    # -- writing ---------------------------------------------------------------------

    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Sequence[int] | None:
        """Store the events as one atomic write; the aggregate recorder returns nothing.

        Raises:
            IntegrityError: a version is taken or out of order, or an aggregate moved
                meanwhile (``RecorderConflict``).
            ProgrammingError: a Lockgate event type (only its service appends it).
            DataError: an id, version or topic that cannot be stored, or more events than
                one atomic batch may hold.
            NotSupportedError: several events and a stream that refuses atomic batches,
                or a tracking record (no tracking here).
            OperationalError: the server did not answer (and the events did not land).
        """
        self._insert(stored_events, kwargs)
        return None

    def _insert(self, stored_events: Sequence[StoredEvent], kwargs: Mapping[str, Any]) -> list[int]:
        if kwargs.get("tracking") is not None:
            raise NotSupportedError(
                "this recorder keeps no tracking records: a projection's views and their "
                "tracking live in SQLite or PostgreSQL"
            )
        if not stored_events:
            return []
        tokens = [self._checked(e) for e in stored_events]
        last_version: dict[str, int] = {}
        for token, event in zip(tokens, stored_events, strict=True):
            before = last_version.get(token)
            if before is not None and event.originator_version <= before:
                raise RecorderConflict(
                    f"version {event.originator_version} of {event.originator_id} follows "
                    f"version {before} in the same insert",
                    originator_id=event.originator_id,
                )
            last_version[token] = event.originator_version
        return self._call(self._write(stored_events, tokens))

    def _checked(self, event: StoredEvent) -> str:
        _check_topic(event.topic)
        if event.originator_version < 0:
            raise DataError(f"version {event.originator_version} of {event.originator_id} is negative")
        return originator_token(event.originator_id)

    async def _write(self, stored_events: Sequence[StoredEvent], tokens: list[str]) -> list[int]:
        aggregates = list(dict.fromkeys(tokens))
        heads = dict(zip(aggregates, await asyncio.gather(*(self._head(t) for t in aggregates)), strict=True))
        firsts: dict[str, StoredEvent] = {}
        for token, event in zip(tokens, stored_events, strict=True):
            firsts.setdefault(token, event)
        for token, head in heads.items():
            first = firsts[token]
            if head is None:
                continue
            if head.address.event_type != FOREIGN_TYPE:
                raise IntegrityError(f"{first.originator_id} is a Lockgate intent: its events are its services'")
            if first.originator_version <= head.address.version:
                raise RecorderConflict(
                    f"{first.originator_id} is at version {head.address.version}: "
                    f"version {first.originator_version} is taken or behind it",
                    originator_id=first.originator_id,
                )
        messages: list[tuple[str, bytes, dict[str, str]]] = []
        guarded: set[str] = set()
        for token, event in zip(tokens, stored_events, strict=True):
            headers = {TOPIC_HEADER: event.topic}
            if token not in guarded:
                # The server refuses the whole batch when anything was stored on the
                # aggregate (under any tenant token) after the head this insert checked.
                guarded.add(token)
                head = heads[token]
                headers["Nats-Expected-Last-Subject-Sequence"] = str(head.sequence if head else 0)
                headers["Nats-Expected-Last-Subject-Sequence-Subject"] = intent_filter(token, prefix=self._prefix)
            subject = event_subject(
                self._foreign_tenant, token, event.originator_version, FOREIGN_TYPE,
                topic_route(event.topic), prefix=self._prefix,
            )
            messages.append((subject, event.state, headers))
        try:
            ack = await publish_atomically(self._nc, messages, timeout_s=self._timeout_s)
        except EventStoreUnavailable:
            return await self._landed(stored_events, tokens)
        if ack.error is None:
            # An atomic batch takes consecutive sequences, in the order it was published.
            return list(range(ack.seq - len(messages) + 1, ack.seq + 1))
        code, description = ack.error.err_code, ack.error.description
        if code in CONFLICT_CODES:
            raise RecorderConflict(f"an aggregate of this insert moved while it was written ({description})")
        if code == _ATOMIC_DISABLED:
            raise NotSupportedError(
                f"{self._stream} does not allow atomic batches (allow_atomic): "
                f"{len(messages)} events cannot be stored all or nothing"
            )
        if code == _BATCH_TOO_LARGE:
            raise DataError(f"{len(messages)} events are more than one atomic batch holds ({description})")
        raise RecorderUnavailable(f"insert refused: {code} {description}")

    async def _landed(self, stored_events: Sequence[StoredEvent], tokens: list[str]) -> list[int]:
        """The ids of an insert whose acknowledgement was lost, if it was stored."""
        stored: dict[str, dict[int, Notification]] = {}
        ids = []
        for token, event in zip(tokens, stored_events, strict=True):
            if token not in stored:
                stored[token] = {n.originator_version: n for n in await self._aggregate(token)}
            found = stored[token].get(event.originator_version)
            if found is None or (found.topic, found.state) != (event.topic, event.state):
                raise RecorderUnavailable("insert was not acknowledged and is not stored")
            ids.append(found.id)
        return ids


class JetStreamApplicationRecorder(JetStreamAggregateRecorder, ApplicationRecorder):
    """The library's application recorder on one JetStream stream: the stream sequence
    is the notification id (see the module's notes)."""

    def __init__(
        self,
        *,
        connect_options: Mapping[str, Any] | None = None,
        stream: str = STREAM,
        subject_prefix: str = PREFIX,
        api_prefix: str = "$JS.API",
        foreign_tenant: str = FOREIGN_TENANT,
        timeout_s: float = 5.0,
        connect_timeout_s: float = 10.0,
    ) -> None:
        """Connect; the arguments are ``JetStreamAggregateRecorder``'s."""
        super().__init__(
            connect_options=connect_options, stream=stream, subject_prefix=subject_prefix,
            api_prefix=api_prefix, foreign_tenant=foreign_tenant, timeout_s=timeout_s,
            connect_timeout_s=connect_timeout_s,
        )
        self._js: JetStreamContext = self._nc.jetstream(prefix=api_prefix, timeout=timeout_s)
        self._subscriptions: set[JetStreamSubscription] = set()

    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Sequence[int] | None:
        """Store the events as one atomic write; return their notification ids, in order.

        Raises:
            IntegrityError: see ``JetStreamAggregateRecorder.insert_events``, as the others.
        """
        return self._insert(stored_events, kwargs)

    def close(self) -> None:
        """Stop every subscription, then close the connection and the loop's thread."""
        with self._state:
            subscriptions = list(self._subscriptions)
        for subscription in subscriptions:
            subscription.stop()
        super().close()

    def _filters(self, topics: Sequence[str]) -> list[str]:
        """The subject filters of ``topics`` (every event when there are none)."""
        if not topics:
            return [all_events_filter(prefix=self._prefix)]
        filters: list[str] = []
        for topic in topics:
            event_type = event_type_of(topic)
            if event_type is None:
                filters.append(type_filter(FOREIGN_TYPE, topic_route(topic), prefix=self._prefix))
            elif is_subject_token(event_type):
                filters.append(type_filter(event_type, prefix=self._prefix))
                filters.append(legacy_type_filter(event_type, prefix=self._prefix))
            # else: a topic no stored subject can name matches nothing.
        return list(dict.fromkeys(filters))

    def select_notifications(
        self,
        start: int | None,
        limit: int,
        stop: int | None = None,
        topics: Sequence[str] = (),
        *,
        inclusive_of_start: bool = True,
    ) -> Sequence[Notification]:
        """At most ``limit`` notifications from ``start`` (or after it) to ``stop``, of
        ``topics`` only when given, in notification order.

        Raises:
            DataError: a stored message that is not an event.
            OperationalError: the server did not answer.
        """
        first = 1 if start is None else start if inclusive_of_start else start + 1
        first = max(first, 1)
        filters = self._filters(topics)
        if limit <= 0 or not filters or (stop is not None and stop < first):
            return []
        return self._call(self._select_notifications(first, limit, stop, filters, frozenset(topics)))

    async def _select_notifications(
        self, first: int, limit: int, stop: int | None, filters: list[str], topics: frozenset[str]
    ) -> list[Notification]:
        # One paged direct get per filter (the server takes one filter a request), merged.
        pages = await asyncio.gather(*(self._scan(f, first, limit, stop) for f in filters))
        out: list[Notification] = []
        last = 0
        for msg in heapq.merge(*pages, key=_sequence):
            if _sequence(msg) == last:
                continue
            notification = self._stored(msg)
            last = notification.id
            if topics and notification.topic not in topics:
                continue  # another topic whose digest its route shares
            out.append(notification)
            if len(out) == limit:
                break
        return out

    def max_notification_id(self) -> int | None:
        """The sequence of the stream's last event, or ``None`` when it holds none.

        Raises:
            OperationalError: the server did not answer.
        """
        return self._call(self._max_notification_id())

    async def _max_notification_id(self) -> int | None:
        msg = await self._get.last(all_events_filter(prefix=self._prefix))
        return _sequence(msg) if msg is not None else None

    def subscribe(self, gt: int | None = None, topics: Sequence[str] = ()) -> JetStreamSubscription:
        """Notifications after ``gt`` (of ``topics`` when given), stored ones and then new
        ones as they are stored; iterating blocks until there is one or ``stop()``.

        Raises:
            OperationalError: the consumer could not be created.
        """
        filters = self._filters(topics)
        subscription = JetStreamSubscription(self, gt=gt, topics=topics, filters=filters)
        with self._state:
            if self._closed:
                subscription.stop()
            else:
                self._subscriptions.add(subscription)
        return subscription

    def _forget(self, subscription: JetStreamSubscription) -> None:
        with self._state:
            self._subscriptions.discard(subscription)

    def tenant_of(self, originator_id: UUID | str) -> str | None:
        """The tenant token an aggregate's events are stored under (a Lockgate intent's
        tenant; the foreign tenant for another application's), or ``None`` when it has no
        events. Only an intent's first event carries its tenant as a field: for the
        others, this is how a projector learns it.

        Raises:
            DataError: an id that cannot be a subject token.
            OperationalError: the server did not answer.
        """
        token = originator_token(originator_id)
        # Lockgate events this recorder read lately (a subscription's, most often) left
        # their tenant here; a plain dict read is safe beside the loop's writes.
        known = self._tenants.get(token)
        if known is not None:
            return known
        return self._call(self._tenant_of(token))

    async def _tenant_of(self, token: str) -> str | None:
        head = await self._head(token)
        if head is None:
            return None
        if head.address.event_type != FOREIGN_TYPE:
            keep(self._tenants, token, head.address.tenant, TENANTS_KEPT)
        return head.address.tenant

    # -- for subscriptions -----------------------------------------------------------

    @property
    def loop(self) -> LoopThread:
        """The loop this recorder's connection runs on."""
        return self._loop

    @property
    def timeout_s(self) -> float:
        """How long one request to the server may take."""
        return self._timeout_s

    async def _consume(
        self, filters: list[str], start: int, cb: Callable[[Msg], Awaitable[None]]
    ) -> JetStreamContext.PushSubscription:
        """An ordered consumer of ``filters`` from sequence ``start``, delivering to ``cb``."""
        config = ConsumerConfig(
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=start,
            filter_subjects=filters,
        )
        # Ordered: ephemeral, in memory, flow-controlled; nats-py recreates it from the
        # last sequence it delivered when it sees a gap or misses heartbeats.
        return await self._js.subscribe(
            filters[0], stream=self._stream, ordered_consumer=True, config=config, cb=cb,
            idle_heartbeat=SUBSCRIPTION_HEARTBEAT_S,
        )


_Item = Notification | DataError


class JetStreamSubscription(Subscription[JetStreamApplicationRecorder]):
    """An iterator of notifications after ``gt``: an ordered consumer of the stream that
    starts at ``gt + 1``, filtered to the topics' subjects; ``stop()`` ends it at once."""

    def __init__(
        self,
        recorder: JetStreamApplicationRecorder,
        *,
        gt: int | None,
        topics: Sequence[str],
        filters: list[str],
    ) -> None:
        """Create the consumer (delivery starts at once, into a bounded buffer).

        Raises:
            OperationalError: the consumer could not be created.
        """
        super().__init__(recorder=recorder, gt=gt, topics=topics)
        self._loop = recorder.loop
        self._timeout_s = recorder.timeout_s
        self._after = gt or 0
        self._wanted = frozenset(topics)
        self._lock = threading.Lock()
        self._buffer: deque[_Item] = deque()
        self._waiting: concurrent.futures.Future[list[_Item]] | None = None
        self._queue: asyncio.Queue[_Item] | None = None
        self._consumer: JetStreamContext.PushSubscription | None = None
        if filters:
            self._consumer = recorder._call(self._open(filters))
        else:
            super().stop()  # topics no subject can name: nothing will ever come

    async def _open(self, filters: list[str]) -> JetStreamContext.PushSubscription:
        self._queue = asyncio.Queue(maxsize=SUBSCRIPTION_BUFFER)
        return await self._recorder._consume(filters, self._after + 1, self._on_message)

    async def _on_message(self, msg: Msg) -> None:
        queue = self._queue
        if queue is None:
            return
        seq = msg.metadata.sequence.stream
        if seq <= self._after:
            return  # a consumer recreated from an earlier sequence sends it again
        self._after = seq
        item: _Item
        try:
            item = self._recorder._notification(msg.subject, msg.headers or {}, msg.data, seq)
        except DataError as exc:
            item = exc
        else:
            if self._wanted and item.topic not in self._wanted:
                return  # another topic whose digest its route shares
        # Waits while the buffer is full: nats-py then holds its flow-control reply
        # and the server stops sending.
        await queue.put(item)

    async def _take(self) -> list[_Item]:
        queue = self._queue
        if queue is None:
            return []
        items = [await queue.get()]
        while len(items) < _TAKE and not queue.empty():
            items.append(queue.get_nowait())
        return items

    def __next__(self) -> Notification:
        """The next notification, waiting for it to be stored if need be.

        Raises:
            StopIteration: the subscription was stopped.
            DataError: the stream holds a message that is not an event.
        """
        while True:
            with self._lock:
                if self._has_been_stopped:
                    raise StopIteration
                if self._buffer:
                    item = self._buffer.popleft()
                    break
                try:
                    waiting = self._loop.submit(self._take())
                except LoopClosed:
                    super().stop()
                    raise StopIteration from None
                self._waiting = waiting
            try:
                items = waiting.result()
            except concurrent.futures.CancelledError:
                continue  # stop() cancelled the wait
            with self._lock:
                self._waiting = None
                self._buffer.extend(items)
        if isinstance(item, DataError):
            self.stop()
            raise item
        return item

    def stop(self) -> None:
        """End the iteration (a waiting ``next`` returns at once) and remove the consumer."""
        with self._lock:
            first = not self._has_been_stopped
            super().stop()
            waiting, self._waiting = self._waiting, None
        if waiting is not None:
            waiting.cancel()
        if not first:
            return
        self._recorder._forget(self)
        try:
            closing = self._loop.submit(self._close())
        except LoopClosed:
            return
        if not self._loop.in_loop_thread():
            with contextlib.suppress(concurrent.futures.TimeoutError, concurrent.futures.CancelledError):
                closing.result(self._timeout_s)

    async def _close(self) -> None:
        consumer, self._consumer = self._consumer, None
        self._queue = None
        if consumer is not None:
            # The server deletes an ordered consumer once nobody listens to it.
            with contextlib.suppress(nats.errors.Error):
                await consumer.unsubscribe()


_VIEWS = (
    "a projection's views and their tracking records live in SQLite or PostgreSQL: give the "
    "projection its own PERSISTENCE_MODULE (eventsourcing.sqlite, eventsourcing.postgres); "
    "this module records events only"
)


class Factory(InfrastructureFactory[TrackingRecorder]):
    """``PERSISTENCE_MODULE=lockgate.eventstore.recorder``: events (and, when configured,
    snapshots) on JetStream streams laid out like ``LG_EVENTS``.

    The environment names are Lockgate's (``lockgate.runtime.settings``), so a process
    ``lockgate run`` starts connects as its own user: ``LOCKGATE_NATS_URL``,
    ``LOCKGATE_NATS_USER``, ``LOCKGATE_NATS_PASSWORD``, ``LOCKGATE_CREDENTIALS_FILE``,
    ``LOCKGATE_INBOX_PREFIX``; and the recorder's own: ``LOCKGATE_JS_API_PREFIX``
    (default: the credentials', else ``$JS.API``), ``LOCKGATE_EVENTS_STREAM``
    (``LG_EVENTS``), ``LOCKGATE_EVENTS_SUBJECT_PREFIX`` (``lg.evt``),
    ``LOCKGATE_FOREIGN_TENANT`` (``foreign``), ``LOCKGATE_SNAPSHOTS_STREAM`` (none:
    snapshotting is refused), ``LOCKGATE_SNAPSHOTS_SUBJECT_PREFIX`` (``lg.snap``),
    ``LOCKGATE_RECORDER_TIMEOUT_S`` (5), ``LOCKGATE_RECORDER_CONNECT_TIMEOUT_S`` (10). As everywhere in the library, a name prefixed
    with the application's (``LOCKGATERECORD_LOCKGATE_NATS_URL``) wins.
    """

    NATS_URL = "LOCKGATE_NATS_URL"
    NATS_USER = "LOCKGATE_NATS_USER"
    NATS_PASSWORD = "LOCKGATE_NATS_PASSWORD"
    CREDENTIALS_FILE = "LOCKGATE_CREDENTIALS_FILE"
    INBOX_PREFIX = "LOCKGATE_INBOX_PREFIX"
    JS_API_PREFIX = "LOCKGATE_JS_API_PREFIX"
    EVENTS_STREAM = "LOCKGATE_EVENTS_STREAM"
    EVENTS_SUBJECT_PREFIX = "LOCKGATE_EVENTS_SUBJECT_PREFIX"
    FOREIGN_TENANT = "LOCKGATE_FOREIGN_TENANT"
    SNAPSHOTS_STREAM = "LOCKGATE_SNAPSHOTS_STREAM"
    SNAPSHOTS_SUBJECT_PREFIX = "LOCKGATE_SNAPSHOTS_SUBJECT_PREFIX"
    TIMEOUT_S = "LOCKGATE_RECORDER_TIMEOUT_S"
    CONNECT_TIMEOUT_S = "LOCKGATE_RECORDER_CONNECT_TIMEOUT_S"

    def __init__(self, env: Environment | EnvType | None) -> None:
        """Read nothing yet: each recorder reads the environment when it is made."""
        super().__init__(env)
        self._made: list[JetStreamAggregateRecorder] = []
        self._lock = threading.Lock()

    def _settings(self) -> Settings:
        """Lockgate's settings, with what the library's environment says (it holds
        ``os.environ`` too, and application-prefixed names first)."""
        given: dict[str, Any] = {
            "nats_url": self.env.get(self.NATS_URL),
            "nats_user": self.env.get(self.NATS_USER),
            "nats_password": self.env.get(self.NATS_PASSWORD),
            "credentials_file": self.env.get(self.CREDENTIALS_FILE),
            "inbox_prefix": self.env.get(self.INBOX_PREFIX),
        }
        if given["credentials_file"]:
            given["credentials_file"] = Path(given["credentials_file"])
        return Settings(**{k: v for k, v in given.items() if v})

    def _options(self, stream_key: str, default_stream: str, prefix_key: str, default_prefix: str) -> dict[str, Any]:
        settings = self._settings()
        stream = self.env.get(stream_key) or default_stream
        return {
            "connect_options": {**settings.connect_options(), "name": f"recorder.{stream}"},
            "stream": stream,
            "subject_prefix": self.env.get(prefix_key) or default_prefix,
            "api_prefix": self.env.get(self.JS_API_PREFIX) or settings.js_prefix,
            "foreign_tenant": self.env.get(self.FOREIGN_TENANT) or FOREIGN_TENANT,
            "timeout_s": float(self.env.get(self.TIMEOUT_S) or 5.0),
            "connect_timeout_s": float(self.env.get(self.CONNECT_TIMEOUT_S) or 10.0),
        }

    def _keep(self, recorder: JetStreamAggregateRecorder) -> None:
        with self._lock:
            self._made.append(recorder)

    def aggregate_recorder(self, purpose: str = "events") -> AggregateRecorder:
        """The events stream's aggregate recorder, or (``purpose="snapshots"``) the
        snapshots stream's.

        Raises:
            NotSupportedError: snapshots, and no ``LOCKGATE_SNAPSHOTS_STREAM``.
            ProgrammingError: another purpose.
        """
        if purpose == "events":
            options = self._options(self.EVENTS_STREAM, STREAM, self.EVENTS_SUBJECT_PREFIX, PREFIX)
        elif purpose == "snapshots":
            if not self.env.get(self.SNAPSHOTS_STREAM):
                raise NotSupportedError(
                    f"snapshots need a stream of their own: set {self.SNAPSHOTS_STREAM} "
                    f"(and {self.SNAPSHOTS_SUBJECT_PREFIX}, default {SNAPSHOTS_PREFIX})"
                )
            options = self._options(self.SNAPSHOTS_STREAM, "", self.SNAPSHOTS_SUBJECT_PREFIX, SNAPSHOTS_PREFIX)
        else:
            raise ProgrammingError(f"no recorder for {purpose!r}: only events and snapshots")
        recorder = JetStreamAggregateRecorder(**options)
        self._keep(recorder)
        return recorder

    def application_recorder(self) -> JetStreamApplicationRecorder:
        """The events stream's application recorder."""
        recorder = JetStreamApplicationRecorder(
            **self._options(self.EVENTS_STREAM, STREAM, self.EVENTS_SUBJECT_PREFIX, PREFIX)
        )
        self._keep(recorder)
        return recorder

    def tracking_recorder(self, tracking_recorder_class: type[TrackingRecorder] | None = None) -> TrackingRecorder:
        """Not offered.

        Raises:
            NotSupportedError: always (views live in SQL databases).
        """
        raise NotSupportedError(_VIEWS)

    def process_recorder(self) -> ProcessRecorder:
        """Not offered.

        Raises:
            NotSupportedError: always (views live in SQL databases).
        """
        raise NotSupportedError(_VIEWS)

    def close(self) -> None:
        """Close every recorder this factory made."""
        with self._lock:
            made, self._made = self._made, []
        for recorder in made:
            recorder.close()
