"""The role table (``lockgate.operations.roles``) enforced by a real nats-server, accounts and all.

Every user connects with its own credentials and inbox prefix, in the accounts the
embedded default runs with; a refusal is the server's "permissions violation" error on
the connection (the publish is dropped, a JetStream publish gets no acknowledgement),
observed within about a second. What crosses an account boundary without a violation
(a reply subject) is checked in the streams: nothing may land.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeout
from nats.js.errors import KeyNotFoundError, NotFoundError

from lockgate.adapters.claims import ClaimClient
from lockgate.client.sdk import Gateway, Refused, Run
from lockgate.contracts import subjects
from lockgate.contracts.messages import Claim, ExecutionOrder, RunOpened, Tool, TurnOpened
from lockgate.contracts.responses import ModelResponse
from lockgate.core.ids import intent_id_for
from lockgate.eventstore.base import NewEvent
from lockgate.eventstore.jetstream import JetStreamEventStore
from lockgate.executor.claims import serve_claims
from lockgate.operations.natsserver import NatsServer
from lockgate.operations.roles import (
    EDGE_ACCOUNT,
    SERVICES,
    SERVICES_ACCOUNT,
    adapter_account,
    demo_users,
    render_accounts,
)
from lockgate.runtime.topology import (
    BUDGETS_BUCKET,
    CANDIDATES,
    CAPABILITIES_BUCKET,
    CATALOGUES_BUCKET,
    EVENTS,
    EXEC,
    LOCKS_BUCKET,
    PROGRESS_BUCKET,
    REPORTS,
    RESPONSES,
    RUNS_BUCKET,
    durable,
    ensure_topology,
)

TENANTS = ("tenant-a", "tenant-b")
USERS = demo_users(TENANTS)
REFUSAL_WAIT_S = 1.0
INTENT = "0" * 32  # an intent id
NOTE = '{"note": "Customer called back; confirmed the delivery address."}'
AGENT, HOST, REVIEWER, OPERATOR = "agent-tenant-a", "host", "reviewer-alice", "operator-ops"
ADAPTER, OTHER_ADAPTER = "adapter-casenotes", "adapter-items"
#: Every role that is not a service: the people and programs at the edge, and adapters.
EDGE_AND_ADAPTERS = (HOST, AGENT, "agent-tenant-b", REVIEWER, "reviewer-user-42", OPERATOR,
                     ADAPTER, OTHER_ADAPTER)


@dataclass
class Conn:
    """One user's connection and the errors the server sent it."""

    user: str
    nc: Client
    errors: list[Exception] = field(default_factory=list)

    def violations(self) -> list[str]:
        return [str(e) for e in self.errors if "permissions violation" in str(e)]


Login = Callable[[str], Awaitable[Conn]]


@pytest.fixture
def authz_server(tmp_path: Path) -> Iterator[NatsServer]:
    """A server of the test's own whose accounts and users are the role table's."""
    server = NatsServer(
        store_dir=tmp_path / "nats",
        config_text=render_accounts(USERS),
        log_file=tmp_path / "nats.log",
    )
    with server:
        yield server


@pytest.fixture
async def login(authz_server: NatsServer) -> AsyncIterator[Login]:
    """Connect as a user of the table (with its role's inbox prefix)."""
    conns: list[Conn] = []

    async def connect(user: str) -> Conn:
        role, password = USERS[user]
        errors: list[Exception] = []

        async def on_error(exc: Exception) -> None:
            errors.append(exc)

        nc = await nats.connect(
            authz_server.url, user=user, password=password, inbox_prefix=role.inbox_prefix,
            error_cb=on_error, max_reconnect_attempts=0,
        )
        conn = Conn(user, nc, errors)
        conns.append(conn)
        return conn

    yield connect
    for conn in conns:
        await conn.nc.close()


@pytest.fixture
async def admin(login: Login) -> Conn:
    """The topology owner, after creating the topology."""
    conn = await login("admin")
    await ensure_topology(conn.nc.jetstream())
    return conn


def gateway(conn: Conn) -> Gateway:
    """The SDK over a role's connection (its JetStream prefix and principal)."""
    role = USERS[conn.user][0]
    return Gateway(conn.nc, js_prefix=role.js_prefix, user=conn.user, principal=role.principal)


