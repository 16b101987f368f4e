"""The library's own recorder and application test cases against the JetStream recorder,
and Lockgate's events coming out of the library's ``ApplicationSubscription``.

Every test has streams of its own (a name and a subject prefix of its own) on the
session's server; the library's test cases count notification ids from 1. Skipped, each
with its reason: the factory cases for tracking and process recorders (views live in
SQL databases, by design), and its cipher cases while pycryptodome is not installed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import importlib.util
import sys
import time
import unittest
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any
from unittest import mock
from uuid import UUID, uuid4

import msgspec
import nats
import pytest
from eventsourcing.application import Application
from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
    DataError,
    InfrastructureFactory,
    IntegrityError,
    MapperDeserialisationError,
    Notification,
    NotSupportedError,
    OperationalError,
    ProcessRecorder,
    ProgrammingError,
    StoredEvent,
    Tracking,
    TrackingRecorder,
)
from eventsourcing.popo import POPOTrackingRecorder
from eventsourcing.projection import ApplicationSubscription, Projection, ProjectionRunner
from eventsourcing.tests import application as library_application
from eventsourcing.utils import Environment, get_topic
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import StorageType, StreamConfig

from lockgate.eventstore import AggregateHistory, EventStoreUnavailable, NewEvent
from lockgate.eventstore.jetstream import (
    JetStreamEventStore,
    PubAck,
    events_stream_config,
    publish_atomically,
)
from lockgate.eventstore.recorder import (
    FOREIGN_TYPE,
    TOPIC_HEADER,
    Factory,
    JetStreamAggregateRecorder,
    JetStreamApplicationRecorder,
    JetStreamSubscription,
    topic_route,
)
from lockgate.eventstore.subjects import event_subject
from lockgate.intent.aggregate import EffectIntent, Event, State
from lockgate.intent.codec import encode_event
from lockgate.intent.record import LockgateRecord
from lockgate.operations.deployment import Credentials
from lockgate.operations.natsserver import NatsServer
from lockgate.testing.intents import History

MODULE = "lockgate.eventstore.recorder"

#: The library's AES cipher needs pycryptodome (``eventsourcing[crypto]``), which Lockgate
#: does not install; only the factory's cipher cases use it.
HAS_CIPHER = importlib.util.find_spec("Crypto") is not None
NO_CIPHER = "pycryptodome is not installed (eventsourcing[crypto]): the library's own cipher, not the recorder"


def _library_test_cases() -> ModuleType:
    """``eventsourcing.tests.persistence``, which imports the library's cipher at the top.

    Without pycryptodome it is imported beside a stand-in cipher module, removed again at
    once, so nothing else ever sees it; the cases that use the cipher are skipped.
    """
    if HAS_CIPHER:
        return importlib.import_module("eventsourcing.tests.persistence")
    stand_in = ModuleType("eventsourcing.cipher")
    stand_in.AESCipher = type("AESCipher", (), {"CIPHER_KEY": "CIPHER_KEY"})  # type: ignore[attr-defined]
    sys.modules["eventsourcing.cipher"] = stand_in
    try:
        return importlib.import_module("eventsourcing.tests.persistence")
    finally:
        del sys.modules["eventsourcing.cipher"]


library_persistence = _library_test_cases()


def _admin(url: str, action: Callable[[JetStreamContext], Awaitable[object]]) -> None:
    """Run one JetStream management action from synchronous test code."""

    async def run() -> None:
        nc = await nats.connect(url)
        try:
            await action(nc.jetstream())
        finally:
            await nc.close()

    asyncio.run(run())


def _names() -> tuple[str, str]:
    token = uuid4().hex[:12]
    return f"REC_{token}", f"rec{token}.evt"


class OnJetStream:
    """Streams of the test's own (events, and snapshots when asked for), and the
    recorders to close after it."""

    SNAPSHOTS = False
    url: str
    stream: str
    prefix: str
    snapshots_stream: str
    snapshots_prefix: str

    @pytest.fixture(autouse=True)
    def _own_streams(self, nats_server: NatsServer) -> Iterator[None]:
        self.url = nats_server.url
        self.stream, self.prefix = _names()
        self.snapshots_stream, self.snapshots_prefix = _names()
        self.made: list[JetStreamAggregateRecorder] = []
        streams = [(self.stream, self.prefix)]
        if self.SNAPSHOTS:
            streams.append((self.snapshots_stream, self.snapshots_prefix))
        for name, prefix in streams:
            _admin(self.url, lambda js, n=name, p=prefix: js.add_stream(events_stream_config(n, subject_prefix=p)))
        yield
        for recorder in self.made:
            recorder.close()
        for name, _ in streams:
            _admin(self.url, lambda js, n=name: js.delete_stream(n))

    def options(self) -> dict[str, Any]:
        return dict(connect_options={"servers": [self.url]}, stream=self.stream, subject_prefix=self.prefix)

    def made_recorder(self, cls: type[JetStreamAggregateRecorder]) -> Any:
        recorder = cls(**self.options())
        self.made.append(recorder)
        return recorder

    def environment(self) -> dict[str, str]:
        env = {
            "PERSISTENCE_MODULE": MODULE,
            Factory.NATS_URL: self.url,
            Factory.EVENTS_STREAM: self.stream,
            Factory.EVENTS_SUBJECT_PREFIX: self.prefix,
        }
        if self.SNAPSHOTS:
            env[Factory.SNAPSHOTS_STREAM] = self.snapshots_stream
            env[Factory.SNAPSHOTS_SUBJECT_PREFIX] = self.snapshots_prefix
        return env


class ApplicationsOnJetStream(OnJetStream):
    """Like ``OnJetStream``, with the environment every ``Application()`` reads."""

    @pytest.fixture(autouse=True)
    def _environ(self, _own_streams: None, monkeypatch: pytest.MonkeyPatch) -> None:
        for key, value in self.environment().items():
            monkeypatch.setenv(key, value)


# -- the library's test cases ----------------------------------------------------------


class TestAggregateRecorder(OnJetStream, library_persistence.AggregateRecorderTestCase):
    def create_recorder(self) -> AggregateRecorder:
        recorder: JetStreamAggregateRecorder = self.made_recorder(JetStreamAggregateRecorder)
        return recorder


class TestApplicationRecorder(
    OnJetStream, library_persistence.ApplicationRecorderTestCase[JetStreamApplicationRecorder]
):
    def create_recorder(self) -> JetStreamApplicationRecorder:
        recorder: JetStreamApplicationRecorder = self.made_recorder(JetStreamApplicationRecorder)
        return recorder

    def test_insert_subscribe(self) -> None:
        self.optional_test_insert_subscribe()


class TestNonInterleavingNotificationIds(
    OnJetStream, library_persistence.NonInterleavingNotificationIDsBaseCase
):
    def create_recorder(self) -> ApplicationRecorder:
        recorder: JetStreamApplicationRecorder = self.made_recorder(JetStreamApplicationRecorder)
        return recorder


class TestFactory(OnJetStream, library_persistence.InfrastructureFactoryTestCase[Factory]):
    def setUp(self) -> None:
        self.env = Environment("TestCase", self.environment())
        super().setUp()

    def expected_factory_class(self) -> type[Factory]:
        return Factory

    def expected_aggregate_recorder_class(self) -> type[AggregateRecorder]:
        return JetStreamAggregateRecorder

    def expected_application_recorder_class(self) -> type[ApplicationRecorder]:
        return JetStreamApplicationRecorder

    def expected_tracking_recorder_class(self) -> type[TrackingRecorder]:
        return TrackingRecorder

    def tracking_recorder_subclass(self) -> type[TrackingRecorder]:
        return TrackingRecorder

    def expected_process_recorder_class(self) -> type[ProcessRecorder]:
        return ProcessRecorder

    @unittest.skip(
        "no tracking recorder on JetStream, by design: a projection's views and their "
        "tracking records live in SQLite or PostgreSQL (test_views_are_not_kept_here)"
    )
    def test_create_tracking_recorder(self) -> None:
        """Skipped."""

    @unittest.skip(
        "no process recorder on JetStream, by design: it would record tracking atomically "
        "with events, and the tracking lives with the views (test_views_are_not_kept_here)"
    )
    def test_create_process_recorder(self) -> None:
        """Skipped."""

    @unittest.skipUnless(HAS_CIPHER, NO_CIPHER)
    def test_mapper_with_cipher(self) -> None:
        super().test_mapper_with_cipher()

    @unittest.skipUnless(HAS_CIPHER, NO_CIPHER)
    def test_mapper_with_cipher_and_compressor(self) -> None:
        super().test_mapper_with_cipher_and_compressor()

    @unittest.skipUnless(HAS_CIPHER, NO_CIPHER)
    def test_mapper_with_wrong_cipher_key(self) -> None:
        super().test_mapper_with_wrong_cipher_key()

    def test_views_are_not_kept_here(self) -> None:
        with self.assertRaisesRegex(NotSupportedError, "SQLite or PostgreSQL"):
            self.factory.tracking_recorder()
        with self.assertRaisesRegex(NotSupportedError, "SQLite or PostgreSQL"):
            self.factory.process_recorder()

    def test_the_factory_topic_resolves_too(self) -> None:
        env = Environment("TestCase", {**self.environment(), "PERSISTENCE_MODULE": f"{MODULE}:Factory"})
        factory = InfrastructureFactory.construct(env)
        try:
            self.assertIsInstance(factory, Factory)
            self.assertIsNone(factory.application_recorder().max_notification_id())
        finally:
            factory.close()

    def test_snapshots_need_a_stream_of_their_own(self) -> None:
        with self.assertRaisesRegex(NotSupportedError, Factory.SNAPSHOTS_STREAM):
            self.factory.aggregate_recorder(purpose="snapshots")


class TestExampleApplication(ApplicationsOnJetStream, library_application.ExampleApplicationTestCase):
    SNAPSHOTS = True
    expected_factory_topic = f"{MODULE}:Factory"


class TestApplication(ApplicationsOnJetStream, library_application.ApplicationTestCase):
    def test_the_applications_record_on_jetstream(self) -> None:
        with Application[UUID]() as app:
            self.assertIsInstance(app.recorder, JetStreamApplicationRecorder)


# -- the recorder's own cases ----------------------------------------------------------


class TestRecorderEdges(OnJetStream, unittest.TestCase):
    def recorder(self) -> JetStreamApplicationRecorder:
        recorder: JetStreamApplicationRecorder = self.made_recorder(JetStreamApplicationRecorder)
        return recorder

    def test_lockgate_event_types_are_not_inserted_through_the_recorder(self) -> None:
        event = StoredEvent(uuid4(), 1, get_topic(EffectIntent.CandidateReceived), b"{}")
        with self.assertRaisesRegex(ProgrammingError, "JetStreamEventStore"):
            self.recorder().insert_events([event])

    def test_an_insert_needs_versions_past_the_head(self) -> None:
        recorder, originator = self.recorder(), uuid4()
        recorder.insert_events([StoredEvent(originator, 1, "t", b"1"), StoredEvent(originator, 2, "t", b"2")])
        with self.assertRaises(IntegrityError):
            recorder.insert_events([StoredEvent(originator, 2, "t", b"x")])
        self.assertEqual(recorder.insert_events([StoredEvent(originator, 5, "t", b"5")]), [3])
        with self.assertRaises(IntegrityError):
            recorder.insert_events([StoredEvent(originator, 4, "t", b"4")])

    def test_one_insert_over_several_aggregates_is_all_or_nothing(self) -> None:
        recorder, first, second = self.recorder(), uuid4(), uuid4()
        recorder.insert_events([StoredEvent(second, 1, "t", b"")])
        with self.assertRaises(IntegrityError):
            recorder.insert_events([StoredEvent(first, 1, "t", b"a"), StoredEvent(second, 1, "t", b"b")])
        self.assertEqual(recorder.select_events(first), [])
        ids = recorder.insert_events([StoredEvent(first, 1, "t", b"a"), StoredEvent(second, 2, "u", b"b")])
        self.assertEqual(ids, [2, 3])

    def test_state_and_topic_round_trip_byte_exact(self) -> None:
        recorder, originator = self.recorder(), uuid4()
        states = [b"", b"\x00\xff\r\n binary", "é ✓".encode()]
        topics = ["eventsourcing.tests.domain:BankAccount.Opened", "x y:z", "topic1"]
        recorder.insert_events([StoredEvent(originator, i, t, s) for i, (t, s) in
                                enumerate(zip(topics, states, strict=True), start=1)])
        got = recorder.select_events(originator)
        self.assertEqual([(e.topic, e.state) for e in got], list(zip(topics, states, strict=True)))
        self.assertEqual([n.state for n in recorder.select_notifications(None, 10, topics=topics[1:2])],
                         [states[1]])

    def test_str_ids_round_trip(self) -> None:
        recorder = self.recorder()
        recorder.insert_events([StoredEvent("account-7", 1, "t", b"s")])
        self.assertEqual(recorder.select_events("account-7")[0].originator_id, "account-7")
        with self.assertRaises(DataError):
            recorder.insert_events([StoredEvent("has.dot", 1, "t", b"s")])

    def test_a_stream_without_atomic_batches_refuses_several_events(self) -> None:
        _admin(self.url, lambda js: js.update_stream(
            StreamConfig(name=self.stream, subjects=[f"{self.prefix}.>"], storage=StorageType.FILE,
                         allow_direct=True, allow_atomic=False, deny_delete=True)))
        recorder, originator = self.recorder(), uuid4()
        with self.assertRaisesRegex(NotSupportedError, "atomic"):
            recorder.insert_events([StoredEvent(originator, 1, "t", b""), StoredEvent(originator, 2, "t", b"")])
        self.assertEqual(recorder.insert_events([StoredEvent(originator, 1, "t", b"")]), [1])

    def test_an_insert_whose_ack_was_lost_is_told_by_what_landed(self) -> None:
        recorder, originator = self.recorder(), uuid4()
        publish = "lockgate.eventstore.recorder.publish_atomically"

        async def stored_then_lost(*args: Any, **kwargs: Any) -> PubAck:
            await publish_atomically(*args, **kwargs)
            raise EventStoreUnavailable("ack lost")

        async def lost(*args: Any, **kwargs: Any) -> PubAck:
            raise EventStoreUnavailable("ack lost")

        with mock.patch(publish, stored_then_lost):
            ids = recorder.insert_events([StoredEvent(originator, 1, "t", b"a"), StoredEvent(originator, 2, "t", b"b")])
        self.assertEqual(ids, [1, 2])
        with mock.patch(publish, lost), self.assertRaises(OperationalError):
            recorder.insert_events([StoredEvent(originator, 3, "t", b"c")])
        self.assertEqual(len(recorder.select_events(originator)), 2)

    def test_more_than_one_batch_holds_is_refused(self) -> None:
        recorder, originator = self.recorder(), uuid4()
        with self.assertRaisesRegex(DataError, "atomic batch"):
            recorder.insert_events([StoredEvent(originator, i, "t", b"") for i in range(1, 1002)])
        self.assertIsNone(recorder.max_notification_id())


def _next_within(subscription: JetStreamSubscription, timeout_s: float) -> Notification:
    """The next notification, or a failure (and a stopped subscription) after ``timeout_s``."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(next, subscription)
        try:
            return waiting.result(timeout_s)
        except concurrent.futures.TimeoutError:
            subscription.stop()  # lets the waiting thread, and this pool, end
            raise


