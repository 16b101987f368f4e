"""Faults at scale: the whole system on a local three-node JetStream cluster.

Streams at R3 with ``sync_interval: always``, two replicas of every service and adapter,
views on PostgreSQL (``lockgate.testing.cluster``). Each test sends a burst of candidates
(drafts on P, publications on Q, notes on a case), does something bad to the cluster
while they are in flight, and then judges from the outside, as the randomized test does:
the world's ledgers, the stored events (``lockgate.testing.invariants``) and what the
agent runtime was told. Nothing happened twice, every candidate was answered (an agent
runtime that timed out proposes the same call again, as it would), nothing the model was
told executed is missing from the world, no outcome stays unknown, and new candidates
execute once the fault is over.

``make test-cluster`` runs them (``LOCKGATE_CLUSTER=1``; ``LOCKGATE_CLUSTER_LONG=1`` adds
a replica of every process frozen past ack_wait and continued, a node frozen past the
election timeout, a node restarted on its store, and larger bursts), and CI runs ``make test-cluster`` after ``make test``. The events are in three
partitions, one led by each node (``lockgate.eventstore.partitions``): the leader faults
hit the node leading ``LG_EVENTS_0``, which leads that partition only.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import pytest
from nats.js.errors import NoKeysError, NotFoundError

from lockgate.client.sdk import ClientError, Gateway, Refused, Run, Turn
from lockgate.contracts.responses import ModelResponse
from lockgate.core.ids import intent_id_for
from lockgate.intent.aggregate import Event, State
from lockgate.intent.codec import fold
from lockgate.operations.cluster import ELECTION_TIMEOUT_MAX_S, LOST_QUORUM_S
from lockgate.operations.status import ADAPTERS, SERVICES
from lockgate.runtime.topology import LOCKS_BUCKET
from lockgate.testing.cluster import ClusterSystem
from lockgate.testing.demo import play_table
from lockgate.testing.invariants import by_intent, violations
from lockgate.testing.system import running
from lockgate.views.store import open_views
from lockgate.worlds.casenotes.world import World as CaseWorld
from lockgate.worlds.items.adapter import DRAFT, PUBLISH
from lockgate.worlds.items.world import World as ItemsWorld

LONG = os.environ.get("LOCKGATE_CLUSTER_LONG") == "1"
#: The events partition whose leader the leader faults hit (each node leads one).
EVENTS = "LG_EVENTS_0"
pytestmark = pytest.mark.skipif(not (LONG or os.environ.get("LOCKGATE_CLUSTER") == "1"),
                                reason="make test-cluster runs the cluster suite (LOCKGATE_CLUSTER=1)")
long_only = pytest.mark.skipif(not LONG, reason="make test-cluster runs it (LOCKGATE_CLUSTER_LONG=1)")
#: Candidates per burst.
BURST = 36 if LONG else 18
#: Candidates per run (and turn): fewer than any per-run limit of the demo policies.
PER_RUN = 12
#: Proposals waiting for their first response at once.
IN_FLIGHT = 8
TENANT, ACTOR, SPACE, CASE = "tenant-a", "user-42", "space-1", "case-123"
NOTE = "case.add_note"
#: How long one proposal waits for its first response before the runtime asks again.
PROPOSE_TIMEOUT_S = 20.0
#: How long a burst has, after its fault, until every candidate is answered and settled.
SETTLE_S = 90.0
#: What the model may have been told, and the final states consistent with it.
CONSISTENT: dict[str, frozenset[State]] = {
    "executed": frozenset({State.COMPLETED}),
    "unavailable": frozenset({State.FAILED, State.REFUSED, State.DENIED}),
    "outcome_unknown": frozenset({State.COMPLETED, State.FAILED, State.REFUSED}),
    "paused": frozenset({State.COMPLETED, State.FAILED, State.REFUSED, State.DENIED}),
}
WAITING = frozenset({State.UNKNOWN, State.NEEDS_OPERATOR})
#: One replica of every service and adapter (the replica faults' victims).
ONE_REPLICA_EACH = [f"{name}-1" for name in (*SERVICES, *(n for n, _ in ADAPTERS))]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterSystem]:
    with running(ClusterSystem(tmp_path_factory.mktemp("cluster")), timeout_s=180.0) as s:
        yield s


@pytest.fixture
async def gw(cluster: ClusterSystem) -> AsyncIterator[Gateway]:
    gateway = await cluster.gateway(TENANT, timeout_s=10.0)
    try:
        yield gateway
    finally:
        await gateway.close()


@dataclass
class Sent:
    """One candidate of a burst and what its agent runtime was told."""

    run: Run
    turn: Turn
    tool: str
    arguments: str
    call_id: str
    response: ModelResponse | None = None
    attempts: int = 0
    error: str = ""

    @property
    def intent_id(self) -> str:
        return intent_id_for(TENANT, self.run.id, self.call_id)


async def propose_until_answered(s: Sent, until: float) -> None:
    """Propose; on a timeout or a broker error propose the same call again (idempotent)."""
    while time.monotonic() < until:
        s.attempts += 1
        try:
            s.response = await s.turn.propose(tool=s.tool, arguments=s.arguments,
                                              call_id=s.call_id, timeout_s=PROPOSE_TIMEOUT_S)
            return
        except ClientError as exc:
            s.error = f"{type(exc).__name__}: {exc}"
            await asyncio.sleep(0.5)


async def open_until_answered(gw: Gateway) -> tuple[Run, Turn]:
    """Open a run and its turn, for longer than the SDK's own asking again (``OPEN_RETRY_S``,
    under one run id): a node restarting may take longer than that to be answered."""
    until = time.monotonic() + SETTLE_S
    while True:
        try:
            run = await gw.open_run(tenant=TENANT, actor=ACTOR,
                                    context={"space_id": SPACE, "case_id": CASE})
            return run, await run.open_turn()
        except Refused as exc:
            if exc.code != "service.unavailable":
                raise  # an answer, and a wrong one (run.unknown from a lagging replica, say)
        except ClientError:
            pass  # no answer: a node went away with the request
        if time.monotonic() > until:
            raise TimeoutError(f"no run opened within {SETTLE_S:.0f}s")
        await asyncio.sleep(0.5)  # "ask again": JetStream was electing a leader


async def burst(gw: Gateway, tag: str, n: int = BURST) -> tuple[list[Sent], list[asyncio.Task[None]]]:
    """Start ``n`` candidates (P, Q and C in turn), ``IN_FLIGHT`` at a time; return at once."""
    tools = (DRAFT, PUBLISH, NOTE)
    sent = []
    for i in range(n):
        if i % PER_RUN == 0:
            # A run's budgets and rate limits are policy's business, not this test's.
            run, turn = await open_until_answered(gw)
        tool = tools[i % len(tools)]
        arguments = (f'{{"note": "{tag} {i}"}}' if tool == NOTE
                     else f'{{"title": "{tag} {i}", "body": "b{i}"}}')
        sent.append(Sent(run, turn, tool, arguments, f"{tag}-{i:03d}"))
    slots = asyncio.Semaphore(IN_FLIGHT)
    until = time.monotonic() + SETTLE_S

    async def one(s: Sent) -> None:
        async with slots:
            await propose_until_answered(s, until)

    return sent, [asyncio.create_task(one(s)) for s in sent]


async def histories(cluster: ClusterSystem, intent_ids: set[str], until: float) -> dict[str, list[Event]]:
    """Every stored history, once each of ``intent_ids`` is terminal (or ``until`` passed)."""
    nc = await cluster.connect()
    try:
        while True:
            found = by_intent([e async for e in cluster.store(nc).scan()])
            finals = [fold(found.get(i, [])) for i in intent_ids]
            if all(f is not None and f.state.terminal for f in finals) or time.monotonic() > until:
                return found
            await asyncio.sleep(0.5)
    finally:
        await nc.close()


async def judge(cluster: ClusterSystem, sent: list[Sent], tasks: list[asyncio.Task[None]],
                what: str) -> str:
    """Wait for the burst to be answered and settled; assert nothing is lost, doubled or false."""
    await asyncio.wait(tasks, timeout=SETTLE_S + 5)
    for t in tasks:
        t.cancel()
    until = time.monotonic() + SETTLE_S
    ids = {s.intent_id for s in sent}
    stored = await histories(cluster, ids, until)
    items, case = ItemsWorld(cluster.items_dir), CaseWorld(cluster.world_dir)
    drafts, publications, notes = items.drafts(), items.publications(), case.ledger()
    writes = Counter(str(e["intent_id"]) for e in (*drafts, *publications, *notes))
    finals = {s.intent_id: fold(stored.get(s.intent_id, [])) for s in sent}
    problems: list[str] = []
    for s in sent:
        f = finals[s.intent_id]
        label = f"{s.call_id} {s.tool} ({s.intent_id})"
        if s.response is None:
            problems.append(f"{label}: never answered after {s.attempts} proposals ({s.error})")
        if f is None:
            problems.append(f"{label}: no intent in the store (lost)")
            continue
        if f.state in WAITING or not f.state.terminal:
            problems.append(f"{label}: not settled, {f.state.value}")
        told = s.response.status if s.response is not None else None
        if told == "executed" and (f.state is not State.COMPLETED or writes[s.intent_id] != 1):
            problems.append(f"{label}: told executed, yet {f.state.value} with "
                            f"{writes[s.intent_id]} world writes (false executed)")
        elif told is not None and told != "executed" and f.state not in CONSISTENT.get(told, frozenset()):
            problems.append(f"{label}: told {told}, ends {f.state.value}")
        if f.state is State.COMPLETED and writes[s.intent_id] != 1:
            problems.append(f"{label}: completed with {writes[s.intent_id]} world writes")
    doubled = [i for i, n in writes.items() if n > 1]
    problems += [f"{i}: {writes[i]} effects in the world (duplicate)" for i in doubled]
    problems += violations({i: stored.get(i, []) for i in ids},
                           [e for e in (*drafts, *notes) if e["intent_id"] in ids])
    statuses = Counter(s.response.status if s.response else "none" for s in sent)
    retried = sum(1 for s in sent if s.attempts > 1)
    summary = (f"{what}: {len(sent)} candidates, told {dict(statuses)}, "
               f"{retried} proposed again after a timeout; final states "
               f"{dict(Counter(f.state.value if f else 'missing' for f in finals.values()))}")
    print(summary)
    if problems:
        summary += "\n" + await diagnosis(cluster, [s.intent_id for s in sent], stored, finals)
    assert not problems, summary + "\n  " + "\n  ".join(problems[:30])
    return summary


async def diagnosis(cluster: ClusterSystem, ids: list[str], stored: dict[str, list[Event]],
                    finals: dict[str, object]) -> str:
    """What a failure needs said: the events of the intents not completed (and why they
    ended), every durable's state, and every lock held."""
    lines = []
    for i in ids:
        f = finals[i]
        if f is None or getattr(f, "state") is not State.COMPLETED:  # noqa: B009
            why = f" ({f.reason}: {getattr(f, 'detail', '')})" if getattr(f, "reason", None) else ""
            lines.append(f"  {i}{why}: " + " ".join(type(e).__name__ for e in stored.get(i, [])))
    nc = await cluster.connect()
    try:
        js = nc.jetstream()
        for stream in cluster.partitions.streams:
            async for info in _consumers(js, stream):
                c = info.config
                lines.append(f"  {stream}/{c.durable_name}: pending {info.num_pending} "
                             f"ack_pending {info.num_ack_pending} redelivered {info.num_redelivered} "
                             f"waiting {info.num_waiting} leader {info.cluster.leader if info.cluster else '?'}")
        # A resource lock held by an intent that no longer holds it stalls every later effect
        # on that resource: name each held lock and where its holder stands on the record.
        locks = await js.key_value(LOCKS_BUCKET)
        with contextlib.suppress(NoKeysError):
            for key in await locks.keys():
                with contextlib.suppress(NotFoundError):
                    msg = await js.get_msg(f"KV_{LOCKS_BUCKET}", subject=f"$KV.{LOCKS_BUCKET}.{key}")
                    holder = (msg.data or b"").decode()
                    if holder and (msg.headers or {}).get("KV-Operation") is None:
                        history = stored.get(holder) or []
                        lines.append(f"  lock {key}: held by {holder} since {lock_written(msg)} (revision {msg.seq}): "
                                     + (" ".join(f"{type(e).__name__}@{e.timestamp:%H:%M:%S.%f}"
                                                 for e in history) or "not in this burst"))
    finally:
        await nc.close()
    return "\n".join(lines)


