"""The event store on JetStream: one subject per event, optimistic concurrency per aggregate.

Append publishes with ``Nats-Msg-Id`` (the event id),
``Nats-Expected-Last-Subject-Sequence`` (the store sequence of the last event loaded)
and ``Nats-Expected-Last-Subject-Sequence-Subject`` (the aggregate's filter), so the
server refuses a stale writer with error 10071 across event types. Several events go
as one atomic batch. Load is one direct-get ``multi_last`` request: its cost does not
grow with the stream because every event has a subject of its own. Its replies come
to one inbox subscription the store keeps for its connection (a token per request),
so a load is one publish, not a subscribe, a publish and an unsubscribe.

On a replicated stream any current replica answers a direct get, and one that has not
applied the latest writes yet answers with an older history (the server guarantees no
read-your-writes for direct gets; nats-server 2.15 has no ``min_last_seq`` to ask for
one). A caller that knows the aggregate reached a version (the event that triggered it
was delivered at it; a conflict said a later one exists) says so with ``at_least``; a
history that ends before it is completed with message gets (``STREAM.MSG.GET``), which
only the stream's leader answers. The fast path stays one direct get.

A partitioned deployment keeps its events in K streams (``lockgate.eventstore.partitions``):
the store sends each load and append to its intent's stream, and scans each in turn.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from nats.js.api import StorageType, StreamConfig

from lockgate.core.bounded import keep
from lockgate.core.ids import is_subject_token, random_id
from lockgate.eventstore.base import (
    AggregateHistory,
    ConcurrencyConflict,
    EventStoreUnavailable,
    NewEvent,
    RecordedEvent,
)
from lockgate.eventstore.partitions import STREAM as STREAM
from lockgate.eventstore.partitions import Partitions
from lockgate.eventstore.subjects import (
    PREFIX,
    aggregate_filter,
    all_events_filter,
    event_subject,
    first_event_filter,
    intent_filter,
    parse_event_subject,
)

#: Server errors that mean "someone else appended first". 10164 is what an R3 stream
#: answers while another proposal for the same aggregate is in flight.
CONFLICT_CODES = frozenset({10071, 10164})
#: A retried batch whose message ids are already stored is refused with 10201 before
#: the sequence check: like a conflict, the reload tells whether it was ours.
_RELOAD_CODES = CONFLICT_CODES | {10201}
#: ``multi_last`` answers at most this many subjects; longer aggregates are paged.
_MULTI_LAST_LIMIT = 1024
_PAGE = 1024
#: What an append reports as a conflict when the server already held its event id.
_OURS = "duplicate event id"
#: Aggregates a store remembers the history of (least recently used go first).
HISTORIES_KEPT = 8192


class PubAck(msgspec.Struct):
    """The server's answer to a publish (the commit of a batch): where it went, or why not."""

    class _Error(msgspec.Struct):
        code: int = 0
        err_code: int = 0
        description: str = ""

    stream: str = ""
    seq: int = 0
    error: _Error | None = None
    duplicate: bool = False


_ack_decoder = msgspec.json.Decoder(PubAck)


class _StoredMessage(msgspec.Struct):
    subject: str
    seq: int
    hdrs: str = ""
    data: str = ""


class MsgGetAnswer(msgspec.Struct):
    """The leader's answer to ``STREAM.MSG.GET``: the message, or why not (404: none)."""

    message: _StoredMessage | None = None
    error: PubAck._Error | None = None


_msg_get_decoder = msgspec.json.Decoder(MsgGetAnswer)


def _headers(encoded: str) -> dict[str, str]:
    """The headers of a message get's answer (base64 of ``NATS/1.0\\r\\nKey: value...``)."""
    lines = base64.b64decode(encoded).decode("utf-8", "replace").split("\r\n")[1:]
    pairs = (line.split(":", 1) for line in lines if ":" in line)
    return {k.strip(): v.strip() for k, v in pairs}


_encode = msgspec.json.encode


