"""Reports prove they answer an order: the executor app against a real broker, and forgeries.

The executor runs as its app does (its durables, its key file under ``var/``); a test
builds an authorized intent, reads the order the executor dispatched (as the adapter
would), and publishes reports on ``LG_REPORTS`` the way an adapter user could.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import nats
import pytest
from nats.aio.client import Client

from lockgate.adapters.claims import ClaimClient
from lockgate.adapters.sdk import report_subject
from lockgate.contracts.messages import AttemptReport, Claim, ExecutionOrder
from lockgate.contracts.vocabulary import ReportStage
from lockgate.eventstore.jetstream import JetStreamEventStore
from lockgate.executor.app import create_app
from lockgate.executor.domain import report_token
from lockgate.intent.aggregate import Stamp, State
from lockgate.intent.codec import decode_event, encode_event, fold
from lockgate.intent.events import (
    AttemptSent,
    Event,
    ExecutionAuthorized,
    ProcessingAbandoned,
    ReportRefused,
)
from lockgate.operations.natsserver import NatsServer
from lockgate.runtime.keys import report_key
from lockgate.runtime.settings import Settings
from lockgate.runtime.topology import EXEC, REPORTS, ensure_topology
from lockgate.testing.intents import History

CAPABILITY = "case.add_note"


@dataclass
class Running:
    nc: Client
    store: JetStreamEventStore
    var_dir: Path


@pytest.fixture
async def executor(fresh_server: NatsServer, tmp_path: Path) -> AsyncIterator[Running]:
    nc = await nats.connect(fresh_server.url)
    await ensure_topology(nc.jetstream())
    settings = Settings(nats_url=fresh_server.url, var_dir=tmp_path / "var")
    app = create_app(settings)
    await app.start()
    try:
        yield Running(nc, JetStreamEventStore(nc), settings.var_dir)
    finally:
        await app.stop()
        await nc.close()


async def authorized(run: Running) -> tuple[History, ExecutionOrder]:
    """An intent the gate authorized, and the order the executor dispatched for it."""
    h = History(call_id=uuid.uuid4().hex[:16]).normalized().decided("allow")
    # Authorized on policy's decision, as the gate does: the gate's durable, handed that
    # decision, finds the attempt open and its order not sent by this process, and sends it.
    trigger = h.events[-1].event_id
    h.extend([ExecutionAuthorized.next(
        h.intent, Stamp(now=datetime.now(UTC), event_id=f"auth-{h.intent_id}", causation_id=trigger),
        attempt_id=f"att-{h.intent_id}", intent_key="k1", digest="sha256:d1", policy_revision="p",
        contract_revision="rev-1", gate_facts={}, deadline_at=datetime.now(UTC) + timedelta(minutes=5))])
    history = await run.store.load("tenant-a", h.intent_id)
    await run.store.append(history, [encode_event(e) for e in h.events])
    js = run.nc.jetstream()
    deadline = time.monotonic() + 10
    while True:
        try:
            msg = await js.get_last_msg(EXEC, f"lg.exec.{CAPABILITY}")
            order = msgspec.json.decode(msg.data or b"", type=ExecutionOrder)
            if order.intent_id == h.intent_id:
                return h, order
        except nats.js.errors.NotFoundError:
            pass
        assert time.monotonic() < deadline, "the executor dispatched no order"
        await asyncio.sleep(0.05)


async def publish(run: Running, report: AttemptReport, *, capability: str = CAPABILITY,
                  subject_intent: str | None = None, msg_id: str | None = None) -> None:
    await run.nc.jetstream().publish(
        report_subject(capability, subject_intent or report.intent_id), msgspec.json.encode(report),
        headers={"Nats-Msg-Id": msg_id or uuid.uuid4().hex})


async def cross(run: Running, order: ExecutionOrder, claimant: str = "adapter-1") -> str:
    """Claim the order's send boundary of the executor, as the adapter's worker does."""
    return (await ClaimClient(run.nc, CAPABILITY).claim(Claim(order=order, claimant=claimant))).verdict


async def events_until(run: Running, h: History, done: type[Event], count: int = 1,
                       timeout_s: float = 10.0) -> list[Event]:
    deadline = time.monotonic() + timeout_s
    while True:
        events = [decode_event(e) for e in (await run.store.load("tenant-a", h.intent_id)).events]
        if sum(isinstance(e, done) for e in events) >= count:
            return events
        assert time.monotonic() < deadline, [type(e).__name__ for e in events]
        await asyncio.sleep(0.05)


async def test_forged_reports_are_refused_and_recorded_the_state_unchanged(
    executor: Running, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    h, order = await authorized(executor)
    completed = AttemptReport(tenant="tenant-a", intent_id=h.intent_id, attempt_id=order.attempt_id,
                              stage="completed", receipt={"note_id": "forged"}, adapter="mallory")
    other = History(call_id="another").intent_id
    await publish(executor, completed)  # no token
    await publish(executor, msgspec.structs.replace(completed, token="0" * 64))  # a wrong one
    genuine = msgspec.structs.replace(completed, token=order.report_token)
    await publish(executor, genuine, capability="item.publish")  # another capability's user
    await publish(executor, genuine, subject_intent=other)  # on another intent's subject

    events = await events_until(executor, h, ReportRefused, count=4)
    refused = [e for e in events if isinstance(e, ReportRefused)]
    assert sorted(e.reason for e in refused) == [
        "report.capability-mismatch", "report.intent-mismatch", "report.token-mismatch",
        "report.token-missing"]
    assert {(e.attempt_id, e.stage, e.adapter) for e in refused} == {(order.attempt_id, "completed", "mallory")}
    intent = fold(events)
    assert intent is not None and intent.state is State.AUTHORIZED and intent.receipt == {}

    # the same forgery again, a thousand times over: nothing more on the record
    for n in range(50):
        await publish(executor, msgspec.structs.replace(completed, token=f"guess-{n}"))
    # a claim with a forged token crosses nothing and records nothing
    assert await cross(executor, msgspec.structs.replace(order, report_token="0" * 64)) == "refused"
    assert await cross(executor, order) == "crossed"  # and then the real adapter
    events = await events_until(executor, h, AttemptSent)
    assert sum(isinstance(e, ReportRefused) for e in events) == 4
    assert sum(isinstance(e, AttemptSent) for e in events) == 1
    assert fold(events).state is State.SENT  # type: ignore[union-attr]

    stored = b"".join(e.data for e in (await executor.store.load("tenant-a", h.intent_id)).events)
    assert order.report_token.encode() not in stored  # adapters read events: never there
    assert all(order.report_token not in r.getMessage() for r in caplog.records)


async def test_redelivered_orders_and_a_restarted_executor_keep_the_same_tokens(
    executor: Running, fresh_server: NatsServer
) -> None:
    h, order = await authorized(executor)
    key = (executor.var_dir / "secrets" / "report.key").read_bytes()
    settings = Settings(nats_url=fresh_server.url, var_dir=executor.var_dir)
    assert report_token(report_key(settings), "tenant-a", h.intent_id, order.attempt_id,
                        CAPABILITY) == order.report_token  # what any later process mints
    restarted = create_app(settings)
    await restarted.start()
    try:
        assert await cross(executor, order) == "crossed"
        await events_until(executor, h, AttemptSent)
    finally:
        await restarted.stop()
    assert (executor.var_dir / "secrets" / "report.key").read_bytes() == key


async def test_a_report_stage_nobody_knows_is_refused_as_other_and_the_executor_goes_on(
    executor: Running,
) -> None:
    """An adapter's stage is hostile input: decoded as ``other``, never a consumer error."""
    h, order = await authorized(executor)
    subject = report_subject(CAPABILITY, h.intent_id)
    js = executor.nc.jetstream()
    for token in ("0" * 64, order.report_token):  # forged, then with the order's own proof
        await js.publish(subject, msgspec.json.encode({
            "tenant": "tenant-a", "intent_id": h.intent_id, "attempt_id": order.attempt_id,
            "stage": "teleported", "token": token}), headers={"Nats-Msg-Id": uuid.uuid4().hex})
    assert await cross(executor, order) == "crossed"

    deadline = time.monotonic() + 10
    while (await js.stream_info(REPORTS)).state.messages:  # a work queue: acked is gone
        assert time.monotonic() < deadline, "reports left unacknowledged"
        await asyncio.sleep(0.05)
    events = await events_until(executor, h, AttemptSent)
    refused = [e for e in events if isinstance(e, ReportRefused)]
    assert [(e.attempt_id, e.stage, e.reason) for e in refused] == [
        (order.attempt_id, ReportStage.OTHER, "report.token-mismatch")]
    assert not any(isinstance(e, ProcessingAbandoned) for e in events)
    assert fold(events).state is State.SENT  # type: ignore[union-attr]