def lock_written(msg: object) -> str:
    """When the broker stored a lock's write, as the events' times are shown."""
    when = getattr(msg, "time", None)
    return f"{when:%H:%M:%S.%f}" if when is not None else "?"


async def _consumers(js: object, stream: str) -> AsyncIterator[object]:
    for info in await js.consumers_info(stream):  # type: ignore[attr-defined]
        yield info


async def new_candidates_execute(cluster: ClusterSystem, gw: Gateway, tag: str) -> None:
    """After a fault, a fresh burst runs through with nothing wrong done to it."""
    sent, tasks = await burst(gw, tag, n=6)
    await judge(cluster, sent, tasks, f"after {tag}")
    assert all(s.response is not None and s.response.status == "executed" for s in sent), [
        (s.call_id, s.response.status if s.response else None) for s in sent]


# -- the tests ------------------------------------------------------------------------------


async def test_every_process_runs_twice_on_r3_streams(cluster: ClusterSystem) -> None:
    leaders = []
    for stream in cluster.partitions.streams:
        events = await cluster.stream(stream)
        assert events is not None and events.leader, stream
        assert len(events.replicas) == 2 and all(r.current for r in events.replicas), stream
        leaders.append(events.leader)
    # Each partition led by a node of its own: no node leads every append.
    assert sorted(leaders) == sorted(n.name for n in cluster.nodes), leaders
    for name in (*SERVICES, *(n for n, _ in ADAPTERS)):
        assert {f"{name}-1", f"{name}-2"} <= set(cluster.processes), name
    conf = (cluster.root / "cluster" / "n1" / "nats-server.conf").read_text()
    assert "sync_interval: always" in conf and "server_name: n1" in conf