def _time_out(status: asyncio.Future[Any]) -> None:
    if not status.done():
        status.set_exception(TimeoutError())


class _Replies:
    """What one direct get received so far, and its status once the server sent it."""

    __slots__ = ("messages", "status")

    def __init__(self, status: asyncio.Future[tuple[str, list[Msg]]]) -> None:
        self.status = status
        self.messages: list[Msg] = []


def events_stream_config(
    name: str = STREAM, *, replicas: int = 1, duplicate_window_s: float = 120.0,
    subject_prefix: str = PREFIX,
) -> StreamConfig:
    """Return the configuration of the events stream (its subjects: ``<subject_prefix>.>``)."""
    return StreamConfig(
        name=name,
        subjects=[all_events_filter(prefix=subject_prefix)],
        storage=StorageType.FILE,
        num_replicas=replicas,
        allow_direct=True,
        allow_atomic=True,
        duplicate_window=duplicate_window_s,
        deny_delete=True,
    )


def partition_stream_configs(
    partitions: Partitions, *, replicas: int = 1, duplicate_window_s: float = 120.0,
) -> list[StreamConfig]:
    """The configuration of every events stream of ``partitions``, in partition order."""
    return [events_stream_config(p.stream, replicas=replicas, duplicate_window_s=duplicate_window_s,
                                 subject_prefix=p.prefix) for p in partitions]


def recorded_event(
    subject: str, headers: dict[str, str], data: bytes, sequence: int, *, prefix: str = PREFIX
) -> RecordedEvent:
    """The stored event a direct get or a consumer delivered (subject, headers, sequence)."""
    address = parse_event_subject(subject, prefix=prefix)
    return RecordedEvent(
        tenant=address.tenant,
        intent_id=address.intent_id,
        version=address.version,
        event_type=address.event_type,
        event_id=headers.get("Nats-Msg-Id", ""),
        data=data,
        sequence=sequence,
    )