async def assert_refused(
    conn: Conn, kind: str, subject: str, action: Awaitable[object] | None = None
) -> None:
    """Assert the server refuses ``conn`` to ``kind`` (publish|subscribe) ``subject`` within ~1 s."""
    conn.errors.clear()
    if action is None:
        action = conn.nc.publish(subject, b"{}") if kind == "publish" else conn.nc.subscribe(subject)
    with contextlib.suppress(NatsTimeout, asyncio.TimeoutError):  # a JetStream publish gets no ack
        await action
    await conn.nc.flush()
    verb = "publish" if kind == "publish" else "subscription"
    expected = f'permissions violation for {verb} to "{subject.lower()}"'
    deadline = asyncio.get_running_loop().time() + REFUSAL_WAIT_S
    while not any(expected in v for v in conn.violations()):
        assert asyncio.get_running_loop().time() < deadline, f"{conn.user} may {kind} {subject}"
        await asyncio.sleep(0.02)
    assert conn.nc.is_connected  # a refusal does not cost the connection


def test_the_accounts_separate_services_edge_and_each_adapter() -> None:
    accounts = {user: role.account for user, (role, _) in USERS.items()}
    assert {accounts[s] for s in SERVICES} | {accounts["admin"]} == {SERVICES_ACCOUNT}
    assert {accounts[u] for u in (HOST, AGENT, REVIEWER, OPERATOR)} == {EDGE_ACCOUNT}
    assert accounts[ADAPTER] == adapter_account("casenotes")
    assert accounts[OTHER_ADAPTER] == adapter_account("items")
    rendered = render_accounts(USERS)
    assert rendered.count("jetstream: enabled") == 1  # only the services' account has streams


# -- what each role may not do ---------------------------------------------------------------

#: Every kind of write a role outside the services must not make: an event, an order, a
#: review decision in another's name, a report, and a key in each bucket.
FORBIDDEN_WRITES = [
    f"lg.evt.tenant-a.{INTENT}.1.CandidateReceived",
    f"lg.evt.tenant-a.{INTENT}.9.EffectCompleted",
    "lg.exec.case.add_note",
    f"lg.review.tenant-a.{INTENT}.decide.somebody-else",
    f"lg.reconcile.tenant-a.{INTENT}.resolve.somebody-else",
    f"lg.report.repo.prepare_patch.{INTENT}",
    *(f"$KV.{bucket}.forged" for bucket in (
        RUNS_BUCKET, CATALOGUES_BUCKET, CAPABILITIES_BUCKET, LOCKS_BUCKET, PROGRESS_BUCKET,
        BUDGETS_BUCKET)),
    f"$JS.API.STREAM.PURGE.{EVENTS}",
    f"$JS.API.CONSUMER.MSG.NEXT.{CANDIDATES}.intake",
]

