"""The items adapters behind the SDK against a real nats-server: P drafts, Q publishes."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from lockgate.adapters import sdk
from lockgate.adapters.sdk import serve
from lockgate.contracts.capability import CapabilityContract
from lockgate.contracts.messages import (
    AttemptReport,
    Describe,
    ExecutionOrder,
    Facts,
    NormalizeResult,
    QueryResult,
)
from lockgate.contracts.proofs import report_token
from lockgate.eventstore.jetstream import JetStreamEventStore
from lockgate.executor.claims import serve_claims
from lockgate.intent import encode_event
from lockgate.intent.events import CandidateNormalized, ExecutionAuthorized, PolicyDecided
from lockgate.runtime.topology import CAPABILITIES_BUCKET, EXEC, REPORTS, ensure_topology
from lockgate.testing.intents import History
from lockgate.worlds.items import (
    DEMO_CREDENTIAL,
    DraftAdapter,
    PublishAdapter,
    World,
    draft_contract,
    publish_contract,
)

DRAFT = "draft.prepare_private"
PUBLISH = "item.publish"
SERVER = {DRAFT: "P", PUBLISH: "Q"}
#: Short, as the end-to-end fault tests configure it.
DEADLINE_S = 2.0
CONTRACTS = {DRAFT: draft_contract(DEADLINE_S), PUBLISH: publish_contract(DEADLINE_S)}
#: The executor's key for report tokens, as the test's executor part holds it.
KEY = b"test-executor-key-items-0123456789"


@dataclass
class Intent:
    """One intent of an items capability, stored up to its ExecutionAuthorized event."""

    store: JetStreamEventStore
    capability: str
    space_id: str = "space-1"
    title: str = "Release 1.2"
    body: str = "It shipped."

    def __post_init__(self) -> None:
        self.history = History(tool=self.capability, call_id=uuid.uuid4().hex,
                               arguments={"title": self.title, "body": self.body},
                               contract_revision=CONTRACTS[self.capability].revision)
        self.intent_id = self.history.intent_id
        self.digest = "sha256:" + uuid.uuid4().hex
        self.key = "key-" + self.intent_id
        self.stored = 0

    @property
    def arguments(self) -> dict[str, Any]:
        return {"space_id": self.space_id, "title": self.title, "body": self.body}

    @property
    def resource(self) -> dict[str, str]:
        return {"type": "space", "id": self.space_id, "tenant": "tenant-a"}

    async def save(self) -> int:
        """Append the events not stored yet; return the last version."""
        history = await self.store.load("tenant-a", self.intent_id)
        new = self.history.events[self.stored:]
        await self.store.append(history, [encode_event(e) for e in new])
        self.stored = len(self.history.events)
        return self.stored

    async def authorized(self, attempt_id: str) -> int:
        """Normalized, allowed and authorized; returns the authorization's version."""
        h = self.history
        h.add(CandidateNormalized, arguments=self.arguments, resource=self.resource,
              destination=f"items-{SERVER[self.capability]}:tenant-a/{self.space_id}",
              effect_class=CONTRACTS[self.capability].effect_class.value, digest=self.digest,
              serializer="jcs", contract_revision=CONTRACTS[self.capability].revision)
        h.add(PolicyDecided, outcome="allow", policy_revision="p1", reasons=[],
              determining=["items.members-publish"], facts={"version": 1}, digest=self.digest,
              reservations=[])
        h.add(ExecutionAuthorized, attempt_id=attempt_id, intent_key=self.key,
              digest=self.digest, policy_revision="p1",
              contract_revision=CONTRACTS[self.capability].revision,
              gate_facts={"version": 1, "status": "open"},
              # Real time: the SDK does not cross an attempt's boundary past its deadline.
              deadline_at=datetime.now(UTC) + timedelta(seconds=DEADLINE_S))
        return await self.save()

    def order(self, attempt_id: str, authorized_version: int) -> ExecutionOrder:
        return ExecutionOrder(
            tenant="tenant-a", intent_id=self.intent_id, attempt_id=attempt_id,
            intent_key=self.key, capability=self.capability, digest=self.digest,
            arguments=self.arguments, resource=self.resource, actor="user-42",
            preconditions={"version": 1, "status": "open"},
            authorized_version=authorized_version,
            report_token=report_token(KEY, "tenant-a", self.intent_id, attempt_id, self.capability),
        )

    async def recorded_types(self) -> list[str]:
        """The intent's event types as the store holds them (the executor's part's appends too)."""
        return [e.event_type for e in (await self.store.load("tenant-a", self.intent_id)).events]