def test_a_subscription_goes_on_after_the_server_restarts(fresh_server: NatsServer) -> None:
    name, prefix = _names()
    _admin(fresh_server.url, lambda js: js.add_stream(events_stream_config(name, subject_prefix=prefix)))
    options = {"servers": [fresh_server.url], "max_reconnect_attempts": -1, "reconnect_time_wait": 0.2}
    recorder = JetStreamApplicationRecorder(connect_options=options, stream=name, subject_prefix=prefix)
    originator = uuid4()
    try:
        recorder.insert_events([StoredEvent(originator, 1, "t", b"1")])
        with recorder.subscribe(gt=0) as subscription:
            assert _next_within(subscription, 10).id == 1
            fresh_server.stop()
            fresh_server.start()
            deadline = time.monotonic() + 20
            while True:  # the client reconnects by itself; until then, inserts fail
                try:
                    recorder.insert_events([StoredEvent(originator, 2, "t", b"2")])
                    break
                except OperationalError:
                    assert time.monotonic() < deadline
                    time.sleep(0.2)
            # The in-memory consumer died with the server; it is made again from where it was.
            assert _next_within(subscription, 20).id == 2
    finally:
        recorder.close()


async def test_the_factory_connects_with_a_credentials_file(tmp_path: Path) -> None:
    users = 'authorization { users = [ {user: "viewer", password: "pw-1"} ] }'
    with NatsServer(store_dir=tmp_path / "nats", config_text=users) as server:
        creds = tmp_path / "viewer.json"
        creds.write_bytes(msgspec.json.encode(Credentials(
            user="viewer", password="pw-1", account="$G", inbox_prefix="_INBOX_viewer",
            js_prefix="$JS.API")))
        nc = await nats.connect(server.url, user="viewer", password="pw-1")
        await nc.jetstream().add_stream(events_stream_config())
        await nc.close()
        env = {Factory.NATS_URL: server.url, Factory.CREDENTIALS_FILE: str(creds)}

        def connect(env: dict[str, str]) -> int | None:
            factory = Factory(Environment("LockgateRecord", env))
            try:
                return factory.application_recorder().max_notification_id()
            finally:
                factory.close()

        assert await asyncio.to_thread(connect, env) is None
        with pytest.raises(OperationalError):
            await asyncio.to_thread(connect, {Factory.NATS_URL: server.url, Factory.CONNECT_TIMEOUT_S: "1"})


