"""The adapter SDK against a real nats-server, serving the case-notes world."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from lockgate.adapters import sdk, worker
from lockgate.adapters.claims import ClaimClient
from lockgate.adapters.sdk import Adapter, Completed, SendBoundary, serve
from lockgate.contracts.capability import CapabilityContract
from lockgate.contracts.messages import (
    AttemptReport,
    Claim,
    ClaimAnswer,
    Describe,
    ExecutionOrder,
    Facts,
    NormalizeResult,
    QueryResult,
    Refusal,
)
from lockgate.contracts.proofs import report_msg_id, report_token
from lockgate.contracts.vocabulary import QueryFinding, ReportStage
from lockgate.eventstore.jetstream import JetStreamEventStore
from lockgate.executor.claims import serve_claims
from lockgate.intent import Event, Stamp, decode_event, encode_event, fold
from lockgate.intent.events import (
    AttemptFailedBeforeSend,
    AttemptSent,
    CandidateNormalized,
    CandidateReceived,
    EffectCompleted,
    ExecutionAuthorized,
    PolicyDecided,
    WithdrawalRequested,
)
from lockgate.runtime.topology import CAPABILITIES_BUCKET, EXEC, REPORTS, ensure_topology
from lockgate.worlds.casenotes import CONTRACT, DEMO_CREDENTIAL, CaseNotesAdapter, World

CAPABILITY = "case.add_note"
NOW = datetime(2025, 1, 1, tzinfo=UTC)
#: The executor's key for report tokens, as the test's executor part holds it.
KEY = b"test-executor-key-0123456789abcdef"


# -- an intent history with an ExecutionAuthorized event ---------------------------------


@dataclass
class Intent:
    """Builds one intent's history in the event store, event by event."""

    store: JetStreamEventStore
    tenant: str = "tenant-a"
    actor: str = "user-42"
    case_id: str = "case-123"
    note: str = "Called the customer back."
    intent_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    events: list[Event] = field(default_factory=list)

    @property
    def arguments(self) -> dict[str, Any]:
        return {"case_id": self.case_id, "note": self.note}

    @property
    def digest(self) -> str:
        return "sha256:" + self.intent_id * 2

    async def append(self, event_type: type[Event], **fields: Any) -> int:
        agg = fold(self.events)
        assert agg is not None
        event = event_type.next(
            agg, Stamp(now=NOW, event_id=uuid.uuid4().hex, causation_id="test"), **fields
        )
        await self._store(event)
        return event.originator_version

    async def _store(self, event: Event) -> None:
        history = await self.store.load(self.tenant, self.intent_id)
        await self.store.append(history, [encode_event(event)])
        self.events.append(event)

    async def up_to_policy(self) -> int:
        """Received, normalized, allowed; returns the last version."""
        await self._store(
            CandidateReceived(
                originator_id=uuid.UUID(hex=self.intent_id),
                originator_version=1,
                timestamp=NOW,
                originator_topic="lockgate.intent.aggregate:EffectIntent",
                event_id=uuid.uuid4().hex,
                correlation_id="run-1",
                causation_id="call-1",
                tenant=self.tenant,
                run_id="run-1",
                turn_id="turn-1",
                call_id="call-1",
                actor=self.actor,
                tool=CAPABILITY,
                arguments={"note": self.note},
                raw_digest="sha256:00",
                raw_size_bytes=40,
                catalogue_digest="sha256:01",
                contract_revision=CONTRACT.revision,
            )
        )
        await self.append(
            CandidateNormalized,
            arguments=self.arguments,
            resource={"type": "case", "id": self.case_id, "tenant": self.tenant},
            destination=f"case-notes:{self.tenant}/{self.case_id}",
            effect_class="write",
            digest=self.digest,
            serializer="jcs-rfc8785+sha256/1",
            contract_revision=CONTRACT.revision,
        )
        return await self.append(
            PolicyDecided,
            outcome="allow",
            policy_revision="p1",
            reasons=[],
            determining=["permit-notes"],
            facts={"version": 1},
            digest=self.digest,
            reservations=[],
        )

    async def authorize(self, attempt_id: str, version: int = 1, deadline_s: float = 30) -> int:
        """Record ExecutionAuthorized for ``attempt_id``; returns its version."""
        return await self.append(
            ExecutionAuthorized,
            attempt_id=attempt_id,
            intent_key=self.key,
            digest=self.digest,
            policy_revision="p1",
            contract_revision=CONTRACT.revision,
            gate_facts={"version": version, "status": "open"},
            # Real time: the SDK does not cross an attempt's boundary past its deadline.
            deadline_at=datetime.now(UTC) + timedelta(seconds=deadline_s),
        )

    def att(self, n: int) -> str:
        """Attempt ids are unique: reports are deduplicated by ``<attempt_id>:<stage>``."""
        return f"att{n}-{self.intent_id}"

    @property
    def key(self) -> str:
        return "key-" + self.intent_id

    def order(self, attempt_id: str, authorized_version: int, **changes: Any) -> ExecutionOrder:
        fields: dict[str, Any] = {
            "tenant": self.tenant,
            "intent_id": self.intent_id,
            "attempt_id": attempt_id,
            "intent_key": self.key,
            "capability": CAPABILITY,
            "digest": self.digest,
            "arguments": self.arguments,
            "resource": {"type": "case", "id": self.case_id, "tenant": self.tenant},
            "actor": self.actor,
            "preconditions": {"version": 1},
            "authorized_version": authorized_version,
        }
        fields.update(changes)
        fields.setdefault("report_token", report_token(
            KEY, fields["tenant"], fields["intent_id"], fields["attempt_id"], CAPABILITY))
        return ExecutionOrder(**fields)

    async def recorded(self) -> list[Event]:
        """The intent's events as the store holds them now (the executor's appends too)."""
        history = await self.store.load(self.tenant, self.intent_id)
        return [decode_event(e) for e in history.events]

    async def recorded_types(self) -> list[str]:
        return [type(e).__name__ for e in await self.recorded()]