async def test_the_views_are_on_postgresql(cluster: ClusterSystem, gw: Gateway) -> None:
    """As the suite says: the projector writes the views into the cluster's own PostgreSQL."""
    assert cluster.views is not None
    await new_candidates_execute(cluster, gw, "views")
    views = await asyncio.to_thread(open_views, cluster.views.url)
    try:
        deadline = time.monotonic() + 60
        while not await asyncio.to_thread(views.intents, tenant=TENANT):
            assert time.monotonic() < deadline, "nothing was projected into PostgreSQL"
            await asyncio.sleep(0.5)
    finally:
        views.close()


async def test_the_demo_table(cluster: ClusterSystem, gw: Gateway) -> None:
    assert (await play_table(cluster, gw, TENANT)).wrong == []


async def test_events_leader_killed_mid_burst(cluster: ClusterSystem, gw: Gateway) -> None:
    leader = await cluster.leader_of(EVENTS)
    sent, tasks = await burst(gw, "leader-kill")
    await asyncio.sleep(1.5)  # the burst is in flight
    cluster.kill_node(leader)
    try:
        new_leader = await cluster.leader_of(EVENTS, timeout_s=30.0)
        assert new_leader != leader
        await judge(cluster, sent, tasks, f"events leader {leader} SIGKILLed, {new_leader} took over")
    finally:  # the tests after this one get all three nodes back
        await cluster.restart_node(leader)
        await cluster.settled()
    await new_candidates_execute(cluster, gw, "after-leader-kill")