# -- Lockgate's events through the library's subscription -------------------------------


@pytest.fixture
async def lockgate_stream(nc: Client) -> AsyncIterator[tuple[str, str]]:
    name, prefix = _names()
    js = nc.jetstream()
    await js.add_stream(events_stream_config(name, subject_prefix=prefix))
    yield name, prefix
    await js.delete_stream(name)


def _record(url: str, stream: tuple[str, str]) -> LockgateRecord:
    name, prefix = stream
    return LockgateRecord(env={
        Factory.NATS_URL: url, Factory.EVENTS_STREAM: name, Factory.EVENTS_SUBJECT_PREFIX: prefix,
        # The record ignores PERSISTENCE_MODULE: that one is the views'.
        "PERSISTENCE_MODULE": "eventsourcing.sqlite",
    })


@pytest.fixture
async def record(nats_server: NatsServer, lockgate_stream: tuple[str, str]) -> AsyncIterator[LockgateRecord]:
    app = await asyncio.to_thread(_record, nats_server.url, lockgate_stream)
    yield app
    await asyncio.to_thread(app.close)


async def _append(store: JetStreamEventStore, history: AggregateHistory, events: Sequence[Event]) -> AggregateHistory:
    return await store.append(history, [encode_event(e) for e in events])


def _started(tenant: str, call_id: str) -> History:
    return History(tenant=tenant, call_id=call_id)