# -- fixtures and helpers ------------------------------------------------------------------


@dataclass
class Env:
    nc: Client
    js: JetStreamContext
    store: JetStreamEventStore
    world: World
    start: Callable[[Adapter], Awaitable[None]]
    #: The contract the executor's part judges claims by (its idempotency).
    contracts: dict[str, CapabilityContract] = field(default_factory=lambda: {CAPABILITY: CONTRACT})
    #: The stream sequence of the last order published.
    last_order: int = 0

    def intent(self, **kwargs: Any) -> Intent:
        return Intent(self.store, **kwargs)

    async def publish(self, order: ExecutionOrder) -> None:
        ack = await self.js.publish(f"lg.exec.{order.capability}", msgspec.json.encode(order))
        self.last_order = ack.seq

    async def request(self, operation: str, body: bytes) -> bytes:
        reply = await self.nc.request(f"lg.adapter.{CAPABILITY}.{operation}", body, timeout=10)
        return reply.data

    async def reports(self, intent_id: str) -> list[tuple[AttemptReport, str]]:
        """Every report on the intent's subject, with its Nats-Msg-Id (read, not consumed)."""
        out: list[tuple[AttemptReport, str]] = []
        seq = 1
        while True:
            try:
                msg = await self.js.get_msg(
                    REPORTS, seq, subject=f"lg.report.{CAPABILITY}.{intent_id}", next=True
                )
            except NotFoundError:
                return out
            report = msgspec.json.decode(msg.data or b"", type=AttemptReport)
            out.append((report, (msg.headers or {}).get("Nats-Msg-Id", "")))
            seq = (msg.seq or seq) + 1

    async def wait_for_stages(
        self, intent_id: str, final: str, timeout_s: float = 10.0
    ) -> list[AttemptReport]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            reports = [r for r, _ in await self.reports(intent_id)]
            if any(r.stage == final for r in reports):
                return reports
            await asyncio.sleep(0.05)
        raise AssertionError(f"no {final} report for {intent_id}: {await self.reports(intent_id)}")

    async def wait_for_event(self, intent: Intent, name: str, timeout_s: float = 10.0) -> list[str]:
        """Wait until the intent's record holds an event ``name``; return its event types."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            types = await intent.recorded_types()
            if name in types:
                return types
            await asyncio.sleep(0.05)
        raise AssertionError(f"no {name} on record for {intent.intent_id}: {await intent.recorded_types()}")

    async def settled(self, timeout_s: float = 5.0) -> None:
        """Wait until the adapter's consumer has no order pending or unacknowledged."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            info = await self.js.consumer_info(EXEC, sdk.consumer_name(CAPABILITY))
            # Acknowledged through the last order published, not merely none in sight: a
            # consumer's counts can lag a publish that just landed.
            if (info.num_pending == 0 and info.num_ack_pending == 0
                    and info.ack_floor.stream_seq >= self.last_order):
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"orders still pending: {info}")