REFUSED = [
    *((user, "publish", subject) for user in EDGE_AND_ADAPTERS for subject in FORBIDDEN_WRITES),
    # another tenant's subjects
    (AGENT, "publish", "lg.propose.tenant-b.run-1"),
    (AGENT, "publish", "lg.turn.tenant-b.run-1"),
    (AGENT, "publish", f"lg.withdraw.tenant-b.run-1.{INTENT}.{AGENT}"),
    (AGENT, "publish", f"lg.withdraw.tenant-a.run-1.{INTENT}.{OPERATOR}"),  # in another's name
    (AGENT, "publish", f"lg.jsapi.DIRECT.GET.{RESPONSES}.lg.response.tenant-b.run-1.c"),
    (AGENT, "publish", f"lg.jsapi.DIRECT.GET.{EVENTS}"),
    (AGENT, "publish", "lg.claim.case.add_note"),
    (ADAPTER, "publish", f"lg.jsapi.DIRECT.GET.{EVENTS}"),  # the whole record: by request only
    (ADAPTER, "publish", "lg.claim.item.publish"),
    (AGENT, "publish", "lg.run.tenant-a.open"),
    (AGENT, "publish", "lg.adapter.case.add_note.normalize"),
    (AGENT, "subscribe", "lg.response.tenant-b.>"),
    (AGENT, "subscribe", "lg.response.>"),
    (AGENT, "subscribe", "lg.propose.>"),
    (AGENT, "subscribe", "lg.evt.>"),
    (AGENT, "subscribe", "_INBOX.>"),
    (AGENT, "subscribe", "_INBOX_host.>"),
    (HOST, "publish", "lg.propose.tenant-a.run-1"),
    ("reviewer-user-42", "publish", f"lg.review.tenant-b.{INTENT}.decide.user-42"),  # not its tenant
    (REVIEWER, "subscribe", "lg.response.>"),
    (OPERATOR, "subscribe", "lg.evt.>"),
    (ADAPTER, "publish", f"lg.report.draft.prepare_private.{INTENT}"),  # another adapter's capability
    (ADAPTER, "publish", "$KV.LG_CAPABILITIES.item.publish"),
    (ADAPTER, "subscribe", "lg.adapter.item.publish.*"),
    (ADAPTER, "subscribe", "lg.exec.>"),
    (ADAPTER, "subscribe", "_INBOX.>"),
    # services: only their own event types, never the topology
    ("normalization", "publish", f"lg.evt.tenant-a.{INTENT}.3.PolicyDecided"),
    ("policy", "publish", f"lg.evt.tenant-a.{INTENT}.4.ExecutionAuthorized"),
    ("policy", "publish", "lg.exec.case.add_note"),
    ("approval", "publish", "lg.exec.case.add_note"),
    ("intake", "publish", f"$JS.API.STREAM.CREATE.{EVENTS}"),
    ("intake", "publish", f"$JS.API.CONSUMER.DURABLE.CREATE.{EVENTS}.intake"),
    ("executor", "publish", f"$JS.API.STREAM.PURGE.{EVENTS}"),
    ("reconciler", "publish", f"$JS.API.CONSUMER.DELETE.{EVENTS}.executor-gate"),
    # the projector reads the record and changes nothing: no event, no consumer, no purge
    ("projector", "publish", f"lg.evt.tenant-a.{INTENT}.1.CandidateReceived._"),
    ("projector", "publish", f"$JS.API.CONSUMER.CREATE.{EVENTS}.intake.lg.evt.>"),
    ("projector", "publish", f"$JS.API.CONSUMER.DURABLE.CREATE.{EVENTS}.intake"),
    ("projector", "publish", f"$JS.API.STREAM.PURGE.{EVENTS}"),
    ("projector", "publish", f"$KV.{LOCKS_BUCKET}.forged"),
    ("projector", "publish", "lg.exec.case.add_note"),
    ("projector", "subscribe", "lg.evt.>"),
    # the archiver marks and purges; it records nothing else and consumes nothing
    ("archiver", "publish", f"lg.evt.tenant-a.{INTENT}.9.EffectCompleted._"),
    ("archiver", "publish", f"lg.evt.tenant-a.{INTENT}.1.CandidateReceived._"),
    ("archiver", "publish", f"$JS.API.CONSUMER.CREATE.{EVENTS}.intake.lg.evt.>"),
    ("archiver", "publish", f"$JS.API.STREAM.DELETE.{EVENTS}"),
    ("archiver", "publish", f"$JS.API.STREAM.PURGE.{CANDIDATES}"),
    ("archiver", "publish", "lg.exec.case.add_note"),
    ("archiver", "subscribe", "lg.evt.>"),
    # the console acts only over each person's own connection: its own user decides nothing
    ("console", "publish", f"lg.review.tenant-a.{INTENT}.decide.alice"),
    ("console", "publish", f"lg.reconcile.tenant-a.{INTENT}.resolve.ops"),
    ("console", "publish", f"lg.evt.tenant-a.{INTENT}.1.CandidateReceived._"),
    ("console", "publish", f"$JS.API.DIRECT.GET.{EVENTS}"),
    ("console", "subscribe", "lg.evt.>"),
]


@pytest.mark.parametrize(("user", "kind", "subject"), REFUSED, ids=[" ".join(r) for r in REFUSED])
async def test_refused(user: str, kind: str, subject: str, admin: Conn, login: Login) -> None:
    spy = await admin.nc.subscribe(subject) if USERS[user][0].account == SERVICES_ACCOUNT else None
    await assert_refused(await login(user), kind, subject)
    if spy is not None:
        await admin.nc.flush()
        assert spy.pending_msgs == 0  # nothing got through