async def test_lockgate_events_come_out_of_an_application_subscription(
    nc: Client, lockgate_stream: tuple[str, str], record: LockgateRecord
) -> None:
    name, prefix = lockgate_stream
    store = JetStreamEventStore(nc, stream=name, subject_prefix=prefix)
    a = _started("tenant-a", "call-a").normalized().decided("allow")
    b = _started("tenant-b", "call-b")
    ha = await _append(store, AggregateHistory("tenant-a", a.intent_id), a.events[:1])  # 1
    await _append(store, AggregateHistory("tenant-b", b.intent_id), b.events)  # 2
    ha = await _append(store, ha, a.events[1:])  # 3 and 4, one batch

    subscription = await asyncio.to_thread(ApplicationSubscription, record, gt=1)
    with subscription:
        got = [await asyncio.to_thread(next, subscription) for _ in range(3)]
        assert [(type(e), t) for e, t in got] == [
            (EffectIntent.CandidateReceived, Tracking("LockgateRecord", 2)),
            (EffectIntent.CandidateNormalized, Tracking("LockgateRecord", 3)),
            (EffectIntent.PolicyDecided, Tracking("LockgateRecord", 4)),
        ]
        assert [e for e, _ in got] == [b.events[0], *a.events[1:]]
        assert got[1][0].originator_id == UUID(hex=a.intent_id)
        assert [e.originator_version for e, _ in got] == [1, 2, 3]

        # The tenant: a field of the first event, the subjects' for the others.
        first = got[0][0]
        assert isinstance(first, EffectIntent.CandidateReceived) and first.tenant == "tenant-b"
        assert record.tenant_of(got[2][0].originator_id) == "tenant-a"

        # Appended after the subscription started: it comes too.
        pending = asyncio.create_task(asyncio.to_thread(next, subscription))
        a.add(EffectIntent.Withdrawn, by="runtime", why="changed its mind")
        await _append(store, ha, a.events[-1:])  # 5
        event, tracking = await asyncio.wait_for(pending, 10)
        assert (type(event), tracking.notification_id) == (EffectIntent.Withdrawn, 5)
        assert event == a.events[-1]

        # stop() ends an iteration that waits for the next event, promptly.
        waiting = asyncio.create_task(asyncio.to_thread(next, subscription, None))
        await asyncio.sleep(0.3)
        assert not waiting.done()
        await asyncio.to_thread(subscription.stop)
        # Nothing else would end the wait: no event comes, and the subscription has no timer.
        assert await asyncio.wait_for(waiting, 30) is None