@pytest.fixture
async def env(nc: Client, tmp_path: Path) -> AsyncIterator[Env]:
    js = nc.jetstream()
    await ensure_topology(js)
    # The session's server is shared: start from no adapter consumer and no old orders.
    with contextlib.suppress(NotFoundError):
        await js.delete_consumer(EXEC, sdk.consumer_name(CAPABILITY))
    await js.purge_stream(EXEC, subject=f"lg.exec.{CAPABILITY}")
    world = World.seed(tmp_path / "case")
    stop = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []

    async def start(adapter: Adapter) -> None:
        ready = asyncio.Event()
        task = asyncio.create_task(serve([adapter], nc, name="test-adapter", stop=stop, ready=ready))
        tasks.append(task)
        done, _ = await asyncio.wait(
            [task, asyncio.create_task(ready.wait())], return_when=asyncio.FIRST_COMPLETED
        )
        if task in done:
            task.result()  # raises what went wrong

    contracts: dict[str, CapabilityContract] = {CAPABILITY: CONTRACT}

    async def contract(capability: str) -> CapabilityContract | None:
        return contracts.get(capability)

    # The executor's part: adapters claim the send boundaries of their orders by asking.
    claims = await serve_claims(nc, JetStreamEventStore(nc), key=KEY, contracts=contract,
                                clock=lambda: datetime.now(UTC))
    yield Env(nc, js, JetStreamEventStore(nc), world, start, contracts)
    stop.set()
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=10)
    await claims.unsubscribe()


@pytest.fixture
async def served(env: Env) -> Env:
    await env.start(CaseNotesAdapter(env.world, DEMO_CREDENTIAL))
    return env


# -- request/reply ---------------------------------------------------------------------------


async def test_describe_is_published_and_answered(served: Env) -> None:
    kv = await served.js.key_value(CAPABILITIES_BUCKET)
    entry = await kv.get(CAPABILITY)
    stored = msgspec.json.decode(entry.value or b"", type=Describe)
    assert (stored.contract, stored.adapter) == (CONTRACT, "test-adapter")
    assert stored.alive_at is not None  # the registration is also the adapter's heartbeat
    answered = msgspec.json.decode(await served.request("describe", b"{}"), type=Describe)
    assert answered.contract.revision == CONTRACT.revision


async def test_normalize_takes_case_from_context_only(served: Env) -> None:
    body = {
        "tenant": "tenant-a",
        "actor": "user-42",
        "arguments": {"note": "  Called back.  ", "case_id": "case-999"},
        "context": {"case_id": "case-123"},
    }
    result = msgspec.json.decode(
        await served.request("normalize", msgspec.json.encode(body)), type=NormalizeResult
    )
    assert result == NormalizeResult(
        arguments={"case_id": "case-123", "note": "Called back."},
        resource={"type": "case", "id": "case-123", "tenant": "tenant-a"},
        destination="case-notes:tenant-a/case-123",
    )


@pytest.mark.parametrize(
    ("arguments", "context", "reason", "field"),
    [
        ({"note": "   "}, {"case_id": "case-123"}, "argument.note.empty", "note"),
        ({"note": "é" * 251}, {"case_id": "case-123"}, "argument.note.too-long", "note"),
        ({"note": "fine"}, {}, "run.context.missing", None),
    ],
)
async def test_normalize_reasons(
    served: Env, arguments: dict[str, Any], context: dict[str, str], reason: str, field: str | None
) -> None:
    body = {"tenant": "tenant-a", "actor": "user-42", "arguments": arguments, "context": context}
    result = msgspec.json.decode(
        await served.request("normalize", msgspec.json.encode(body)), type=NormalizeResult
    )
    assert (result.reason, result.field, result.arguments) == (reason, field, {})


async def test_note_of_exactly_500_bytes_is_accepted(served: Env) -> None:
    body = {
        "tenant": "tenant-a",
        "actor": "user-42",
        "arguments": {"note": "é" * 250},
        "context": {"case_id": "case-123"},
    }
    result = msgspec.json.decode(
        await served.request("normalize", msgspec.json.encode(body)), type=NormalizeResult
    )
    assert result.reason is None


async def test_normalize_asked_for_facts_answers_them_in_the_same_reply(served: Env) -> None:
    body = {"tenant": "tenant-a", "actor": "user-42", "arguments": {"note": "Called back."},
            "context": {"case_id": "case-123"}, "with_facts": True}
    result = msgspec.json.decode(
        await served.request("normalize", msgspec.json.encode(body)), type=NormalizeResult
    )
    asked = msgspec.json.decode(await served.request("facts", msgspec.json.encode(
        {"tenant": "tenant-a", "actor": "user-42", "resource": result.resource})), type=Facts)
    # The facts of the normalized resource, exactly what a separate question answers.
    assert result.reason is None and result.facts == asked
    assert asked.facts["exists"] is True