async def test_refused_jetstream_publish_is_not_stored(admin: Conn, login: Login) -> None:
    agent = await login(AGENT)
    subject = f"lg.evt.tenant-a.{INTENT}.1.CandidateReceived"
    await assert_refused(agent, "publish", subject, agent.nc.jetstream().publish(subject, b"{}", timeout=1.0))
    assert (await admin.nc.jetstream().stream_info(EVENTS)).state.messages == 0


# -- replies cannot land anything -------------------------------------------------------------

#: Where a forged reply could try to make JetStream store its acknowledgement:
#: (stream, subject) for streams, (bucket, key) for buckets.
TARGETS = [
    ("stream", EVENTS, f"lg.evt.tenant-b.{INTENT}.1.CandidateReceived"),
    ("stream", EXEC, "lg.exec.case.add_note"),
    ("stream", REPORTS, f"lg.report.item.publish.{INTENT}"),  # another adapter's capability
    ("stream", CANDIDATES, "lg.propose.tenant-b.run-9"),
    ("stream", RESPONSES, f"lg.response.tenant-b.run-9.{INTENT}"),
    ("bucket", CAPABILITIES_BUCKET, "item.publish"),
    ("bucket", RUNS_BUCKET, "tenant-b.run-9"),
    ("bucket", CATALOGUES_BUCKET, "forged"),
    ("bucket", LOCKS_BUCKET, "tenant-b.case.case-123"),
    ("bucket", BUDGETS_BUCKET, "forged"),
    ("bucket", PROGRESS_BUCKET, "forged"),
]


def _target_subject(kind: str, name: str, where: str) -> str:
    return where if kind == "stream" else f"$KV.{name}.{where}"


async def _landed(admin: Conn, kind: str, name: str, where: str) -> bool:
    js = admin.nc.jetstream()
    try:
        if kind == "stream":
            await js.get_last_msg(name, where)
        else:
            await (await js.key_value(name)).get(where)
    except (NotFoundError, KeyNotFoundError):
        return False
    return True


#: What each role may legitimately publish that JetStream itself answers (so its reply
#: subject receives an acknowledgement or stored messages): the role, the subject, a body.
def _answered_by_jetstream(run: str) -> list[tuple[str, str, bytes]]:
    return [
        (AGENT, subjects.propose_subject("tenant-a", run), b"{}"),
        (AGENT, f"lg.jsapi.DIRECT.GET.{RESPONSES}.lg.response.tenant-a.{run}.x", b""),
        (OPERATOR, f"lg.jsapi.DIRECT.GET.{EVENTS}", b'{"multi_last": ["lg.evt.>"]}'),
        (ADAPTER, f"lg.report.case.add_note.{INTENT}", b"{}"),
        (ADAPTER, "$KV.LG_CAPABILITIES.case.add_note", b"{}"),
        (ADAPTER, "lg.claim.case.add_note", b'{}'),
    ]


@pytest.mark.parametrize(("kind", "name", "where"), TARGETS, ids=[f"{t[1]} {t[2]}" for t in TARGETS])
async def test_no_reply_subject_lands_in_a_stream_or_bucket(
    kind: str, name: str, where: str, admin: Conn, login: Login
) -> None:
    """Edge roles and adapters name a stream's subject (or a bucket's key) as the reply.

    In one account this stored JetStream's acknowledgement there (a forged record); with
    the edge and each adapter in an account of their own, the reply is delivered in
    theirs, where no stream or bucket exists.
    """
    js = admin.nc.jetstream()
    await js.publish("lg.evt.tenant-a.seed.1.Seed", b"{}")  # something for direct gets to return
    reply = _target_subject(kind, name, where)
    conns = {user: await login(user) for user in (AGENT, OPERATOR, ADAPTER)}
    for user, subject, body in _answered_by_jetstream(f"run-{uuid.uuid4().hex[:8]}"):
        await conns[user].nc.publish(subject, body, reply=reply)
    for conn in conns.values():
        await conn.nc.flush()
        assert conn.violations() == [], conn.user  # legitimate publishes, every one
    await asyncio.sleep(0.3)
    assert not await _landed(admin, kind, name, where)