class DirectGet:
    """Direct-get requests to one stream over one connection, answered on one inbox.

    The inbox is subscribed on the first request (``<inbox>.*``, a token per request),
    so a request is one publish.
    """

    def __init__(
        self, nc: Client, stream: str, *, timeout_s: float = 5.0, api_prefix: str = "$JS.API"
    ) -> None:
        """``api_prefix``: the JetStream API as this connection's account reaches it."""
        self._nc = nc
        self._timeout_s = timeout_s
        self._api = f"{api_prefix}.DIRECT.GET.{stream}"
        self._msg_get = f"{api_prefix}.STREAM.MSG.GET.{stream}"
        #: Direct gets waiting for their replies, by the reply subject's last token.
        self._waiting: dict[str, _Replies] = {}
        self._tokens = itertools.count()
        self._inbox: str | None = None
        self._inbox_ready = asyncio.Lock()

    async def request(self, request: dict[str, Any]) -> tuple[str, list[Msg]]:
        """Send one (batched) direct get; return its status and the messages before it.

        Raises:
            EventStoreUnavailable: no status within the timeout.
        """
        inbox = await self._replies_inbox()
        token = str(next(self._tokens))
        loop = asyncio.get_running_loop()
        replies = _Replies(loop.create_future())
        self._waiting[token] = replies
        try:
            await self._nc.publish(self._api, _encode(request), reply=f"{inbox}.{token}")
            # A timer on the future, not asyncio.wait_for: the same timeout for about
            # half the CPU (wait_for wraps and watches the future on every call).
            timer = loop.call_later(self._timeout_s, _time_out, replies.status)
            try:
                return await replies.status
            except TimeoutError as exc:
                raise EventStoreUnavailable("direct get timed out") from exc
            finally:
                timer.cancel()
        finally:
            self._waiting.pop(token, None)

    async def last(self, subject_filter: str) -> Msg | None:
        """The last message stored on a subject matching ``subject_filter`` (wildcards
        allowed), or ``None`` when there is none. One request, answered with one message.

        Raises:
            EventStoreUnavailable: no answer, or an error status.
        """
        request = _encode({"last_by_subj": subject_filter})
        try:
            msg = await self._nc.request(self._api, request, timeout=self._timeout_s)
        except (NatsTimeout, NoRespondersError) as exc:
            raise EventStoreUnavailable(f"direct get not answered: {exc!r}") from exc
        status = (msg.headers or {}).get("Status")
        if status == "404":
            return None
        if status:
            raise EventStoreUnavailable(f"direct get answered status {status}")
        return msg

    async def leader_next(self, seq: int, subject_filter: str) -> tuple[str, dict[str, str], bytes, int] | None:
        """The first message at or after ``seq`` on ``subject_filter``, as the stream's
        leader holds it (``STREAM.MSG.GET``: only the leader answers), or ``None``.

        Returns ``(subject, headers, data, sequence)``.

        Raises:
            EventStoreUnavailable: no answer (an election, say), or an error but 404.
        """
        request = _encode({"seq": seq, "next_by_subj": subject_filter})
        try:
            msg = await self._nc.request(self._msg_get, request, timeout=self._timeout_s)
        except (NatsTimeout, NoRespondersError) as exc:
            raise EventStoreUnavailable(f"message get not answered: {exc!r}") from exc
        answer = _msg_get_decoder.decode(msg.data)
        if answer.error is not None:
            if answer.error.code == 404:
                return None
            raise EventStoreUnavailable(
                f"message get refused: {answer.error.err_code} {answer.error.description}")
        if answer.message is None:
            raise EventStoreUnavailable("message get answered neither a message nor an error")
        m = answer.message
        data = base64.b64decode(m.data) if m.data else b""
        return m.subject, _headers(m.hdrs) if m.hdrs else {}, data, m.seq

    async def _replies_inbox(self) -> str:
        """The inbox every direct get of this store is answered on (subscribed once)."""
        if self._inbox is None:
            async with self._inbox_ready:
                if self._inbox is None:
                    inbox = self._nc.new_inbox()
                    await self._nc.subscribe(f"{inbox}.*", cb=self._on_reply)
                    self._inbox = inbox
        return self._inbox

    async def _on_reply(self, msg: Msg) -> None:
        replies = self._waiting.get(msg.subject.rpartition(".")[2])
        if replies is None or replies.status.done():
            return  # a late reply to a get that timed out
        status = (msg.headers or {}).get("Status")
        if status:
            replies.status.set_result((status, replies.messages))
        else:
            replies.messages.append(msg)


async def publish_atomically(
    nc: Client, messages: Sequence[tuple[str, bytes, dict[str, str]]], *, timeout_s: float
) -> PubAck:
    """Publish ``(subject, data, headers)`` messages as one write and return the server's ack.

    One message is one request; several are an atomic batch (``Nats-Batch-Id``,
    ``-Sequence``, ``-Commit`` added here), of which only the commit is acknowledged:
    all are stored or none. Concurrency guards go in the callers' headers.

    Raises:
        EventStoreUnavailable: no acknowledgement (the write may or may not have landed).
    """
    try:
        if len(messages) == 1:
            subject, data, headers = messages[0]
            reply = await nc.request(subject, data, headers=headers, timeout=timeout_s)
            return _ack_decoder.decode(reply.data)
        batch_id = random_id()
        *body, (last_subject, last_data, last_headers) = messages
        for i, (subject, data, headers) in enumerate(body, start=1):
            await nc.publish(subject, data, headers={
                **headers, "Nats-Batch-Id": batch_id, "Nats-Batch-Sequence": str(i),
            })
        commit = {
            **last_headers,
            "Nats-Batch-Id": batch_id,
            "Nats-Batch-Sequence": str(len(messages)),
            "Nats-Batch-Commit": "1",
        }
        reply = await nc.request(last_subject, last_data, headers=commit, timeout=timeout_s)
        return _ack_decoder.decode(reply.data)
    except (TimeoutError, NatsTimeout, NoRespondersError) as exc:
        raise EventStoreUnavailable(f"append not acknowledged: {exc!r}") from exc