async def test_a_subscription_to_topics_gets_only_their_events(
    nc: Client, lockgate_stream: tuple[str, str], record: LockgateRecord
) -> None:
    name, prefix = lockgate_stream
    store = JetStreamEventStore(nc, stream=name, subject_prefix=prefix)
    a = _started("tenant-a", "call-a").normalized().decided("allow")
    b = _started("tenant-b", "call-b").normalized().decided("deny", reasons=["policy.denied"])
    await _append(store, AggregateHistory("tenant-a", a.intent_id), a.events)  # 1-3
    # Another application's event beside them, with a topic of its own.
    foreign = StoredEvent(uuid4(), 1, "eventsourcing.tests.domain:BankAccount.Opened", b"{}")
    assert await asyncio.to_thread(record.recorder.insert_events, [foreign]) == [4]
    await _append(store, AggregateHistory("tenant-b", b.intent_id), b.events)  # 5-7

    topics = [get_topic(EffectIntent.PolicyDecided)]
    subscription = await asyncio.to_thread(ApplicationSubscription, record, gt=0, topics=topics)
    with subscription:
        got = [await asyncio.to_thread(next, subscription) for _ in range(2)]
    assert [(e, t.notification_id) for e, t in got] == [(a.events[2], 3), (b.events[2], 7)]

    notifications = await asyncio.to_thread(record.recorder.select_notifications, None, 10,
                                            topics=[foreign.topic, get_topic(EffectIntent.CandidateReceived)])
    assert [(n.id, n.topic) for n in notifications] == [
        (1, get_topic(EffectIntent.CandidateReceived)), (4, foreign.topic),
        (5, get_topic(EffectIntent.CandidateReceived))]