async def test_one_replica_of_each_process_killed_under_load(cluster: ClusterSystem, gw: Gateway) -> None:
    sent, tasks = await burst(gw, "replica-kill")
    await asyncio.sleep(1.5)
    victims = ONE_REPLICA_EACH
    for label in victims:
        cluster.processes[label].send_signal(signal.SIGKILL)
    try:
        await judge(cluster, sent, tasks, f"SIGKILLed {', '.join(victims)}")
    finally:
        for label in victims:
            cluster.processes[label].wait()
            cluster.spawn_replica(label)
        await cluster.wait_ready(victims)
    await new_candidates_execute(cluster, gw, "after-replica-kill")


@long_only
async def test_one_replica_of_each_process_frozen_past_ack_wait(cluster: ClusterSystem, gw: Gateway) -> None:
    """SIGSTOP, then SIGCONT: the frozen replicas' messages go to the others after ack_wait,
    and the frozen ones wake up mid-handler, with a history, a claim or a write held from
    before. What they do then must change nothing: appends conflict, claims are refused,
    a held write lands only while its attempt still waits for it."""
    sent, tasks = await burst(gw, "replica-freeze")
    await asyncio.sleep(1.5)
    victims = ONE_REPLICA_EACH
    for label in victims:
        cluster.processes[label].send_signal(signal.SIGSTOP)
    try:
        await asyncio.sleep(3 * cluster.settings().ack_wait_s)
    finally:
        for label in victims:
            cluster.processes[label].send_signal(signal.SIGCONT)
    await judge(cluster, sent, tasks, f"SIGSTOPped {', '.join(victims)} past ack_wait, then continued")
    await new_candidates_execute(cluster, gw, "after-replica-freeze")


