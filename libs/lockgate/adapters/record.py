"""The record as an adapter reads it: one intent of its own capability at a time, by asking.

An adapter checks every order against the intent's stored events, but may not read the
event store itself: a batched direct get names its filter in the request body, where no
broker permission can scope it, so it would open every tenant's and every capability's
record. Instead the executor answers ``lg.record.<capability>``, which the broker lets
only that capability's adapter publish, with the events of an intent of that capability
and nothing else.
"""

from __future__ import annotations

from typing import Protocol

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from lockgate.contracts import subjects
from lockgate.contracts.messages import IntentRecord, RecordRequest, StoredEvent
from lockgate.core.ids import is_subject_token
from lockgate.eventstore.base import (
    AggregateHistory,
    EventStore,
    EventStoreUnavailable,
    RecordedEvent,
)

_record = msgspec.json.Decoder(IntentRecord)


class _Refused(msgspec.Struct):
    error: str = ""


_refused = msgspec.json.Decoder(_Refused)


class Record(Protocol):
    """What an adapter reads the record with: ``OrderRecord``, or any ``EventStore``."""

    async def load(self, tenant: str, intent_id: str, *, at_least: int = 0) -> AggregateHistory:
        """Every event of the intent, in order (empty when unknown or not the reader's);
        never ending before ``at_least`` when the intent has events."""
        ...


class OrderRecord:
    """Loads intents of one capability through the executor (the ``load`` of an ``EventStore``)."""

    def __init__(self, nc: Client, capability: str, *, timeout_s: float = 5.0) -> None:
        self._nc = nc
        self._subject = subjects.record(capability)
        self._timeout_s = timeout_s

    async def load(self, tenant: str, intent_id: str, *, at_least: int = 0) -> AggregateHistory:
        """The intent's events, or none when it is not an intent of this capability.

        ``at_least``: the version the order names; the executor reads where no replica
        lags rather than answer with less.

        Raises:
            EventStoreUnavailable: nobody answered (the executor is down or busy), or
                the executor said it could not answer now.
        """
        try:
            request = RecordRequest(tenant=tenant, intent_id=intent_id, at_least=at_least)
            reply = await self._nc.request(self._subject, msgspec.json.encode(request),
                                           timeout=self._timeout_s)
            refused = _refused.decode(reply.data).error
            if refused:
                raise EventStoreUnavailable(f"{self._subject} answered {refused}")
            answer = _record.decode(reply.data)
        except (NatsTimeout, NoRespondersError) as exc:
            raise EventStoreUnavailable(f"no answer on {self._subject}") from exc
        except msgspec.MsgspecError as exc:
            raise EventStoreUnavailable(f"unreadable answer on {self._subject}: {exc}") from exc
        return AggregateHistory(tenant, intent_id, tuple(
            RecordedEvent(tenant, intent_id, e.version, e.event_type, e.event_id, e.data, e.sequence)
            for e in answer.events
        ))


async def answer_record(store: EventStore, subject: str, body: bytes) -> bytes:
    """The executor's answer to ``lg.record.<capability>``: the intent's events, if it is one of
    that capability's (the first event names the tool), else none."""
    try:
        capability = subjects.parse_record(subject)
        request = msgspec.json.decode(body, type=RecordRequest)
        if not (is_subject_token(request.tenant) and is_subject_token(request.intent_id)):
            raise ValueError("not an intent")
    except (subjects.NotACommandSubject, msgspec.MsgspecError, ValueError):
        return _NONE
    history = await store.load(request.tenant, request.intent_id, at_least=request.at_least)
    if not history.events or _tool(history.events[0]) != capability:
        return _NONE
    return msgspec.json.encode(IntentRecord(events=tuple(
        StoredEvent(version=e.version, event_type=e.event_type, event_id=e.event_id, data=e.data,
                    sequence=e.sequence)
        for e in history.events
    )))


_NONE = msgspec.json.encode(IntentRecord())


class _First(msgspec.Struct):
    class _Data(msgspec.Struct):
        tool: str = ""

    data: _Data = msgspec.field(default_factory=_Data)


def _tool(first: RecordedEvent) -> str:
    """The capability an intent is for, from its first event (without decoding the rest)."""
    try:
        return msgspec.json.decode(first.data, type=_First).data.tool
    except msgspec.MsgspecError:
        return ""


async def serve_record(nc: Client, store: EventStore) -> Subscription:
    """Answer every ``lg.record.*`` on ``nc`` from ``store`` (what the executor does; for tests)."""

    async def on_request(msg: Msg) -> None:
        await msg.respond(await answer_record(store, msg.subject, msg.data))

    return await nc.subscribe(subjects.RECORD_ALL, cb=on_request)