@pytest.mark.parametrize("broken", ["raises", "slow", "malformed", "too-large"])
async def test_normalize_answers_without_facts_it_cannot_vouch_for(
    env: Env, broken: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(worker, "FACTS_WITH_NORMALIZE_S", 0.2)
    adapter = FactsBroken(env.world, DEMO_CREDENTIAL, broken)
    await env.start(adapter)
    body = {"tenant": "tenant-a", "actor": "user-42", "arguments": {"note": "Called back."},
            "context": {"case_id": "case-123"}, "with_facts": True}
    result = msgspec.json.decode(
        await env.request("normalize", msgspec.json.encode(body)), type=NormalizeResult)
    # Normalized all the same: policy asks for the facts itself. Facts that never come are
    # given up on (the lookup cancelled), not waited for.
    assert result.reason is None and result.resource["id"] == "case-123" and result.facts is None
    assert (adapter.asked, adapter.abandoned) == (1, 1 if broken == "slow" else 0)
    refused = msgspec.json.decode(await env.request("normalize", msgspec.json.encode(
        {**body, "arguments": {"note": "  "}})), type=NormalizeResult)
    assert (refused.reason, refused.facts) == ("argument.note.empty", None)


class FactsBroken(CaseNotesAdapter):
    """Normalizes, but its facts lookup fails: raises, hangs, or answers what no policy can use."""

    def __init__(self, world: World, credential: str, broken: str) -> None:
        super().__init__(world, credential)
        self.broken = broken
        self.asked = 0
        self.abandoned = 0

    async def facts(self, req: Any) -> Facts:
        self.asked += 1
        if self.broken == "slow":
            try:
                await asyncio.Event().wait()  # never answers
            except asyncio.CancelledError:
                self.abandoned += 1
                raise
        if self.broken == "malformed":
            return Facts(facts={"exists": None})  # type: ignore[dict-item]
        if self.broken == "too-large":
            return Facts(facts={f"k{i}": "x" * 200 for i in range(200)})
        raise RuntimeError("facts store down")


async def test_facts_reply(served: Env) -> None:
    body = {"tenant": "tenant-a", "actor": "user-13", "resource": {"type": "case", "id": "case-123"}}
    facts = msgspec.json.decode(await served.request("facts", msgspec.json.encode(body)), type=Facts)
    assert facts.revision == "1"
    assert facts.facts["exists"] is True
    assert facts.facts["actor_may_add_note"] is False


async def test_query_absent_then_found(served: Env) -> None:
    body = msgspec.json.encode(
        {"tenant": "tenant-a", "intent_id": "i1", "intent_key": "k-1", "arguments": {}}
    )
    absent = msgspec.json.decode(await served.request("query", body), type=QueryResult)
    assert absent == QueryResult(finding=QueryFinding.ABSENT)
    receipt = served.world.add_note(
        DEMO_CREDENTIAL, "tenant-a", "user-42", "case-123", "n", 1, "k-1", "i1"
    )
    found = msgspec.json.decode(await served.request("query", body), type=QueryResult)
    assert found == QueryResult(finding=QueryFinding.FOUND, receipt=receipt)


@pytest.mark.parametrize(
    ("operation", "body"),
    [
        ("normalize", b"not json"),
        ("normalize", b'{"tenant": 1}'),
        ("facts", b"[]"),
        ("query", b'{"tenant": "tenant-a"}'),
    ],
)
async def test_malformed_request_gets_a_refusal(served: Env, operation: str, body: bytes) -> None:
    refusal = msgspec.json.decode(await served.request(operation, body), type=Refusal)
    assert refusal.error == "request.malformed"
    assert len(refusal.detail) <= sdk.DETAIL_MAX_CHARS
    # Still serving.
    assert msgspec.json.decode(await served.request("describe", b""), type=Describe)


# -- execution orders ------------------------------------------------------------------------


async def test_authorized_order_is_executed_once_and_reported(served: Env) -> None:
    intent = served.intent()
    await intent.up_to_policy()
    version = await intent.authorize(intent.att(1))
    before = sdk.invocations[CAPABILITY]

    await served.publish(intent.order(intent.att(1), version))
    reports = await served.wait_for_stages(intent.intent_id, "completed")

    assert [r.stage for r in reports] == ["completed"]
    completed = reports[-1]
    assert completed.receipt == {"note_id": "note-000001", "case_id": "case-123", "version": "2"}
    assert completed.result == {"note_id": "note-000001", "case_id": "case-123"}
    # one id per attempt and stage, which only the order's holder can name (its token's digest)
    assert completed.token and [msg_id for _, msg_id in await served.reports(intent.intent_id)] == [
        report_msg_id(intent.att(1), ReportStage.COMPLETED, completed.token)]
    # The crossing is on the record, claimed before the write, naming the worker's try.
    sent = [e for e in await intent.recorded() if isinstance(e, AttemptSent)]
    assert len(sent) == 1 and sent[0].claimant.startswith("test-adapter:")
    assert sdk.invocations[CAPABILITY] == before + 1
    assert served.world.invocations == 1
    [entry] = served.world.ledger()
    assert (entry["intent_id"], entry["idempotency_key"]) == (intent.intent_id, intent.key)
    await served.settled()


async def test_one_claim_per_order_and_no_read_of_the_record(env: Env) -> None:
    asked: list[str] = []

    async def count(msg: Msg) -> None:
        asked.append(msg.subject)

    counters = [await env.nc.subscribe(f"lg.claim.{CAPABILITY}", cb=count),
                await env.nc.subscribe(f"lg.record.{CAPABILITY}", cb=count)]
    await env.start(CaseNotesAdapter(env.world, DEMO_CREDENTIAL))
    intent = env.intent()
    await intent.up_to_policy()
    version = await intent.authorize(intent.att(1))
    await env.publish(intent.order(intent.att(1), version))
    await env.wait_for_stages(intent.intent_id, "completed")
    for counter in counters:
        await counter.unsubscribe()
    assert asked == [f"lg.claim.{CAPABILITY}"] and len(env.world.ledger()) == 1


async def test_redelivery_after_the_boundary_writes_once(served: Env) -> None:
    """The order comes again after it crossed (a crash before its ack, say): a remote that
    deduplicates by the intent key lets it write again, and the world keeps one."""
    intent = served.intent()
    await intent.up_to_policy()
    version = await intent.authorize(intent.att(1))
    await served.publish(intent.order(intent.att(1), version))
    await served.wait_for_stages(intent.intent_id, "completed")

    await served.publish(intent.order(intent.att(1), version))
    await served.settled()

    assert served.world.invocations == 2  # executed again ...
    assert len(served.world.ledger()) == 1  # ... and the world deduplicated by intent key
    stages = [r.stage for r, _ in await served.reports(intent.intent_id)]
    assert stages == ["completed"]  # the reports deduplicated by Nats-Msg-Id
    assert (await intent.recorded_types()).count("AttemptSent") == 1


async def test_a_redelivery_after_a_rival_crossed_writes_nothing_where_the_remote_does_not_deduplicate(
    served: Env,
) -> None:
    served.contracts[CAPABILITY] = msgspec.structs.replace(CONTRACT, idempotency=None)
    intent = served.intent()
    await intent.up_to_policy()
    version = await intent.authorize(intent.att(1))
    rival = await ClaimClient(served.nc, CAPABILITY).claim(
        Claim(order=intent.order(intent.att(1), version), claimant="stalled-replica"))
    assert rival.verdict == "crossed"

    await served.publish(intent.order(intent.att(1), version))
    await served.settled()
    assert served.world.invocations == 0 and served.world.ledger() == []
    assert await served.reports(intent.intent_id) == []


async def test_of_many_claims_of_one_attempt_at_once_one_crosses(served: Env) -> None:
    """Deliveries of one order racing to its boundary (replicas, a redelivery): the record's
    optimistic concurrency lets one claim cross, however they interleave."""
    served.contracts[CAPABILITY] = msgspec.structs.replace(CONTRACT, idempotency=None)
    intent = served.intent()
    await intent.up_to_policy()
    version = await intent.authorize(intent.att(1))
    order = intent.order(intent.att(1), version)
    clients = [ClaimClient(served.nc, CAPABILITY) for _ in range(8)]
    answers: list[ClaimAnswer] = await asyncio.gather(*(
        c.claim(Claim(order=order, claimant=f"w{n}")) for n, c in enumerate(clients)))
    assert sorted(a.verdict for a in answers) == ["crossed"] + ["refused"] * 7
    assert {a.reason for a in answers if a.verdict == "refused"} == {"order.boundary-claimed"}
    assert (await intent.recorded_types()).count("AttemptSent") == 1


@pytest.mark.parametrize(
    ("forge", "recorded"),
    [
        pytest.param(lambda i, v: i.order(i.att(1), v, digest="sha256:" + "f" * 64),
                     "AttemptFailedBeforeSend", id="digest"),
        pytest.param(lambda i, v: i.order(i.att(9), v), None, id="unknown-attempt"),
        pytest.param(lambda i, v: i.order(i.att(1), v, intent_key="key-other"),
                     "AttemptFailedBeforeSend", id="intent-key"),
        pytest.param(lambda i, v: i.order(i.att(1), v - 1), "AttemptFailedBeforeSend",
                     id="not-an-authorization"),
        pytest.param(lambda i, v: i.order(i.att(1), v, actor="user-13"), "AttemptFailedBeforeSend",
                     id="actor"),
        pytest.param(
            lambda i, v: i.order(i.att(1), v, arguments={"case_id": "case-123", "note": "other"}),
            "AttemptFailedBeforeSend", id="arguments",
        ),
        pytest.param(lambda i, v: i.order(i.att(1), v, preconditions={"version": 9}),
                     "AttemptFailedBeforeSend", id="precondition"),
        pytest.param(lambda i, v: i.order(i.att(1), v, report_token="f" * 64), None, id="token"),
        pytest.param(lambda i, v: i.order(i.att(1), v, tenant="tenant-b"), None, id="tenant"),
        pytest.param(
            lambda i, v: i.order(i.att(1), v, intent_id=uuid.uuid4().hex), None, id="unknown-intent"
        ),
    ],
)
async def test_forged_order_is_refused_at_its_boundary_and_nothing_is_written(
    served: Env, forge: Callable[[Intent, int], ExecutionOrder], recorded: str | None
) -> None:
    """An order that is not what was authorized never crosses. One naming the open attempt
    ends that attempt before its boundary (the gate may authorize another, under the same
    key); any other changes nothing on the record."""
    intent = served.intent()
    await intent.up_to_policy()
    version = await intent.authorize(intent.att(1))
    order = forge(intent, version)

    await served.publish(order)
    await served.settled()

    types = await intent.recorded_types()
    assert types[-1] == (recorded or "ExecutionAuthorized")
    assert "AttemptSent" not in types
    assert served.world.invocations == 0 and served.world.ledger() == []
    assert await served.reports(order.intent_id) == []


async def test_order_without_any_authorization_is_refused(served: Env) -> None:
    intent = served.intent()
    last = await intent.up_to_policy()
    await served.publish(intent.order(intent.att(1), last))
    await served.settled()
    assert await intent.recorded_types() == [
        "CandidateReceived", "CandidateNormalized", "PolicyDecided"]
    assert served.world.invocations == 0


async def test_order_ahead_of_the_record_is_retried_then_given_up_unwritten(
    served: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("lockgate.adapters.worker.RETRY_DELAY_S", 0.05)
    intent = served.intent()
    last = await intent.up_to_policy()
    before = sdk.invocations[CAPABILITY]
    await served.publish(intent.order(intent.att(1), last + 1))
    await served.settled(timeout_s=10)
    assert sdk.invocations[CAPABILITY] - before == worker.UNCHECKED_DELIVERIES
    assert served.world.invocations == 0
    assert await intent.recorded_types() == [
        "CandidateReceived", "CandidateNormalized", "PolicyDecided"]


async def test_order_of_a_superseded_attempt_is_stale(served: Env) -> None:
    intent = served.intent()
    await intent.up_to_policy()
    first = await intent.authorize(intent.att(1))
    await intent.append(
        AttemptFailedBeforeSend, attempt_id=intent.att(1), reason="x", detail=""
    )
    await intent.authorize(intent.att(2))

    await served.publish(intent.order(intent.att(1), first))
    await served.settled()

    assert (await intent.recorded_types())[-1] == "ExecutionAuthorized"  # nothing recorded
    assert served.world.invocations == 0


async def test_order_of_a_completed_intent_is_stale(served: Env) -> None:
    intent = served.intent()
    await intent.up_to_policy()
    version = await intent.authorize(intent.att(1))
    await intent.append(AttemptSent, attempt_id=intent.att(1))
    await intent.append(EffectCompleted, attempt_id=intent.att(1), receipt={}, result={},
                        provenance={})

    await served.publish(intent.order(intent.att(1), version))
    await served.settled()

    assert (await intent.recorded_types())[-1] == "EffectCompleted"
    assert served.world.invocations == 0


async def test_world_refusal_is_reported_rejected(served: Env) -> None:
    intent = served.intent(case_id="case-closed")
    await intent.up_to_policy()
    version = await intent.authorize(intent.att(1))

    await served.publish(intent.order(intent.att(1), version))
    reports = await served.wait_for_stages(intent.intent_id, "rejected")

    assert [(r.stage, r.reason) for r in reports] == [("rejected", "case.closed")]
    assert served.world.invocations == 1
    assert served.world.ledger() == []


async def test_contended_case_is_rejected_with_version_conflict(served: Env) -> None:
    intent = served.intent(case_id="case-contended")
    await intent.up_to_policy()
    version = await intent.authorize(intent.att(1))
    await served.publish(intent.order(intent.att(1), version))
    reports = await served.wait_for_stages(intent.intent_id, "rejected")
    assert reports[-1].reason == "case.version-conflict"


async def test_missing_precondition_fails_before_send(served: Env) -> None:
    intent = served.intent()
    await intent.up_to_policy()
    version = await intent.authorize(intent.att(1))

    await served.publish(intent.order(intent.att(1), version, preconditions={}))
    reports = await served.wait_for_stages(intent.intent_id, "failed_before_send")

    assert [(r.stage, r.reason) for r in reports] == [
        ("failed_before_send", "order.precondition.missing")
    ]
    assert served.world.invocations == 0


# -- adapters that misbehave -----------------------------------------------------------------


class Exploding(CaseNotesAdapter):
    """Raises an unexpected error, before or after crossing the boundary."""

    def __init__(self, world: World, *, cross_first: bool) -> None:
        super().__init__(world, DEMO_CREDENTIAL)
        self.cross_first = cross_first

    async def execute(self, order: ExecutionOrder, boundary: SendBoundary) -> Completed:
        if self.cross_first:
            await boundary.cross()
        raise RuntimeError("provider said: " + "x" * 1000)

    async def normalize(self, req: Any) -> NormalizeResult:
        raise RuntimeError("normalize broke")


async def test_error_before_the_boundary_is_failed_before_send(env: Env) -> None:
    await env.start(Exploding(env.world, cross_first=False))
    intent = env.intent()
    await intent.up_to_policy()
    version = await intent.authorize(intent.att(1))

    await env.publish(intent.order(intent.att(1), version))
    reports = await env.wait_for_stages(intent.intent_id, "failed_before_send")

    assert [(r.stage, r.reason) for r in reports] == [("failed_before_send", "adapter.error")]
    assert len(reports[0].detail) <= sdk.DETAIL_MAX_CHARS
    await env.settled()


async def test_error_after_the_boundary_reports_nothing(env: Env) -> None:
    await env.start(Exploding(env.world, cross_first=True))
    intent = env.intent()
    await intent.up_to_policy()
    version = await intent.authorize(intent.att(1))

    await env.publish(intent.order(intent.att(1), version))
    await env.wait_for_event(intent, "AttemptSent")
    await env.settled()  # acked, not redelivered

    # The record says sent, and nothing more: the deadline makes the outcome unknown.
    assert await env.reports(intent.intent_id) == []


async def test_adapter_error_in_a_request_is_a_refusal(env: Env) -> None:
    await env.start(Exploding(env.world, cross_first=False))
    body = {"tenant": "tenant-a", "actor": "user-42", "arguments": {}, "context": {}}
    refusal = msgspec.json.decode(
        await env.request("normalize", msgspec.json.encode(body)), type=Refusal
    )
    assert refusal == Refusal("adapter.error", "RuntimeError: normalize broke")


class Stoppable(CaseNotesAdapter):
    """An interruptible export-like capability: runs until asked to stop."""

    contract = msgspec.structs.replace(CONTRACT, interruptible=True)

    def __init__(self, world: World) -> None:
        super().__init__(world, DEMO_CREDENTIAL)
        self.stop = asyncio.Event()
        self.asked: list[str] = []

    async def execute(self, order: ExecutionOrder, boundary: SendBoundary) -> Completed:
        await boundary.cross()
        try:
            await asyncio.wait_for(self.stop.wait(), 10)
        except TimeoutError:
            return Completed(receipt={"done": "yes"})
        raise sdk.Interrupted("export.stopped", "stopped at the runtime's request")

    async def interrupt(self, order: ExecutionOrder) -> None:
        self.asked.append(order.attempt_id)
        self.stop.set()


async def test_an_interruption_reaches_the_worker_running_the_attempt(env: Env) -> None:
    adapter = Stoppable(env.world)
    await env.start(adapter)
    intent = env.intent()
    await intent.up_to_policy()
    version = await intent.authorize(intent.att(1))
    await env.publish(intent.order(intent.att(1), version))
    await env.wait_for_event(intent, "AttemptSent")

    await env.nc.publish(sdk.interrupt_subject(CAPABILITY),
                         msgspec.json.encode({"attempt_id": "not-running-here"}))
    await env.nc.publish(sdk.interrupt_subject(CAPABILITY),
                         msgspec.json.encode({"intent_id": intent.intent_id, "attempt_id": intent.att(1)}))
    reports = await env.wait_for_stages(intent.intent_id, "interrupted")

    assert [r.stage for r in reports] == ["interrupted"]
    assert adapter.asked == [intent.att(1)]
    assert env.world.invocations == 0  # stopped before anything was written
    await env.settled()


# -- withdrawal and the claim of the send boundary --------------------------------------------


async def test_an_order_whose_withdrawal_was_requested_is_withdrawn_at_its_boundary(
    served: Env,
) -> None:
    intent = served.intent()
    await intent.up_to_policy()
    version = await intent.authorize(intent.att(1))
    await intent.append(WithdrawalRequested, attempt_id=intent.att(1), by="runtime", why="")

    await served.publish(intent.order(intent.att(1), version))
    await served.settled()

    # The executor's answer to the claim is on the record: nothing was or will be sent.
    assert (await intent.recorded_types())[-2:] == ["WithdrawalRequested", "Withdrawn"]
    assert await served.reports(intent.intent_id) == []
    assert served.world.invocations == 0


class Hesitant(CaseNotesAdapter):
    """Waits, once in ``execute``, until the test lets it go on to the send boundary."""

    def __init__(self, world: World) -> None:
        super().__init__(world, DEMO_CREDENTIAL)
        self.entered = asyncio.Event()
        self.go = asyncio.Event()
        self.refused: list[str] = []

    async def execute(self, order: ExecutionOrder, boundary: SendBoundary) -> Completed:
        self.entered.set()
        await self.go.wait()
        try:
            return await super().execute(order, boundary)
        except sdk.BoundaryRefused as exc:
            self.refused.append(exc.reason)
            raise


async def test_a_withdrawal_requested_while_the_worker_runs_stops_it_at_its_boundary(env: Env) -> None:
    """However late before the crossing: the claim is decided on the record as it is then."""
    adapter = Hesitant(env.world)
    await env.start(adapter)
    intent = env.intent()
    await intent.up_to_policy()
    version = await intent.authorize(intent.att(1))
    await env.publish(intent.order(intent.att(1), version))
    await asyncio.wait_for(adapter.entered.wait(), 5)

    await intent.append(WithdrawalRequested, attempt_id=intent.att(1), by="runtime", why="")
    adapter.go.set()
    await env.wait_for_event(intent, "Withdrawn")
    await env.settled()

    assert adapter.refused == ["order.withdrawn"]
    assert env.world.invocations == 0 and env.world.ledger() == []
    assert await env.reports(intent.intent_id) == []


async def test_without_a_withdrawal_the_claim_lets_it_cross(env: Env) -> None:
    adapter = Hesitant(env.world)
    adapter.go.set()
    await env.start(adapter)
    intent = env.intent()
    await intent.up_to_policy()
    version = await intent.authorize(intent.att(1))
    await env.publish(intent.order(intent.att(1), version))
    reports = await env.wait_for_stages(intent.intent_id, "completed")
    assert [r.stage for r in reports] == ["completed"] and adapter.refused == []
    assert len(env.world.ledger()) == 1


async def test_no_worker_crosses_an_attempt_past_its_deadline(served: Env) -> None:
    intent = served.intent()
    await intent.up_to_policy()
    version = await intent.authorize(intent.att(1), deadline_s=sdk.DEADLINE_MARGIN_S / 2)
    await served.publish(intent.order(intent.att(1), version))
    await served.settled()
    failed = [e for e in await intent.recorded() if isinstance(e, AttemptFailedBeforeSend)]
    assert [f.reason for f in failed] == ["order.expired"]
    assert served.world.invocations == 0


async def test_a_worker_whose_crossing_is_answered_too_late_writes_nothing(
    served: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held up between the executor's answer and its write, past the latest moment the write
    may land: it writes nothing. The record says sent, so the outcome is reconciled."""
    ask = ClaimClient.claim

    async def held_up(client: ClaimClient, claim: Claim) -> ClaimAnswer:
        answer = await ask(client, claim)
        await asyncio.sleep(0.6)
        return answer

    monkeypatch.setattr(ClaimClient, "claim", held_up)
    intent = served.intent()
    await intent.up_to_policy()
    version = await intent.authorize(intent.att(1), deadline_s=sdk.DEADLINE_MARGIN_S + 0.4)
    await served.publish(intent.order(intent.att(1), version))
    await served.wait_for_event(intent, "AttemptSent")
    await served.settled()
    assert served.world.invocations == 0 and served.world.ledger() == []
    assert await served.reports(intent.intent_id) == []


class Forgetful(CaseNotesAdapter):
    """Writes without crossing its send boundary (a bug the worker makes the best of)."""

    async def execute(self, order: ExecutionOrder, boundary: SendBoundary) -> Completed:
        receipt = await asyncio.to_thread(
            self._world.add_note, DEMO_CREDENTIAL, order.tenant, order.actor,
            str(order.arguments["case_id"]), str(order.arguments["note"]),
            int(order.preconditions["version"]), order.intent_key, order.intent_id)
        return Completed(receipt=receipt)


async def test_a_write_without_crossing_is_claimed_after_it_and_recorded_sent(env: Env) -> None:
    await env.start(Forgetful(env.world, DEMO_CREDENTIAL))
    intent = env.intent()
    await intent.up_to_policy()
    version = await intent.authorize(intent.att(1))
    await env.publish(intent.order(intent.att(1), version))
    reports = await env.wait_for_stages(intent.intent_id, "completed")
    assert [r.stage for r in reports] == ["completed"]
    assert "AttemptSent" in await intent.recorded_types()
    assert len(env.world.ledger()) == 1