async def test_a_foreign_event_is_never_read_as_a_lockgate_one_nor_the_reverse(
    nc: Client, lockgate_stream: tuple[str, str], record: LockgateRecord
) -> None:
    name, prefix = lockgate_stream
    a = _started("tenant-a", "call-a")
    stored = encode_event(a.events[0])
    # A Lockgate event that carries a topic header all the same: its type token decides.
    subject = event_subject("tenant-a", a.intent_id, 1, stored.event_type, prefix=prefix)
    await nc.jetstream().publish(subject, stored.data, headers={TOPIC_HEADER: "topic1"})
    # A foreign-typed message without its topic: refused on reading, never guessed.
    bare = event_subject("foreign", uuid4().hex, 1, FOREIGN_TYPE, topic_route("topic1"), prefix=prefix)
    await nc.jetstream().publish(bare, b"{}")

    first = await asyncio.to_thread(record.recorder.select_notifications, None, 1)
    assert first[0].topic == get_topic(EffectIntent.CandidateReceived)
    assert first[0].state == stored.data
    with pytest.raises(DataError, match="topic"):
        await asyncio.to_thread(record.recorder.select_notifications, None, 10)
    subscription = await asyncio.to_thread(record.recorder.subscribe, gt=1)
    with subscription, pytest.raises(DataError, match="topic"):
        await asyncio.to_thread(next, subscription)
    with pytest.raises(IntegrityError, match="Lockgate intent"):
        await asyncio.to_thread(record.recorder.insert_events, [StoredEvent(UUID(hex=a.intent_id), 2, "topic1", b"")])