# -- what each role does ------------------------------------------------------------------------


async def test_host_agent_reviewer_and_operator_do_their_part(admin: Conn, login: Login) -> None:
    """The edge roles with the real client SDK, against stand-ins that hold the services' roles."""
    intake, approval, executor = await login("intake"), await login("approval"), await login("executor")
    host, agent, reviewer, operator = [await login(u) for u in (HOST, AGENT, REVIEWER, OPERATOR)]
    tool = Tool("case.add_note", "Add a note.", {"type": "object"})
    seen: list[str] = []

    async def open_run(msg: Msg) -> None:
        await msg.respond(msgspec.json.encode(RunOpened(run_id="run-1", tenant="tenant-a", actor="u")))

    async def open_turn(msg: Msg) -> None:
        await msg.respond(msgspec.json.encode(TurnOpened(turn_id="t1", catalogue_digest="d", tools=(tool,))))

    async def decide(msg: Msg) -> None:
        seen.append(msg.subject)
        await msg.respond(b'{"error": "review.unknown"}')

    async def withdraw(msg: Msg) -> None:
        seen.append(msg.subject)
        await msg.respond(b'{"error": "withdraw.unknown-intent"}')

    await intake.nc.subscribe(subjects.RUN_OPEN_ALL, queue="intake", cb=open_run)
    await intake.nc.subscribe(subjects.TURN_ALL, queue="intake", cb=open_turn)
    await approval.nc.subscribe(subjects.review_all("decide"), queue="approval", cb=decide)
    await executor.nc.subscribe(subjects.WITHDRAW_ALL, queue="executor", cb=withdraw)
    for conn in (intake, approval, executor):
        await conn.nc.flush()

    async def answer_candidates() -> None:
        js = intake.nc.jetstream()
        sub = await js.pull_subscribe_bind("intake", stream=CANDIDATES)
        [msg] = await sub.fetch(1, timeout=5.0)
        await msg.ack_sync()
        call_id = msgspec.json.decode(msg.data)["call_id"]
        candidate = intent_id_for("tenant-a", "run-1", call_id)
        body = ModelResponse(candidate_id=candidate, call_id=call_id, status="rejected", code="x")
        await js.publish(subjects.response_subject("tenant-a", "run-1", candidate), msgspec.json.encode(body))

    responder = asyncio.create_task(answer_candidates())
    run = await gateway(host).open_run(tenant="tenant-a", actor="u")
    turn = await Run(gateway(agent), run.id, run.tenant, run.actor).open_turn()
    response = await turn.propose(tool="case.add_note", arguments=NOTE, call_id="c1")
    await responder
    assert (response.call_id, response.status) == ("c1", "rejected")
    assert await turn.run.response(response.candidate_id) == response  # direct get, own tenant
    with pytest.raises(Refused):
        await gateway(reviewer).decide_review(
            tenant="tenant-a", candidate_id=INTENT, review_id="r", digest="d", approve=True)
    with pytest.raises(Refused):
        await gateway(operator).withdraw("tenant-a", INTENT)
    with pytest.raises(Refused):
        await turn.run.withdraw(INTENT)
    # Who asked is in the subject, where the broker put only the authenticated name.
    assert seen == [
        f"lg.review.tenant-a.{INTENT}.decide.alice",
        f"lg.withdraw.tenant-a._.{INTENT}.{OPERATOR}",
        f"lg.withdraw.tenant-a.run-1.{INTENT}.{AGENT}",
    ]
    for conn in (intake, approval, executor, host, agent, reviewer, operator):
        assert conn.violations() == [], conn.user