@dataclass
class Env:
    nc: Client
    js: JetStreamContext
    store: JetStreamEventStore
    world: World

    def intent(self, capability: str, **kwargs: Any) -> Intent:
        return Intent(self.store, capability, **kwargs)

    async def publish(self, order: ExecutionOrder) -> None:
        await self.js.publish(f"lg.exec.{order.capability}", msgspec.json.encode(order))

    async def request(self, capability: str, operation: str, body: Any) -> bytes:
        data = body if isinstance(body, bytes) else msgspec.json.encode(body)
        reply = await self.nc.request(f"lg.adapter.{capability}.{operation}", data, timeout=2)
        return reply.data

    async def reports(self, capability: str, intent_id: str) -> list[AttemptReport]:
        """Every report on the intent's subject (read, not consumed)."""
        out: list[AttemptReport] = []
        seq = 1
        while True:
            try:
                msg = await self.js.get_msg(
                    REPORTS, seq, subject=f"lg.report.{capability}.{intent_id}", next=True
                )
            except NotFoundError:
                return out
            out.append(msgspec.json.decode(msg.data or b"", type=AttemptReport))
            seq = (msg.seq or seq) + 1

    async def wait_for_stage(
        self, capability: str, intent_id: str, final: str, timeout_s: float = 10.0
    ) -> list[AttemptReport]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            reports = await self.reports(capability, intent_id)
            if any(r.stage == final for r in reports):
                return reports
            await asyncio.sleep(0.05)
        raise AssertionError(f"no {final} report: {await self.reports(capability, intent_id)}")

    async def settled(self, capability: str, timeout_s: float = 5.0) -> None:
        """Wait until the capability's consumer has no order pending or unacknowledged."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            info = await self.js.consumer_info(EXEC, sdk.consumer_name(capability))
            if info.num_pending == 0 and info.num_ack_pending == 0:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"orders still pending on {capability}")


async def wait_for_event(intent: Intent, name: str, timeout_s: float = 10.0) -> None:
    """Wait until the intent's record holds an event ``name`` (the executor's part appends)."""
    deadline = time.monotonic() + timeout_s
    while name not in await intent.recorded_types():
        assert time.monotonic() < deadline, f"no {name}: {await intent.recorded_types()}"
        await asyncio.sleep(0.05)


@pytest.fixture
async def env(nc: Client, tmp_path: Path) -> AsyncIterator[Env]:
    js = nc.jetstream()
    await ensure_topology(js)
    # The session's server is shared: start from no adapter consumers and no old orders.
    for capability in (DRAFT, PUBLISH):
        with contextlib.suppress(NotFoundError):
            await js.delete_consumer(EXEC, sdk.consumer_name(capability))
        await js.purge_stream(EXEC, subject=f"lg.exec.{capability}")
    world = World.seed(tmp_path / "items")
    adapters = [
        DraftAdapter(world, DEMO_CREDENTIAL, outcome_deadline_s=DEADLINE_S),
        PublishAdapter(world, DEMO_CREDENTIAL, outcome_deadline_s=DEADLINE_S),
    ]
    stop, ready = asyncio.Event(), asyncio.Event()
    async def contract(capability: str) -> CapabilityContract | None:
        return CONTRACTS.get(capability)

    # The executor's part: adapters claim the send boundaries of their orders by asking.
    claims = await serve_claims(nc, JetStreamEventStore(nc), key=KEY, contracts=contract,
                                clock=lambda: datetime.now(UTC))
    task = asyncio.create_task(serve(adapters, nc, name="items", stop=stop, ready=ready))
    waiting = asyncio.create_task(ready.wait())
    done, _ = await asyncio.wait([task, waiting], return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        waiting.cancel()
        task.result()  # raises what went wrong
    yield Env(nc, js, JetStreamEventStore(nc), world)
    stop.set()
    await asyncio.wait_for(task, timeout=10)
    await claims.unsubscribe()


# -- request/reply ----------------------------------------------------------------------------


@pytest.mark.parametrize("capability", [DRAFT, PUBLISH])
async def test_describe_publishes_the_configured_contract(env: Env, capability: str) -> None:
    kv = await env.js.key_value(CAPABILITIES_BUCKET)
    stored = msgspec.json.decode((await kv.get(capability)).value or b"", type=Describe)
    assert (stored.contract, stored.adapter) == (CONTRACTS[capability], "items")
    assert stored.alive_at is not None  # the registration is also the adapter's heartbeat
    assert stored.contract.outcome_deadline_s == DEADLINE_S


@pytest.mark.parametrize("capability", [DRAFT, PUBLISH])
async def test_normalize_reply(env: Env, capability: str) -> None:
    body = {"tenant": "tenant-a", "actor": "user-42",
            "arguments": {"title": "  Release 1.2 ", "body": "It shipped."},
            "context": {"space_id": "space-1"}}
    result = msgspec.json.decode(await env.request(capability, "normalize", body),
                                 type=NormalizeResult)
    assert result == NormalizeResult(
        arguments={"space_id": "space-1", "title": "Release 1.2", "body": "It shipped."},
        resource={"type": "space", "id": "space-1", "tenant": "tenant-a"},
        destination=f"items-{SERVER[capability]}:tenant-a/space-1",
    )


@pytest.mark.parametrize("capability", [DRAFT, PUBLISH])
async def test_normalize_reason_reply(env: Env, capability: str) -> None:
    body = {"tenant": "tenant-a", "actor": "user-42",
            "arguments": {"title": "t" * 121, "body": "b"}, "context": {"space_id": "space-1"}}
    result = msgspec.json.decode(await env.request(capability, "normalize", body),
                                 type=NormalizeResult)
    assert (result.reason, result.field) == ("argument.title.too-long", "title")


@pytest.mark.parametrize("capability", [DRAFT, PUBLISH])
async def test_facts_reply(env: Env, capability: str) -> None:
    body = {"tenant": "tenant-a", "actor": "user-13",
            "resource": {"type": "space", "id": "space-archived"}}
    facts = msgspec.json.decode(await env.request(capability, "facts", body), type=Facts)
    assert facts == Facts(
        facts={"exists": True, "tenant": "tenant-a", "status": "archived",
               "actor_may_create": False, "sensitive": False, "version": 1},
        revision="1",
    )


async def test_query_replies_absent_then_found(env: Env) -> None:
    body = {"tenant": "tenant-a", "intent_id": "i1", "intent_key": "k-1", "arguments": {}}
    for capability in (DRAFT, PUBLISH):
        reply = await env.request(capability, "query", body)
        assert msgspec.json.decode(reply, type=QueryResult) == QueryResult(finding="absent")
    drafted = env.world.create_draft(DEMO_CREDENTIAL, "tenant-a", "user-42", "space-1", "t", "b",
                                     "k-1", "i1")
    published = env.world.publish(DEMO_CREDENTIAL, "tenant-a", "user-42", "space-1", "t", "b",
                                  "k-1", "i1")
    for capability, receipt in ((DRAFT, drafted), (PUBLISH, published)):
        reply = await env.request(capability, "query", body)
        assert msgspec.json.decode(reply, type=QueryResult) == QueryResult(
            finding="found", receipt=receipt
        )


# -- execution orders ---------------------------------------------------------------------------


async def test_authorized_draft_order_is_executed_once(env: Env) -> None:
    intent = env.intent(DRAFT)
    version = await intent.authorized("att-1-" + intent.intent_id)
    await env.publish(intent.order("att-1-" + intent.intent_id, version))
    reports = await env.wait_for_stage(DRAFT, intent.intent_id, "completed")

    assert [r.stage for r in reports] == ["completed"]
    assert "AttemptSent" in await intent.recorded_types()
    assert reports[-1].receipt == {"draft_id": "draft-000001", "space_id": "space-1",
                                   "idempotency_key": intent.key}
    assert reports[-1].result == {"draft_id": "draft-000001", "space_id": "space-1"}
    [entry] = env.world.drafts()
    assert (entry["intent_id"], entry["idempotency_key"]) == (intent.intent_id, intent.key)
    assert (env.world.invocations("P"), env.world.invocations("Q")) == (1, 0)
    assert env.world.publications() == env.world.notifications() == []
    await env.settled(DRAFT)


async def test_authorized_publish_order_is_executed_once(env: Env) -> None:
    intent = env.intent(PUBLISH)
    version = await intent.authorized("att-1-" + intent.intent_id)
    await env.publish(intent.order("att-1-" + intent.intent_id, version))
    reports = await env.wait_for_stage(PUBLISH, intent.intent_id, "completed")

    assert [r.stage for r in reports] == ["completed"]
    assert reports[-1].result == {"publication_id": "pub-000001", "space_id": "space-1",
                                  "notified": 3}
    [entry] = env.world.publications()
    assert (entry["intent_id"], entry["client_ref"]) == (intent.intent_id, intent.key)
    assert len(env.world.notifications()) == 3
    assert (env.world.invocations("P"), env.world.invocations("Q")) == (0, 1)
    assert env.world.drafts() == []
    await env.settled(PUBLISH)


@pytest.mark.parametrize("capability", [DRAFT, PUBLISH])
async def test_world_refusal_is_reported_rejected(env: Env, capability: str) -> None:
    intent = env.intent(capability, space_id="space-archived")
    version = await intent.authorized("att-1-" + intent.intent_id)
    await env.publish(intent.order("att-1-" + intent.intent_id, version))
    reports = await env.wait_for_stage(capability, intent.intent_id, "rejected")
    assert [(r.stage, r.reason) for r in reports] == [("rejected", "space.archived")]
    assert env.world.invocations(SERVER[capability]) == 1
    assert env.world.drafts() == env.world.publications() == []


async def test_dropped_publish_response_reports_nothing(env: Env) -> None:
    env.world.inject("Q", "drop_response")
    intent = env.intent(PUBLISH)
    attempt = "att-1-" + intent.intent_id
    version = await intent.authorized(attempt)

    await env.publish(intent.order(attempt, version))
    await wait_for_event(intent, "AttemptSent")
    await env.settled(PUBLISH)  # acknowledged, not redelivered

    # The effect happened, and the adapter said nothing more: silence for the executor.
    assert await env.reports(PUBLISH, intent.intent_id) == []
    [entry] = env.world.publications()
    assert entry["client_ref"] == intent.key
    assert len(env.world.notifications()) == 3
    assert env.world.invocations("Q") == 1
    assert env.world.faults() == []
    # What the reconciler will ask: found, by the intent key as client reference.
    body = {"tenant": "tenant-a", "intent_id": intent.intent_id, "intent_key": intent.key,
            "arguments": {}}
    found = msgspec.json.decode(await env.request(PUBLISH, "query", body), type=QueryResult)
    assert found.finding == "found"
    assert found.receipt["publication_id"] == entry["publication_id"]


@pytest.mark.parametrize("capability", [DRAFT, PUBLISH])
async def test_a_sent_order_dispatched_again_creates_nothing_twice(env: Env, capability: str) -> None:
    """The response was lost, then the same order arrives again as a new message."""
    server = SERVER[capability]
    env.world.inject(server, "drop_response")
    intent = env.intent(capability)
    attempt = "att-1-" + intent.intent_id
    version = await intent.authorized(attempt)
    await env.publish(intent.order(attempt, version))
    await wait_for_event(intent, "AttemptSent")
    await env.settled(capability)

    await env.publish(intent.order(attempt, version))
    reports = await env.wait_for_stage(capability, intent.intent_id, "completed")

    assert [r.stage for r in reports] == ["completed"]
    assert (await intent.recorded_types()).count("AttemptSent") == 1
    # P deduplicates by key (and was called again); Q is looked up first and not called.
    assert env.world.invocations(server) == (2 if server == "P" else 1)
    assert len(env.world.drafts() if server == "P" else env.world.publications()) == 1
    await env.settled(capability)


@pytest.mark.parametrize("capability", [DRAFT, PUBLISH])
async def test_fail_before_send_reaches_nothing(env: Env, capability: str) -> None:
    server = SERVER[capability]
    env.world.inject(server, "fail_before_send")
    intent = env.intent(capability)
    attempt = "att-1-" + intent.intent_id
    version = await intent.authorized(attempt)
    before = sdk.invocations[capability]

    await env.publish(intent.order(attempt, version))
    reports = await env.wait_for_stage(capability, intent.intent_id, "failed_before_send")

    assert [(r.stage, r.reason) for r in reports] == [
        ("failed_before_send", "items.fault-injected")
    ]
    assert sdk.invocations[capability] == before + 1  # the adapter ran ...
    assert (env.world.invocations("P"), env.world.invocations("Q")) == (0, 0)  # ... the world did not
    assert env.world.drafts() == env.world.publications() == []
    assert env.world.faults() == []
    await env.settled(capability)