async def test_the_repository_folds_a_lockgate_intent(
    nc: Client, lockgate_stream: tuple[str, str], record: LockgateRecord
) -> None:
    name, prefix = lockgate_stream
    store = JetStreamEventStore(nc, stream=name, subject_prefix=prefix)
    a = _started("tenant-a", "call-a").normalized().decided("deny", reasons=["policy.denied"])
    await _append(store, AggregateHistory("tenant-a", a.intent_id), a.events)
    intent = await asyncio.to_thread(record.repository.get, UUID(hex=a.intent_id))
    assert isinstance(intent, EffectIntent)
    assert (intent.state, intent.version, intent.tenant) == (State.DENIED, 3, "tenant-a")
    # Read-only for Lockgate's events: their services append them.
    later = _started("tenant-a", "call-b")
    with pytest.raises(ProgrammingError):
        await asyncio.to_thread(record.events.put, later.events)


async def test_an_event_type_this_code_does_not_know_fails_loudly(
    nc: Client, lockgate_stream: tuple[str, str], record: LockgateRecord
) -> None:
    name, prefix = lockgate_stream
    store = JetStreamEventStore(nc, stream=name, subject_prefix=prefix)
    intent_id = uuid4().hex
    await store.append(AggregateHistory("tenant-a", intent_id), [NewEvent("e1", "Noted", b"{}")])
    subscription = await asyncio.to_thread(ApplicationSubscription, record, gt=0)
    with subscription, pytest.raises(MapperDeserialisationError, match="Noted"):
        await asyncio.to_thread(next, subscription)


class IntentTenants(POPOTrackingRecorder):
    """A view: each intent's tenant and the type of its last event."""

    def __init__(self) -> None:
        super().__init__()
        self.intents: dict[UUID, tuple[str, str]] = {}

    def record(self, intent: UUID, tenant: str | None, event_type: str, tracking: Tracking) -> None:
        with self._database_lock:
            self._assert_tracking_uniqueness(tracking)
            self._insert_tracking(tracking)
            known = self.intents.get(intent, ("", ""))[0]
            self.intents[intent] = (tenant or known, event_type)