@dataclass(frozen=True)
class _Route:
    """Where one partition's events are: its stream, subject prefix and direct gets."""

    stream: str
    prefix: str
    get: DirectGet


class JetStreamEventStore:
    """An ``EventStore`` on one JetStream stream, or on K partitions of it."""

    def __init__(
        self, nc: Client, *, stream: str = STREAM, timeout_s: float = 5.0, api_prefix: str = "$JS.API",
        subject_prefix: str = PREFIX, partitions: Partitions | None = None,
    ) -> None:
        """``api_prefix``: the JetStream API as this connection's account reaches it
        (``lg.jsapi`` in an account that imports it; see ``lockgate.operations.roles``).
        ``subject_prefix``: the stream's subjects are ``<subject_prefix>.>``.
        ``partitions``: the events streams of a partitioned deployment
        (``lockgate.eventstore.partitions``; ``stream`` and ``subject_prefix`` are then
        its stem and prefix); by default the one stream."""
        self._nc = nc
        self._timeout_s = timeout_s
        self.partitions = partitions or Partitions(1, stream, subject_prefix)
        self._routes = tuple(
            _Route(p.stream, p.prefix, DirectGet(nc, p.stream, timeout_s=timeout_s, api_prefix=api_prefix))
            for p in self.partitions)
        #: The plain prefix: it parses every partition's subjects.
        self._prefix = self.partitions.subject_prefix
        #: Loads a replica answered behind what the caller knew, completed by the leader.
        self.behind = 0
        #: Histories this store loaded or appended lately (loads go on from them).
        self._histories: OrderedDict[tuple[str, str], AggregateHistory] = OrderedDict()

    def _route(self, intent_id: str) -> _Route:
        return self._routes[self.partitions.index_of(intent_id)]

    async def load(self, tenant: str, intent_id: str, *, at_least: int = 0) -> AggregateHistory:
        """Return every event of the aggregate, in version order (at ``at_least`` or later).

        An aggregate this store loaded or appended lately is loaded from where it left
        off: stored events never change and are never deleted (the stream denies it), so
        its history is the one known plus whatever was stored after its last sequence,
        asked for with one direct get (``next_by_subj`` from that sequence), which answers
        with only the new events, or with none. A history that ends before ``at_least``
        (a replica behind the leader may have answered) is completed by the leader.

        Raises:
            EventStoreUnavailable: no answer.
        """
        key = (tenant, intent_id)
        known = self._histories.get(key)
        if known is not None:
            history = await self._load_after(known)
        else:
            history = await self._load_whole(tenant, intent_id)
        if history.version < at_least:
            self.behind += 1
            history = await self._leader_after(history)
        self._keep(history)
        return history

    async def load_latest(self, tenant: str, intent_id: str) -> AggregateHistory:
        """The aggregate's history with every event the stream's leader holds after what
        a replica answered (one message get per event the replica lacked, and one more
        to learn there is none)."""
        history = await self._leader_after(await self.load(tenant, intent_id))
        self._keep(history)
        return history

    async def tenant_of(self, intent_id: str) -> str | None:
        """The tenant of the aggregate ``intent_id`` names (``TenantLookup``): one direct
        get of its last event, whatever its tenant, on the intent's partition."""
        if not is_subject_token(intent_id):
            return None
        route = self._route(intent_id)
        msg = await route.get.last(intent_filter(intent_id, prefix=route.prefix))
        if msg is None:
            return None
        return parse_event_subject((msg.headers or {})["Nats-Subject"], prefix=self._prefix).tenant

    async def _leader_after(self, known: AggregateHistory) -> AggregateHistory:
        """``known`` and the events stored after it, as the stream's leader holds them.

        One message get per event, from the sequence after ``known``'s last: for the few
        events a lagging replica had not applied yet, never on the path of a current one.
        """
        events = list(known.events)
        seq = known.last_sequence + 1
        route = self._route(known.intent_id)
        subject_filter = aggregate_filter(known.tenant, known.intent_id, prefix=route.prefix)
        while (found := await route.get.leader_next(seq, subject_filter)) is not None:
            subject, headers, data, sequence = found
            event = recorded_event(subject, headers, data, sequence, prefix=self._prefix)
            # An archived intent's history starts at its mark: only the order is checked.
            if events and event.version != events[-1].version + 1:
                raise EventStoreUnavailable(
                    f"{known.tenant}/{known.intent_id}: version {event.version} stored after "
                    f"{events[-1].version}")
            events.append(event)
            seq = sequence + 1
        return replace(known, events=tuple(events))

    def _keep(self, history: AggregateHistory) -> None:
        if not history.events:
            return
        key = (history.tenant, history.intent_id)
        kept = self._histories.get(key)
        if kept is not None and kept.version > history.version:
            return  # a load overtaken by an append of this process
        keep(self._histories, key, history, HISTORIES_KEPT)

    async def _load_after(self, known: AggregateHistory) -> AggregateHistory:
        """``known`` and the aggregate's events stored after it."""
        route = self._route(known.intent_id)
        status, messages = await self._direct_get({
            "seq": known.last_sequence + 1,
            "next_by_subj": aggregate_filter(known.tenant, known.intent_id, prefix=route.prefix),
            "batch": _PAGE,
        }, route)
        if status not in ("204", "404"):
            raise EventStoreUnavailable(f"direct get answered status {status}")
        later = sorted((self._recorded(m) for m in messages), key=lambda e: e.sequence)
        contiguous = all(e.version == known.version + i for i, e in enumerate(later, start=1))
        if len(later) >= _PAGE or not contiguous:
            return await self._load_whole(known.tenant, known.intent_id)
        return replace(known, events=known.events + tuple(later))

    async def _load_whole(self, tenant: str, intent_id: str) -> AggregateHistory:
        route = self._route(intent_id)
        status, messages = await self._direct_get(
            {"multi_last": [aggregate_filter(tenant, intent_id, prefix=route.prefix)]}, route
        )
        if status == "413":  # more subjects than multi_last answers: page through them
            messages = await self._paged(tenant, intent_id)
        elif status not in ("204", "404"):
            raise EventStoreUnavailable(f"direct get answered status {status}")
        events = sorted((self._recorded(m) for m in messages), key=lambda e: e.sequence)
        return AggregateHistory(tenant, intent_id, tuple(events))

    async def scan(self, start_sequence: int = 1) -> AsyncIterator[RecordedEvent]:
        """Every stored event from ``start_sequence`` on, in store order (for audits and
        replays); of a partitioned store, each partition's in turn, each from there."""
        for index in range(len(self._routes)):
            async for event in self.scan_partition(index, start_sequence):
                yield event

    async def scan_partition(self, index: int, start_sequence: int = 1) -> AsyncIterator[RecordedEvent]:
        """The events of partition ``index`` from ``start_sequence`` on, in its order."""
        route = self._routes[index]
        seq = start_sequence
        while True:
            status, page = await self._direct_get(
                {"seq": seq, "next_by_subj": all_events_filter(prefix=route.prefix), "batch": _PAGE},
                route)
            for msg in page:
                yield self._recorded(msg)
            if not page or status != "204" or len(page) < _PAGE:
                return
            seq = int((page[-1].headers or {})["Nats-Sequence"]) + 1

    async def _paged(self, tenant: str, intent_id: str) -> list[Msg]:
        route = self._route(intent_id)
        status, first = await self._direct_get(
            {"multi_last": [first_event_filter(tenant, intent_id, prefix=route.prefix)]}, route
        )
        if not first:
            raise EventStoreUnavailable(f"aggregate {tenant}/{intent_id} has no first event")
        seq = int(first[0].headers["Nats-Sequence"]) if first[0].headers else 1
        out: list[Msg] = []
        while True:
            status, page = await self._direct_get(
                {"seq": seq, "next_by_subj": aggregate_filter(tenant, intent_id, prefix=route.prefix),
                 "batch": _PAGE}, route
            )
            out.extend(page)
            if not page or status != "204":
                return out
            seq = int(page[-1].headers["Nats-Sequence"]) + 1 if page[-1].headers else seq
            if len(page) < _PAGE:
                return out

    async def _direct_get(self, request: dict[str, Any], route: _Route) -> tuple[str, list[Msg]]:
        """Send one batched direct-get to ``route``'s stream; collect replies until its status."""
        return await route.get.request(request)

    def _recorded(self, msg: Msg) -> RecordedEvent:
        headers = msg.headers or {}
        return recorded_event(
            headers["Nats-Subject"], headers, msg.data, int(headers["Nats-Sequence"]),
            prefix=self._prefix,
        )

    async def append(
        self, history: AggregateHistory, events: Sequence[NewEvent]
    ) -> AggregateHistory:
        """Append ``events`` after ``history`` as one atomic write."""
        if not events:
            return history
        prefix = self._route(history.intent_id).prefix
        subjects = [
            event_subject(history.tenant, history.intent_id, history.version + i, e.event_type,
                          e.route, prefix=prefix)
            for i, e in enumerate(events, start=1)
        ]
        guard = {
            "Nats-Expected-Last-Subject-Sequence": str(history.last_sequence),
            "Nats-Expected-Last-Subject-Sequence-Subject": aggregate_filter(
                history.tenant, history.intent_id, prefix=prefix
            ),
        }
        try:
            ack = await self._publish(subjects, events, guard)
        except EventStoreUnavailable:
            # The write may have landed; the reload below tells.
            ack = None
        if ack is not None and ack.error is None and ack.duplicate:
            # The server already holds a message with this event id. Only if it sits
            # exactly where this append would put it is that success; an event id
            # reused at another position must not pass for an append.
            ack = PubAck(error=PubAck._Error(err_code=10071, description=_OURS))
        if ack is not None and ack.error is None:
            last = ack.seq
            recorded = tuple(
                RecordedEvent(
                    history.tenant,
                    history.intent_id,
                    history.version + i,
                    e.event_type,
                    e.event_id,
                    e.data,
                    last - len(events) + i,
                )
                for i, e in enumerate(events, start=1)
            )
            appended = replace(history, events=history.events + recorded)
            self._keep(appended)
            return appended
        if ack is not None and ack.error is not None and ack.error.err_code not in _RELOAD_CODES:
            raise EventStoreUnavailable(
                f"append refused: {ack.error.err_code} {ack.error.description}"
            )
        # A conflict, or no answer. A retried append whose first ack was lost comes
        # back as a conflict too: our own events at the head mean it landed. A refusal
        # says an event follows ``history``: a replica that has not applied it yet must
        # not answer for the store.
        later = history.version + 1 if ack is not None and ack.error is not None \
            and ack.error.err_code in CONFLICT_CODES and ack.error.description != _OURS else 0
        current = await self.load(history.tenant, history.intent_id, at_least=later)
        mine = current.events[history.version : history.version + len(events)]
        if [e.event_id for e in mine] == [e.event_id for e in events]:
            return replace(history, events=current.events[: history.version + len(events)])
        if ack is None:
            raise EventStoreUnavailable("append was not acknowledged and did not land")
        raise ConcurrencyConflict(history.tenant, history.intent_id, history.version)

    async def _publish(
        self, subjects: list[str], events: Sequence[NewEvent], guard: dict[str, str]
    ) -> PubAck:
        # Atomic batch: the guard on the first message covers the whole batch.
        messages = [
            (subject, event.data, {"Nats-Msg-Id": event.event_id, **(guard if i == 0 else {})})
            for i, (subject, event) in enumerate(zip(subjects, events, strict=True))
        ]
        return await publish_atomically(self._nc, messages, timeout_s=self._timeout_s)