@long_only
async def test_a_node_frozen_past_the_election_timeout(cluster: ClusterSystem, gw: Gateway) -> None:
    frozen = await cluster.leader_of(EVENTS)
    sent, tasks = await burst(gw, "freeze")
    await asyncio.sleep(1.0)
    cluster.freeze_node(frozen)
    try:
        # Past the longest election timeout and the lost-quorum step-down: its leaderships are gone.
        await asyncio.sleep(max(ELECTION_TIMEOUT_MAX_S, LOST_QUORUM_S) + 2.0)
        taken = await cluster.leader_of(EVENTS, timeout_s=20.0)
    finally:
        cluster.thaw_node(frozen)
    assert taken != frozen
    await judge(cluster, sent, tasks, f"{frozen} SIGSTOPped past the election timeout, {taken} led")
    await cluster.settled()
    await new_candidates_execute(cluster, gw, "after-freeze")


@long_only
async def test_a_node_restarted_with_its_store(cluster: ClusterSystem, gw: Gateway) -> None:
    leader = await cluster.leader_of(EVENTS)
    node = next(n.name for n in cluster.nodes if n.name != leader)
    assert cluster.cluster is not None
    cluster.cluster.node(node).stop()  # a clean stop; its store stays as it is
    try:
        sent, tasks = await burst(gw, "node-down")
        await judge(cluster, sent, tasks, f"{node} down while a burst ran")
    finally:
        await cluster.restart_node(node)
    await cluster.settled(timeout_s=90.0)  # it caught up: every replica current
    events = await cluster.stream(EVENTS)
    assert events is not None and node in {events.leader, *(r.name for r in events.replicas)}
    await new_candidates_execute(cluster, gw, "after-node-restart")