class IntentTenantsProjection(Projection[IntentTenants]):
    """Every intent starts with an event that names its tenant; the others join on its id."""

    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        tenant = getattr(domain_event, "tenant", None)
        self.view.record(domain_event.originator_id, tenant, type(domain_event).__name__, tracking)


async def test_a_projection_runner_folds_lockgate_events_into_a_view(
    nats_server: NatsServer, nc: Client, lockgate_stream: tuple[str, str]
) -> None:
    name, prefix = lockgate_stream
    store = JetStreamEventStore(nc, stream=name, subject_prefix=prefix)
    a = _started("tenant-a", "call-a").normalized().decided("allow")
    b = _started("tenant-b", "call-b")
    await _append(store, AggregateHistory("tenant-a", a.intent_id), a.events)  # 1-3
    await _append(store, AggregateHistory("tenant-b", b.intent_id), b.events)  # 4
    env = {
        Factory.NATS_URL: nats_server.url, Factory.EVENTS_STREAM: name,
        Factory.EVENTS_SUBJECT_PREFIX: prefix, "PERSISTENCE_MODULE": "eventsourcing.popo",
    }

    def project() -> dict[UUID, tuple[str, str]]:
        with ProjectionRunner(application_class=LockgateRecord, projection_class=IntentTenantsProjection,
                              view_class=IntentTenants, env=env) as runner:
            runner.wait(4, timeout=10)
            return dict(runner.projection.view.intents)

    assert await asyncio.to_thread(project) == {
        UUID(hex=a.intent_id): ("tenant-a", "PolicyDecided"),
        UUID(hex=b.intent_id): ("tenant-b", "CandidateReceived"),
    }


async def test_the_projectors_own_projection_runs_under_the_librarys_runner(
    nats_server: NatsServer, nc: Client, lockgate_stream: tuple[str, str], tmp_path: Path,
) -> None:
    """Lockgate's views (``IntentViews`` into ``SQLiteViews``) folded by ``ProjectionRunner``."""
    from datetime import timedelta

    from lockgate.intent.aggregate import EffectIntent
    from lockgate.testing.intents import T0
    from lockgate.views.projection import IntentViews
    from lockgate.views.store import SQLiteViews

    name, prefix = lockgate_stream
    store = JetStreamEventStore(nc, stream=name, subject_prefix=prefix)
    h = _started("tenant-a", "call-v").normalized().decided("allow")
    h.add(EffectIntent.ExecutionAuthorized, attempt_id="a1", intent_key="k1", digest="sha256:d1",
          policy_revision="p", contract_revision="rev-1", gate_facts={},
          deadline_at=T0 + timedelta(seconds=30))
    h.add(EffectIntent.EffectCompleted, attempt_id="a1", receipt={}, result={}, provenance={})
    await _append(store, AggregateHistory("tenant-a", h.intent_id), h.events)
    env = {
        Factory.NATS_URL: nats_server.url, Factory.EVENTS_STREAM: name,
        Factory.EVENTS_SUBJECT_PREFIX: prefix, "PERSISTENCE_MODULE": "eventsourcing.sqlite",
        "SQLITE_DBNAME": str(tmp_path / "views.sqlite"),
    }

    def project() -> tuple[str, str, list[str]]:
        with ProjectionRunner(application_class=LockgateRecord, projection_class=IntentViews,
                              view_class=SQLiteViews, env=env) as runner:
            runner.wait(len(h.events), timeout=10)
            views = runner.projection.views
            row = views.intent(h.intent_id)
            assert row is not None
            return row.state, row.model_status, [e.event_type for e in views.events_of(h.intent_id)]

    assert await asyncio.to_thread(project) == (
        "completed", "executed", [type(e).__name__ for e in h.events])