async def test_an_adapter_does_its_part_from_its_own_account(admin: Conn, login: Login) -> None:
    """Register, create and consume its own durable, ack, report, claim a boundary: all by import."""
    from nats.js.api import AckPolicy, ConsumerConfig

    adapter = await login(ADAPTER)
    role = USERS[ADAPTER][0]
    js, ajs = adapter.nc.jetstream(prefix=role.js_prefix), admin.nc.jetstream()
    kv = await js.key_value(CAPABILITIES_BUCKET)
    await kv.put("case.add_note", b"described")
    consumer = "adapter-case_add_note"
    await js.add_consumer(EXEC, ConsumerConfig(
        name=consumer, durable_name=consumer, filter_subject="lg.exec.case.add_note",
        ack_policy=AckPolicy.EXPLICIT))
    await ajs.publish("lg.exec.case.add_note", b"order")
    sub = await js.pull_subscribe_bind(consumer, stream=EXEC)
    [order] = await sub.fetch(1, timeout=5.0)
    await order.ack_sync()
    assert (await ajs.consumer_info(EXEC, consumer)).num_ack_pending == 0
    ack = await js.publish(f"lg.report.case.add_note.{INTENT}", b"report")
    assert ack.stream == REPORTS
    # The send boundary of its own capability's orders, claimed of the executor (a stand-in
    # here): answered, and left unchecked, for an order whose intent the record does not hold.
    executor = await login("executor")

    async def no_contract(_: str) -> None:
        return None

    await serve_claims(executor.nc, JetStreamEventStore(executor.nc), key=b"k" * 32,
                       contracts=no_contract, clock=lambda: datetime.now(UTC))
    await executor.nc.flush()
    order = ExecutionOrder(tenant="tenant-a", intent_id=INTENT, attempt_id="a1", intent_key="k",
                           capability="case.add_note", digest="d", arguments={}, resource={},
                           actor="user-42", preconditions={}, authorized_version=1)
    answer = await ClaimClient(adapter.nc, "case.add_note").claim(Claim(order=order, claimant="w1"))
    assert (answer.verdict, answer.reason) == ("unchecked", "order.unchecked")

    async def normalize(msg: Msg) -> None:
        await msg.respond(b"normalized")

    await adapter.nc.subscribe("lg.adapter.case.add_note.*", queue="adapter.case.add_note", cb=normalize)
    await adapter.nc.flush()
    policy = await login("policy")
    reply = await policy.nc.request("lg.adapter.case.add_note.facts", b"{}", timeout=2.0)
    assert reply.data == b"normalized"  # the services reach it through its export
    assert adapter.violations() == [] and policy.violations() == [] and executor.violations() == []
    # Reading the events stream itself, or another capability's record, the broker refuses.
    await assert_refused(adapter, "publish", f"lg.jsapi.DIRECT.GET.{EVENTS}")
    await assert_refused(adapter, "publish", "lg.claim.item.publish")


@dataclass(frozen=True)
class Work:
    """What a service's code does on NATS (read from services/lockgate/<name>)."""

    durables: tuple[str, ...]
    appends: str
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    lists: bool = False
    asks: str | None = None
    publishes: str | None = None
    answers: str | None = None


WORK = {
    "intake": Work(("intake", "intake-responses"), "CandidateReceived",
                   reads=(CAPABILITIES_BUCKET, RUNS_BUCKET, CATALOGUES_BUCKET),
                   writes=(RUNS_BUCKET, CATALOGUES_BUCKET), lists=True, asks="describe",
                   publishes=f"lg.response.tenant-a.run-1.{INTENT}", answers="lg.turn.tenant-a.run-1"),
    "normalization": Work(("normalization",), "CandidateNormalized",
                          reads=(CAPABILITIES_BUCKET, RUNS_BUCKET), asks="normalize"),
    "policy": Work(("policy",), "PolicyDecided", asks="facts"),
    "approval": Work(("approval", "approval-expiry"), "ReviewApproved", reads=(RUNS_BUCKET,),
                     answers=f"lg.review.tenant-a.{INTENT}.decide.alice"),
    "executor": Work(("executor-gate", "executor-reports"),
                     "ExecutionAuthorized", reads=(CAPABILITIES_BUCKET,), asks="facts",
                     publishes="lg.exec.case.add_note"),
    "reconciler": Work(("reconciler",), "Reconciled", asks="query"),
}


def sample_subject(filter_subject: str) -> str:
    """A subject the filter matches."""
    return {"lg.propose.>": "lg.propose.tenant-a.run-1",
            "lg.report.>": f"lg.report.case.add_note.{INTENT}"}.get(
        filter_subject, filter_subject.replace("*.*.*", f"tenant-a.{uuid.uuid4().hex}.1"))


