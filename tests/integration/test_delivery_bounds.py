"""Nothing is redelivered forever, on any durable (invariant 7, docs/design.md), read back from the server.

Every durable the topology creates has a finite ``max_deliver``; a consumer with timers
too. A message that takes its process down on every delivery is given up on the record
from the server's delivery count, the one count that survives the process.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path

import msgspec
import nats
from nats.aio.client import Client
from nats.js import JetStreamContext
from prometheus_client import REGISTRY

from lockgate.adapters.sdk import report_subject
from lockgate.contracts.vocabulary import ReportStage
from lockgate.eventstore.jetstream import JetStreamEventStore
from lockgate.eventstore.subjects import event_subject
from lockgate.executor.app import create_app as executor_app
from lockgate.intent.aggregate import Event, State
from lockgate.intent.codec import decode_event, encode_event, fold
from lockgate.intent.events import ProcessingAbandoned, ReportRefused
from lockgate.normalization.app import create_app as normalization_app
from lockgate.operations.natsserver import NatsServer
from lockgate.runtime.settings import Settings
from lockgate.runtime.spec import give_up_from
from lockgate.runtime.specs import GATE_DELIVERIES
from lockgate.runtime.topology import (
    DURABLES,
    EVENTS,
    REPORTS,
    consumer_config,
    consumer_name,
    durable,
    ensure_topology,
    stream_configs,
)
from lockgate.testing.intents import History

HERE = Path(__file__).parent
WAIT_S = 90.0
CAPABILITY = "case.add_note"


async def test_every_durable_the_topology_creates_is_bounded_on_the_server(fresh_server: NatsServer) -> None:
    nc = await nats.connect(fresh_server.url)
    try:
        js = nc.jetstream()
        await ensure_topology(js, capabilities=[CAPABILITY])
        found: dict[str, int] = {}
        for stream in (c.name for c in stream_configs() if c.name):
            for info in await js.consumers_info(stream):
                found[info.name] = int(info.config.max_deliver or -1)
        assert set(found) == {d.name for d in DURABLES} | {consumer_name(CAPABILITY)}
        assert [name for name, bound in found.items() if bound <= 0] == []
        # The timers' bound is the server's too: a gate waits its longest legitimate wait.
        assert give_up_from(found["executor-gate"]) == GATE_DELIVERIES
    finally:
        await nc.close()


async def test_an_unbounded_durable_of_an_earlier_deployment_is_bounded_in_place(
    fresh_server: NatsServer,
) -> None:
    nc = await nats.connect(fresh_server.url)
    try:
        js = nc.jetstream()
        await ensure_topology(js)
        gate = durable("executor-gate")
        await js.delete_consumer(EVENTS, gate.name)
        await js.add_consumer(EVENTS, replace(consumer_config(gate, 5.0), max_deliver=-1))
        h = History().normalized().decided("allow")
        store = JetStreamEventStore(nc)
        await store.append(await store.load("tenant-a", h.intent_id), [encode_event(e) for e in h.events])
        assert (await js.consumer_info(EVENTS, gate.name)).num_pending == 1
        await ensure_topology(js)  # the deployment's next start
        info = await js.consumer_info(EVENTS, gate.name)
        assert info.config.max_deliver == gate.max_deliver > 0
        assert info.num_pending == 1  # bounded in place: what it held is still there
    finally:
        await nc.close()


async def doomed_executor(nc: Client, url: str, tmp: Path, intent_id: str, deaths: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKGATE_")}
    env.update(LOCKGATE_NATS_URL=url, LOCKGATE_VAR_DIR=str(tmp), LOCKGATE_DOOMED_INTENT=intent_id,
               LOCKGATE_CRASH_LOG=str(deaths), LOCKGATE_METRICS_ENABLED="false",
               PYTHONPATH=os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")])))
    with open(tmp / "executor.log", "ab") as log:
        return subprocess.Popen([sys.executable, "-m", "fakes.doomed"], env=env, stdout=log, stderr=log)


async def until_abandoned(
    store: JetStreamEventStore, intent_id: str, proc: subprocess.Popen[bytes],
    restart: Callable[[], Awaitable[subprocess.Popen[bytes]]], deaths: Path,
) -> tuple[list[Event], subprocess.Popen[bytes]]:
    """The intent's events once a give-up is on them, starting the process again each time it
    died (its supervisor's part); the process running then."""
    deadline = time.monotonic() + WAIT_S
    while True:
        events = [decode_event(e) for e in (await store.load("tenant-a", intent_id)).events]
        if any(isinstance(e, ProcessingAbandoned) for e in events):
            return events, proc
        assert time.monotonic() < deadline, (deaths.read_text() if deaths.exists() else "no deaths")
        if proc.poll() is not None:
            proc = await restart()
        await asyncio.sleep(0.2)


async def test_a_message_that_kills_its_process_every_time_is_given_up_on_the_record(
    fresh_server: NatsServer, tmp_path: Path,
) -> None:
    """The gate's durable has timers: before, nothing but failures seen in memory counted
    there, and a process killed by the message sees none, so it was handed out for ever."""
    nc = await nats.connect(fresh_server.url)
    js = nc.jetstream()
    await ensure_topology(js, ack_wait_s=1.0)
    gate = durable("executor-gate")
    # An operator's bound of 6 on the server: from the 4th delivery on, the process gives up.
    await js.add_consumer(EVENTS, replace(consumer_config(gate, 1.0), max_deliver=6))
    h = History().normalized().decided("allow")
    store = JetStreamEventStore(nc)
    history = await store.append(await store.load("tenant-a", h.intent_id),
                                 [encode_event(e) for e in h.events])
    trigger = history.events[-1].sequence
    deaths = tmp_path / "deaths"

    async def restart() -> subprocess.Popen[bytes]:
        return await doomed_executor(nc, fresh_server.url, tmp_path, h.intent_id, deaths)

    proc = await restart()
    try:
        deadline = time.monotonic() + WAIT_S
        events, proc = await until_abandoned(store, h.intent_id, proc, restart, deaths)
        abandoned = events[-1]
        assert isinstance(abandoned, ProcessingAbandoned)
        assert (abandoned.durable, abandoned.deliveries) == ("executor-gate", 4)
        assert "delivered 4 times" in abandoned.cause
        intent = fold(events)
        assert intent is not None and (intent.state, intent.reason) == (State.REFUSED, "candidate.unprocessable")
        # Acknowledged: the message is past the durable's ack floor, never handed out again.
        while (info := await js.consumer_info(EVENTS, gate.name)).ack_floor.stream_seq < trigger:
            assert time.monotonic() < deadline, info
            await asyncio.sleep(0.2)
        assert info.num_ack_pending == 0 and info.num_redelivered == 0
        assert [line.split()[2] for line in deaths.read_text().splitlines()] == ["1", "2", "3"]
        assert proc.poll() is None  # the process that recorded it lives on
    finally:
        proc.kill()
        proc.wait()
        await nc.close()


async def stored_until(store: JetStreamEventStore, intent_id: str, done: type[Event],
                       count: int = 1) -> list[Event]:
    deadline = time.monotonic() + 30
    while True:
        events = [decode_event(e) for e in (await store.load("tenant-a", intent_id)).events
                  if e.event_type != "CandidateReceived" or e.data != POISON]
        if sum(isinstance(e, done) for e in events) >= count:
            return events
        assert time.monotonic() < deadline, [type(e).__name__ for e in events]
        await asyncio.sleep(0.1)


async def drained(js: JetStreamContext, stream: str, durable_name: str, through: int) -> None:
    """Wait until ``durable_name`` acknowledged (or terminated) everything through ``through``."""
    deadline = time.monotonic() + 30
    while (info := await js.consumer_info(stream, durable_name)).ack_floor.stream_seq < through:
        assert time.monotonic() < deadline, info
        await asyncio.sleep(0.1)


POISON = b"\xff not an event"


async def test_an_unreadable_stored_event_is_given_up_on_the_intent_its_subject_names(
    fresh_server: NatsServer, tmp_path: Path,
) -> None:
    """Before, it was terminated with a log line: the intent stalled, and nothing said so."""
    nc = await nats.connect(fresh_server.url)
    await ensure_topology(nc.jetstream())
    app = normalization_app(Settings(nats_url=fresh_server.url, var_dir=tmp_path))
    await app.start()
    try:
        js = nc.jetstream()
        intent_id = History(call_id=uuid.uuid4().hex[:12]).intent_id
        ack = await js.publish(event_subject("tenant-a", intent_id, 1, "CandidateReceived"), POISON,
                               headers={"Nats-Msg-Id": "poison-1"})
        store = JetStreamEventStore(nc)
        events = await stored_until(store, intent_id, ProcessingAbandoned)
        (abandoned,) = events
        assert isinstance(abandoned, ProcessingAbandoned)
        assert (abandoned.durable, abandoned.trigger, abandoned.deliveries) == ("normalization", "poison-1", 1)
        assert abandoned.cause.startswith("unreadable event: EventDecodeError")
        await drained(js, EVENTS, "normalization", ack.seq)
    finally:
        await app.stop()
        await nc.close()


async def test_unreadable_and_unaddressed_reports_are_refused_on_the_intent_their_subject_names(
    fresh_server: NatsServer, tmp_path: Path,
) -> None:
    """Before, both were acknowledged and dropped with a log line."""
    nc = await nats.connect(fresh_server.url)
    await ensure_topology(nc.jetstream())
    app = executor_app(Settings(nats_url=fresh_server.url, var_dir=tmp_path))
    await app.start()
    try:
        js = nc.jetstream()
        store = JetStreamEventStore(nc)
        h = History(call_id=uuid.uuid4().hex[:12]).normalized()
        await store.append(await store.load("tenant-a", h.intent_id), [encode_event(e) for e in h.events])
        subject = report_subject(CAPABILITY, h.intent_id)
        nameless = msgspec.json.encode({"tenant": "a b", "intent_id": "x.y", "attempt_id": "a1",
                                        "stage": "completed"})
        for n, body in enumerate((b"\xff", nameless, b"\xff", nameless)):  # each reason once
            await js.publish(subject, body, headers={"Nats-Msg-Id": f"r{n}"})
        # On a subject whose intent nobody stored: no record to put it on.
        stray = await js.publish(report_subject(CAPABILITY, uuid.uuid4().hex), b"\xff",
                                 headers={"Nats-Msg-Id": "stray"})
        events = await stored_until(store, h.intent_id, ReportRefused, count=2)
        refused = [(e.attempt_id, e.stage, e.reason) for e in events
                   if isinstance(e, ReportRefused)]
        assert sorted(refused) == [("", ReportStage.OTHER, "report.unaddressed"),
                                   ("", ReportStage.OTHER, "report.unreadable")]
        assert fold(events).state is State.NORMALIZED  # type: ignore[union-attr]
        await drained(js, REPORTS, "executor-reports", stray.seq)
        assert (await js.stream_info(REPORTS)).state.messages == 0
        poison = REGISTRY.get_sample_value("lockgate_deliveries_total", {
            "service": "executor", "reaction": "report", "settlement": "term", "outcome": "poison"})
        assert poison == 1
    finally:
        await app.stop()
        await nc.close()


async def test_a_message_that_kills_its_process_is_given_up_after_three_deaths_in_a_row(
    fresh_server: NatsServer, tmp_path: Path,
) -> None:
    """With the gate's own bound (thousands of deliveries, for its timers), the server's count
    alone would let the message take the executor down thousands of times: the crash
    journal the process keeps on disk ends it after three redeliveries that went down."""
    nc = await nats.connect(fresh_server.url)
    js = nc.jetstream()
    await ensure_topology(js, ack_wait_s=1.0)
    gate = durable("executor-gate")
    h = History().normalized().decided("allow")
    store = JetStreamEventStore(nc)
    await store.append(await store.load("tenant-a", h.intent_id), [encode_event(e) for e in h.events])
    deaths = tmp_path / "deaths"

    async def restart() -> subprocess.Popen[bytes]:
        return await doomed_executor(nc, fresh_server.url, tmp_path, h.intent_id, deaths)

    proc = await restart()
    try:
        events, proc = await until_abandoned(store, h.intent_id, proc, restart, deaths)
        abandoned = events[-1]
        assert isinstance(abandoned, ProcessingAbandoned)
        assert abandoned.durable == "executor-gate"
        assert "took its process down 3 times in a row" in abandoned.cause
        # The first delivery and three redeliveries went down; the fifth was given up unrun.
        assert len(deaths.read_text().splitlines()) == 4 and abandoned.deliveries == 5
        assert (await js.consumer_info(EVENTS, gate.name)).config.max_deliver > 1000
        intent = fold(events)
        assert intent is not None and (intent.state, intent.reason) == (State.REFUSED, "candidate.unprocessable")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        await nc.close()