async def test_every_service_is_named_in_the_work_table() -> None:
    assert set(WORK) == set(SERVICES)


@pytest.mark.parametrize("service", list(WORK))
async def test_service_does_its_work(service: str, admin: Conn, login: Login) -> None:
    work = WORK[service]
    conn, adapter = await login(service), await login(ADAPTER)
    js, ajs = conn.nc.jetstream(), admin.nc.jetstream()

    async def echo(msg: Msg) -> None:
        await msg.respond(b"{}")

    await adapter.nc.subscribe("lg.adapter.case.add_note.*", queue="adapter.case.add_note", cb=echo)
    await conn.nc.subscribe(f"lg.status.{service}", queue=f"status.{service}", cb=echo)
    if work.answers:
        await conn.nc.subscribe(work.answers, cb=echo)
    await adapter.nc.flush()
    await conn.nc.flush()
    for bucket in (CAPABILITIES_BUCKET, RUNS_BUCKET, CATALOGUES_BUCKET):
        await (await ajs.key_value(bucket)).put("k", b"v")

    # its durables, bound as FastStream binds them (consumer info, then pull), fetched and acked
    for name in work.durables:
        d = durable(name)
        await ajs.publish(sample_subject(d.filters[0]), b"{}")
        sub = await js.pull_subscribe(d.filters[0], durable=d.name, stream=d.stream)
        [msg] = await sub.fetch(1, timeout=5.0)
        await msg.ack_sync()
    # its own event type, appended (single and atomic batch) and loaded
    store = JetStreamEventStore(conn.nc)
    history = await store.load("tenant-a", uuid.uuid4().hex)
    history = await store.append(history, [NewEvent(uuid.uuid4().hex, work.appends, b"{}")])
    history = await store.append(history, [NewEvent(uuid.uuid4().hex, work.appends, b"{}")
                                           for _ in range(2)])
    assert len((await store.load(history.tenant, history.intent_id)).events) == 3
    # the buckets ports_for opens, and what it does with them
    kvs = {b: await js.key_value(b) for b in (CAPABILITIES_BUCKET, RUNS_BUCKET, CATALOGUES_BUCKET)}
    for bucket in work.reads:
        assert (await kvs[bucket].get("k")).value == b"v"
    for bucket in work.writes:
        await kvs[bucket].put("tenant-a.run-1", b"w")
    if work.lists:
        assert await kvs[CAPABILITIES_BUCKET].keys() == ["k"]
    if work.asks:
        await conn.nc.request(f"lg.adapter.case.add_note.{work.asks}", b"{}", timeout=2.0)
    if work.publishes:
        ack = await js.publish(work.publishes, b"{}")
        assert ack.seq > 0
    if work.answers:
        assert (await admin.nc.request(work.answers, b"{}", timeout=2.0)).data == b"{}"
    assert (await admin.nc.request(f"lg.status.{service}", b"", timeout=2.0)).data == b"{}"
    assert conn.violations() == []
    assert adapter.violations() == []


async def test_roles_grant_what_bounded_failures_and_flood_limits_need(admin: Conn, login: Login) -> None:
    from lockgate.authz.config import Limit
    from lockgate.runtime.ports.ledger import LimitLedger
    from lockgate.runtime.topology import BUDGETS_BUCKET

    intake = await login("intake")
    kv = await intake.nc.jetstream().key_value(BUDGETS_BUCKET)
    limit = Limit(name="per-actor", scope="actor", per_s=10, max_in_flight=2)
    admission = await asyncio.wait_for(LimitLedger(kv).admit(
        [limit], tenant="tenant-a", actor="user-42", run_id="run-1", intent_id=INTENT), 5.0)
    assert admission.refused is None and admission.holds
    for name in SERVICES:
        conn = await login(name)
        store = JetStreamEventStore(conn.nc, timeout_s=2.0)
        history = await store.load("tenant-a", uuid.uuid4().hex)
        history = await store.append(history, [NewEvent(uuid.uuid4().hex, WORK[name].appends, b"{}")])
        await store.append(history, [NewEvent(uuid.uuid4().hex, "ProcessingAbandoned", b"{}")])
        assert conn.violations() == [], name
    assert intake.violations() == []
