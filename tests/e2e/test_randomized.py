"""Proof over many runs: a few hundred candidates through seeded, random faults.

Candidates go to both items servers (``draft.prepare_private`` on P, ``item.publish``
on Q) and to a few cases of the case-notes world (``case.add_note``, C: effects on one
case run one at a time under its resource lock), about one in ten of them invalid,
while a seeded plan arms faults in the world at random moments (lost responses,
adapter crashes after send or after commit, failures before send) and SIGKILLs the
executor. The executor also kills itself now and then at the worst moment for a lock:
right after it recorded the end of a C effect and before it freed the case's lock
(``lockgate.testing.crashpoints``). Some candidates are withdrawn at random moments.
A supervisor task brings back every process that died, as ``make run``'s supervisor
would. Once the faults stop and every intent has settled, the event store, the worlds
and the locks must agree: nothing happened twice, nothing was lost, nothing is stuck,
nothing happened that the model was told was withdrawn, no lock outlives its holder's
hold, and the invariants (docs/design.md) hold.

``LOCKGATE_CHAOS_SEED`` picks the plan (which candidates, which faults, when) and
``LOCKGATE_CHAOS_CANDIDATES`` how many candidates (default 200). The plan is
reproducible; how the real processes interleave with it is not, so a failing seed
may need a few runs to fail again. Every assertion message names the seed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field

import nats
import pytest

from lockgate.client.sdk import ClientError, Gateway, Refused, ResponseTimeout, Run, Turn
from lockgate.contracts.capability import CapabilityContract
from lockgate.contracts.responses import ModelResponse
from lockgate.core.ids import intent_id_for
from lockgate.intent.aggregate import EffectIntent, Event, State
from lockgate.intent.codec import fold
from lockgate.intent.disclosure import model_view
from lockgate.intent.events import (
    AttemptFailedBeforeSend,
    ExecutionAuthorized,
    GateRefused,
    InterruptionRequested,
    OutcomeUnknown,
    Reconciled,
    ReportRefused,
    WithdrawalRequested,
    Withdrawn,
)
from lockgate.operations.status import CHILDREN
from lockgate.runtime.specs import ENDS_HOLD
from lockgate.runtime.topology import LOCKS_BUCKET
from lockgate.testing.cluster import ClusterSystem
from lockgate.testing.invariants import by_intent, violations
from lockgate.testing.system import System, running
from lockgate.worlds.casenotes.adapter import CONTRACT as NOTE_CONTRACT
from lockgate.worlds.casenotes.world import World as CaseWorld
from lockgate.worlds.items.adapter import DRAFT, PUBLISH, draft_contract, publish_contract
from lockgate.worlds.items.world import FAULTS, SERVERS
from lockgate.worlds.items.world import World as ItemsWorld

SEED = int(os.environ.get("LOCKGATE_CHAOS_SEED", "20260417"))
#: The cluster mode (``make test-cluster``): the same plan on three nodes, R3 streams,
#: three events partitions and two replicas of every process (``ClusterSystem``).
CLUSTER = os.environ.get("LOCKGATE_CHAOS_CLUSTER") == "1"
CANDIDATES = int(os.environ.get("LOCKGATE_CHAOS_CANDIDATES", "200"))
#: Proposals waiting for their first response at once.
IN_FLIGHT = 16
#: Candidates per run (each run has one turn they all come from).
PER_RUN = 10
#: Share of candidates whose arguments must be rejected.
INVALID_SHARE = 0.1
#: Outcome deadline of both items capabilities: long enough for a redelivered order
#: (ack_wait 5 s) to land before it.
DEADLINE_S = 8
TENANT, ACTOR, SPACE = "tenant-a", "user-42", "space-1"
#: The cases C candidates write to: runs share them, so their effects contend for locks.
CASES = tuple(f"case-load-{n}" for n in range(40, 44))
#: Share of valid candidates the agent runtime withdraws, at a random moment.
WITHDRAW_SHARE = 0.15
#: How often the executor kills itself between an append that ends a C effect's hold and
#: the release that follows it, and at most how many times in a run.
SELF_KILL_PROBABILITY, SELF_KILL_LIMIT = 0.15, 4
#: Subscribers of space-1 in the items world's seed: one notification each per publication.
SUBSCRIBERS = 3
ADAPTER, EXECUTOR = "adapter.items", "executor"


def replicas(name: str) -> tuple[str, ...]:
    """The processes of ``name``: itself, or its two replicas' labels on the cluster."""
    return (f"{name}-1", f"{name}-2") if CLUSTER else (name,)


#: The processes the test's supervisor brings back; the executor replica the plan SIGKILLs.
WATCHED = (*replicas(ADAPTER), *replicas(EXECUTOR))
KILLED = replicas(EXECUTOR)[0]
#: Exit status of an adapter killed by an armed crash fault; of a SIGKILLed service.
CRASH_EXIT, SIGKILLED = 137, -9

#: Longest wait for one candidate's first response.
PROPOSE_TIMEOUT_S = 60.0
#: Faults stop at the latest this long after the first proposal.
CHAOS_BUDGET_S = 80.0
#: After the faults stop: how long every candidate and intent has to settle.
DRAIN_BUDGET_S = 60.0
#: How long the stored model-facing responses have to catch up with the final state.
RESPONSES_BUDGET_S = 20.0
#: How long locks left by a killed executor have to be released from the record.
LOCKS_BUDGET_S = 20.0

NOTE = "case.add_note"
TOOLS = {"P": DRAFT, "Q": PUBLISH, "C": NOTE}
CONTRACTS: dict[str, CapabilityContract] = {
    DRAFT: draft_contract(DEADLINE_S), PUBLISH: publish_contract(DEADLINE_S), NOTE: NOTE_CONTRACT,
}
WAITING = frozenset({State.UNKNOWN, State.NEEDS_OPERATOR})
#: What the model was told, and the final states that are consistent with it.
CONSISTENT: dict[str, frozenset[State]] = {
    "executed": frozenset({State.COMPLETED}),
    "rejected": frozenset({State.REJECTED}),
    "denied": frozenset({State.DENIED}),
    "unavailable": frozenset({State.FAILED, State.REFUSED, State.DENIED}),
    # Withdrawn before any order, refused by the adapter, or stopped by it (interrupted).
    "withdrawn": frozenset({State.WITHDRAWN, State.INTERRUPTED}),
    # Evidence decides later: found, proven absent and retried (or withdrawn), or still open.
    "outcome_unknown": frozenset({State.COMPLETED, State.FAILED, State.REFUSED, State.WITHDRAWN}
                                 | WAITING),
    # The order may be out: the adapter refuses it, or it had crossed and the outcome is settled.
    "withdrawal_requested": frozenset({State.WITHDRAWN, State.COMPLETED, State.FAILED,
                                       State.INTERRUPTED} | WAITING),
    "interruption_requested": frozenset({State.COMPLETED, State.FAILED, State.INTERRUPTED,
                                         State.WITHDRAWN, State.REFUSED} | WAITING),
    # Policy waited for facts a crashed adapter could not give; decided again when it is back.
    "paused": frozenset({State.COMPLETED, State.DENIED, State.FAILED, State.REFUSED,
                         State.WITHDRAWN, State.INTERRUPTED} | WAITING),
}
#: Statuses after which the model waits for what follows.
PENDING = frozenset({"outcome_unknown", "withdrawal_requested", "interruption_requested", "paused"})


def invalid_arguments(rng: random.Random, n: int, server: str) -> str:
    """Arguments the system must reject before any effect."""
    if server == "C":
        return rng.choice([
            '{"note": "   "}', "{}", f'{{"Note": "n{n}"}}', '{"note": 7}',
            f'{{"note": "n{n}", "case_id": "case-999"}}', f'{{"note": "{"é" * 251}"}}', "not json",
        ])
    return rng.choice([
        f'{{"title": "", "body": "b{n}"}}',                        # empty after trimming
        f'{{"title": "   ", "body": "b{n}"}}',
        f'{{"title": "t{n}", "body": "  "}}',
        f'{{"title": "{"x" * 121}", "body": "b{n}"}}',             # too long
        f'{{"title": "t{n}"}}',                                    # body missing
        f'{{"title": "t{n}", "body": "b{n}", "space_id": "space-9"}}',  # not the model's to say
        f'{{"title": 7, "body": "b{n}"}}',
        "not json at all",
    ])


@dataclass(frozen=True)
class Planned:
    """One candidate of the plan."""

    n: int
    server: str
    arguments: str
    valid: bool
    gap_s: float  # pause before it is proposed
    withdraw_after_s: float | None = None  # the runtime withdraws it this long after proposing

    @property
    def tool(self) -> str:
        return TOOLS[self.server]

    @property
    def call_id(self) -> str:
        return f"chaos-{self.n:04d}"


def candidate_plan(seed: int, count: int) -> list[Planned]:
    rng = random.Random(f"{seed}:candidates")
    plan = []
    for n in range(count):
        valid = rng.random() >= INVALID_SHARE
        server = rng.choice((*SERVERS, "C"))
        if not valid:
            arguments = invalid_arguments(rng, n, server)
        elif server == "C":
            arguments = f'{{"note": "chaos note {n}"}}'
        else:
            arguments = f'{{"title": "t{n}", "body": "b{n}"}}'
        withdraw = None
        if valid and rng.random() < WITHDRAW_SHARE:
            # Half of them early, while the candidate is still on its way to the gate.
            withdraw = rng.uniform(0.0, 0.05) if rng.random() < 0.5 else rng.uniform(0.05, 0.8)
        plan.append(Planned(n, server, arguments, valid, gap_s=rng.uniform(0.0, 0.25),
                            withdraw_after_s=withdraw))
    return plan


@dataclass(frozen=True)
class Action:
    """One step of the fault plan: arm ``fault`` on ``server``, or SIGKILL the executor."""

    wait_s: float  # before the action
    fault: str  # one of FAULTS, or "kill_executor"
    server: str = ""
    pause_s: float = 0.0  # how long the executor stays dead


KILL = "kill_executor"
WEIGHTS = {"drop_response": 4, "fail_before_send": 3, "crash_after_send": 2,
           "crash_after_commit": 2, KILL: 2}


def fault_plan(seed: int) -> Iterator[Action]:
    """Endless seeded actions; the first ones arm every fault on both servers and kill once."""
    rng = random.Random(f"{seed}:faults")

    def action(kind: str) -> Action:
        wait_s = rng.uniform(0.3, 1.8)
        if kind == KILL:
            return Action(wait_s, KILL, pause_s=rng.uniform(0.2, 2.0))
        return Action(wait_s, kind, server=rng.choice(SERVERS))

    first = [(fault, server) for fault in FAULTS for server in SERVERS] + [(KILL, "")]
    rng.shuffle(first)
    for kind, server in first:
        yield action(KILL) if kind == KILL else Action(rng.uniform(0.2, 1.2), kind, server)
    kinds, weights = list(WEIGHTS), list(WEIGHTS.values())
    while True:
        yield action(rng.choices(kinds, weights)[0])


class Supervisor:
    """Restarts every watched process that exited, as ``make run`` would, and keeps count."""

    def __init__(self, system: System, names: tuple[str, ...]) -> None:
        self.system = system
        self.names = names
        self.exits: list[tuple[str, int]] = []
        self.restarts: Counter[str] = Counter()
        self.problems: list[str] = []
        self.restarting: set[str] = set()
        self._hold_until: dict[str, float] = {}
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._watch(n)) for n in self.names]

    def hold(self, name: str, seconds: float) -> None:
        """Leave ``name`` dead for ``seconds`` before bringing it back."""
        self._hold_until[name] = time.monotonic() + seconds

    def alive(self, name: str) -> bool:
        return name not in self.restarting and self.system.processes[name].poll() is None

    async def _watch(self, name: str) -> None:
        while True:
            proc = self.system.processes[name]
            if proc.poll() is None:
                await asyncio.sleep(0.05)
                continue
            self.restarting.add(name)
            try:
                self.exits.append((name, proc.returncode))
                await asyncio.sleep(max(0.0, self._hold_until.pop(name, 0.0) - time.monotonic()))
                try:
                    await self.system.restart(name)
                    self.restarts[name] += 1
                except RuntimeError:
                    pass  # died again while starting (an armed crash): seen on the next turn
                except Exception as exc:  # reported with the other problems
                    self.problems.append(f"{name} could not be restarted: {exc!r}")
            finally:
                self.restarting.discard(name)

    async def settle(self, timeout_s: float = 60.0) -> None:
        """Wait until every watched process runs and answers."""
        deadline = time.monotonic() + timeout_s
        while not all(self.alive(n) for n in self.names):
            if time.monotonic() > deadline:
                self.problems.append(f"not running after {timeout_s}s: "
                                     f"{[n for n in self.names if not self.alive(n)]}")
                return
            await asyncio.sleep(0.1)
        await self.system.wait_ready(list(self.names))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


@dataclass
class Chaos:
    """What the fault injector did."""

    injected: Counter[tuple[str, str]] = field(default_factory=Counter)
    unconsumed: Counter[tuple[str, str]] = field(default_factory=Counter)
    kills: int = 0
    skipped_kills: int = 0

    @property
    def consumed(self) -> Counter[tuple[str, str]]:
        return self.injected - self.unconsumed

    def consumed_of(self, fault: str) -> int:
        return sum(n for (_, f), n in self.consumed.items() if f == fault)


async def inject_faults(system: System, items: ItemsWorld, supervisor: Supervisor, chaos: Chaos,
                        stop: asyncio.Event) -> None:
    """Follow the seeded fault plan until ``stop`` is set; the last action always completes."""
    for action in fault_plan(SEED):
        try:
            await asyncio.wait_for(stop.wait(), timeout=action.wait_s)
            return
        except TimeoutError:
            pass
        if action.fault == KILL:
            if not supervisor.alive(KILLED):
                chaos.skipped_kills += 1  # still coming back from the last kill
                continue
            supervisor.hold(KILLED, action.pause_s)
            system.kill(KILLED)
            chaos.kills += 1
        else:
            await asyncio.to_thread(items.inject, action.server, action.fault)
            chaos.injected[(action.server, action.fault)] += 1


@dataclass
class Candidate:
    """One planned candidate and what the client was told about it."""

    planned: Planned
    run: Run
    turn: Turn
    first: ModelResponse | None = None
    later: ModelResponse | None = None
    error: str | None = None
    #: What each withdrawal answered, and what followed a pending one.
    withdrawals: list[ModelResponse] = field(default_factory=list)

    @property
    def intent_id(self) -> str:
        return intent_id_for(TENANT, self.run.id, self.planned.call_id)

    def told(self) -> list[ModelResponse]:
        return [r for r in (self.first, self.later, *self.withdrawals) if r is not None]


async def follow(c: Candidate, latest: ModelResponse, until: float) -> ModelResponse | None:
    """What an agent runtime does after a pending status: wait for what follows it."""
    later = None
    while latest.status in PENDING and time.monotonic() < until:
        try:
            latest = later = await c.run.wait(c.intent_id, past=latest.status,
                                              timeout_s=max(1.0, until - time.monotonic()))
        except ResponseTimeout:  # still open: judged against the store
            break
    return later


async def withdraw(c: Candidate, after_s: float, until: float) -> None:
    """Withdraw the candidate ``after_s`` after proposing it; ask again while nobody answers."""
    await asyncio.sleep(after_s)
    while time.monotonic() < until:
        try:
            reply = await c.run.withdraw(c.intent_id, why="the chaos test changed its mind")
        except Refused:  # not on record yet, or between two steps
            await asyncio.sleep(0.1)
            continue
        except ClientError:  # the executor is down: its supervisor brings it back
            await asyncio.sleep(0.2)
            continue
        c.withdrawals.append(reply)
        later = await follow(c, reply, until)
        if later is not None:
            c.withdrawals.append(later)
        return


async def drive(c: Candidate, slots: asyncio.Semaphore, started: list[int], until: float) -> None:
    """Propose one candidate (holding a slot until the first response), then follow it up."""
    withdrawal = None
    async with slots:
        started[0] += 1
        if c.planned.withdraw_after_s is not None:
            withdrawal = asyncio.create_task(withdraw(c, c.planned.withdraw_after_s, until))
        try:
            c.first = await c.turn.propose(tool=c.planned.tool, arguments=c.planned.arguments,
                                           call_id=c.planned.call_id, timeout_s=PROPOSE_TIMEOUT_S)
        except ClientError as exc:
            c.error = f"propose: {type(exc).__name__}: {exc}"
    try:
        if c.first is not None:
            c.later = await follow(c, c.first, until)
    finally:
        if withdrawal is not None:
            await withdrawal


async def drain_store(system: System, intent_ids: set[str], until: float) -> dict[str, list[Event]]:
    """Every stored history, once each of ``intent_ids`` is terminal or ``until`` has passed."""
    nc = await system.connect()  # the record is read as the topology owner
    try:
        while True:
            histories = by_intent([e async for e in system.store(nc).scan()])
            finals = (fold(histories.get(i, [])) for i in intent_ids)
            if all(f is not None and f.state.terminal for f in finals) or time.monotonic() > until:
                return histories
            await asyncio.sleep(0.5)
    finally:
        await nc.close()


@dataclass
class Settled:
    """The store and the world once everything settled, next to what the client saw."""

    candidates: dict[str, Candidate]  # by intent id
    histories: dict[str, list[Event]]
    drafts: list[dict[str, str]]
    publications: list[dict[str, str]]
    notifications: list[dict[str, str]]
    notes: list[dict[str, str]]

    def __post_init__(self) -> None:
        self.finals = {i: fold(self.histories.get(i, [])) for i in self.candidates}
        self.effects: dict[str, list[tuple[str, dict[str, str]]]] = defaultdict(list)
        for d in self.drafts:
            self.effects[d["intent_id"]].append(("P", d))
        for p in self.publications:
            self.effects[p["intent_id"]].append(("Q", p))
        for note in self.notes:
            if note["case_id"] in CASES:
                self.effects[note["intent_id"]].append(("C", note))

    def known(self) -> Iterator[tuple[str, Candidate, EffectIntent, str]]:
        """Each candidate whose intent is stored, its final state, and a label for messages."""
        for intent_id, c in self.candidates.items():
            f = self.finals[intent_id]
            if f is not None:
                yield intent_id, c, f, f"{c.planned.call_id} {intent_id} ({c.planned.tool}, {f.state.value})"

    def recovery_paths(self) -> Counter[str]:
        """How often each recovery step happened, for the summary and the sanity check."""
        paths: Counter[str] = Counter()
        for intent_id in self.candidates:
            for e in self.histories.get(intent_id, []):
                if isinstance(e, Reconciled):
                    paths[f"Reconciled:{e.finding}/{e.resolution}"] += 1
                elif isinstance(e, (GateRefused, AttemptFailedBeforeSend)):
                    paths[f"{type(e).__name__}:{e.reason}"] += 1
                elif isinstance(e, (OutcomeUnknown, ExecutionAuthorized,
                                    WithdrawalRequested, Withdrawn,
                                    InterruptionRequested, ReportRefused)):
                    paths[type(e).__name__] += 1
        return paths


def lost(s: Settled) -> list[str]:
    """Every call id became an intent, and no other intent exists."""
    problems = [f"{c.planned.call_id} ({i}, {c.planned.tool}): no intent in the store"
                for i, c in s.candidates.items() if s.finals[i] is None]
    return problems + [f"{i}: an intent nobody proposed" for i in set(s.histories) - set(s.candidates)]


def stuck(s: Settled) -> list[str]:
    """Every intent is terminal, or explicitly waiting for evidence or an operator."""
    return [
        f"{label}; told {[r.status for r in c.told()]}; "
        f"events {[type(e).__name__ for e in s.histories[i]]}"
        for i, c, f, label in s.known() if not (f.state.terminal or f.state in WAITING)
    ]


def repeated(s: Settled) -> list[str]:
    """At most one draft and one publication per intent, each publication fanned out once."""
    problems: list[str] = []
    for intent_id, effects in s.effects.items():
        where = Counter(server for server, _ in effects)
        if intent_id not in s.candidates:
            problems.append(f"{intent_id}: world rows {dict(where)} for no candidate")
        if any(n > 1 for n in where.values()):
            problems.append(f"{intent_id}: {dict(where)} effects for one intent")
    fanout = Counter((n["publication_id"], n["intent_id"]) for n in s.notifications)
    for p in s.publications:
        sent = fanout.pop((p["publication_id"], p["intent_id"]), 0)
        if sent != SUBSCRIBERS or p["notified"] != str(SUBSCRIBERS):
            problems.append(f"{p['intent_id']}: publication {p['publication_id']} notified {sent} "
                            f"(says {p['notified']}), not {SUBSCRIBERS}")
    return problems + [f"{n} notifications of {pub} for {i}, no such publication"
                       for (pub, i), n in fanout.items()]


def state_vs_world(s: Settled) -> list[str]:
    """Completed: exactly its one effect, with its receipt. Refused or failed: none."""
    problems: list[str] = []
    for intent_id, c, f, label in s.known():
        effects = s.effects.get(intent_id, [])
        servers = [server for server, _ in effects]
        if f.state is State.COMPLETED:
            if servers != [c.planned.server]:
                problems.append(f"{label}: completed with world effects {servers}")
            else:
                key = {"P": "draft_id", "Q": "publication_id", "C": "note_id"}[c.planned.server]
                if f.receipt.get(key) != effects[0][1][key]:
                    problems.append(f"{label}: receipt {f.receipt} is not {effects[0][1][key]}")
        elif f.state in WAITING:
            if servers not in ([], [c.planned.server]):
                problems.append(f"{label}: waiting with world effects {servers}")
        elif servers:
            problems.append(f"{label}: {servers} in the world, reason {f.reason}")
        if not c.planned.valid and f.state is not State.REJECTED:
            problems.append(f"{label}: invalid arguments {c.planned.arguments[:40]!r} not rejected")
    return problems


def told_vs_state(s: Settled) -> list[str]:
    """Every response the client got is one the final state can follow."""
    problems: list[str] = []
    for intent_id, c, f, label in s.known():
        if c.first is None:
            problems.append(f"{label}: the client got no response ({c.error or 'still waiting'})")
            continue
        for r in c.told():
            if (r.candidate_id, r.call_id) != (intent_id, c.planned.call_id):
                problems.append(f"{label}: response for {r.candidate_id}/{r.call_id}")
            elif f.state not in CONSISTENT.get(r.status, frozenset()):
                problems.append(f"{label}: the client was told {r.status} ({r.code})")
        last = c.later or c.first
        if last.status in PENDING and f.state.terminal:
            problems.append(f"{label}: the client waited past {last.status} and heard nothing")
    return problems


async def stale_responses(s: Settled, timeout_s: float) -> list[str]:
    """The latest stored model-facing response catches up with the final state."""
    pending = {i: (c, model_view(f, CONTRACTS[c.planned.tool]), label) for i, c, f, label in s.known()}
    deadline = time.monotonic() + timeout_s
    while True:
        for intent_id, (c, view, _) in list(pending.items()):
            if await c.run.response(intent_id) == view:
                del pending[intent_id]
        if not pending or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.5)
    return [f"{label}: latest stored response {await c.run.response(i)} is not {view}"
            for i, (c, view, label) in pending.items()]


def invariants(s: Settled, locks: dict[str, str]) -> list[str]:
    """the invariants (docs/design.md) over the whole store, the three ledgers and the locks."""
    ledger = [{**p, "idempotency_key": p["client_ref"]} for p in s.publications]
    ledger += [{**d, "idempotency_key": d["idempotency_key"]} for d in s.drafts]
    ledger += [n for n in s.notes if n["case_id"] in CASES]
    told = {i: [r.status for r in c.told()] for i, c in s.candidates.items()}
    return violations(s.histories, ledger, locks=locks, told=told)


async def read_locks(system: System) -> dict[str, str]:
    """The locks bucket (the services' own, read as the topology owner): resource key → holder."""
    nc = await system.connect()
    try:
        kv = await nc.jetstream().key_value(LOCKS_BUCKET)
        try:
            keys = await kv.keys()
        except nats.js.errors.NoKeysError:
            return {}
        held = {}
        for key in keys:
            with contextlib.suppress(nats.js.errors.KeyNotFoundError):
                held[key] = ((await kv.get(key)).value or b"").decode()
        return held
    finally:
        await nc.close()


async def released_locks(system: System, s: Settled, timeout_s: float) -> dict[str, str]:
    """The locks once those behind their holder's state are gone, or ``timeout_s`` passed.

    Release is asynchronous (a killed executor's lock durable delivers again after its ack
    wait), so a lock is given that long before it counts as stranded.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        locks = await read_locks(system)
        if not violations(s.histories, locks=locks) or time.monotonic() > deadline:
            return locks
        await asyncio.sleep(0.5)


def vacuous(chaos: Chaos, supervisor: Supervisor, paths: Counter[str], s: Settled,
            self_kills: list[str]) -> list[str]:
    """The faults really happened: a run without them proves nothing."""
    crashes = [code for name, code in supervisor.exits if name in replicas(ADAPTER)]
    kills = [code for name, code in supervisor.exits if name in replicas(EXECUTOR)]
    restarts = {n: sum(supervisor.restarts[r] for r in replicas(n)) for n in (ADAPTER, EXECUTOR)}
    problems = [f"{server}/{fault}: injected {chaos.injected[(server, fault)]}, none consumed"
                for server in SERVERS for fault in FAULTS if chaos.consumed[(server, fault)] < 1]
    problems += [f"adapter exited with {code}, not {CRASH_EXIT}" for code in crashes if code != CRASH_EXIT]
    problems += [f"executor exited with {code}, not {SIGKILLED}" for code in kills if code != SIGKILLED]
    consumed_crashes = chaos.consumed_of("crash_after_send") + chaos.consumed_of("crash_after_commit")
    # One worker runs orders concurrently: two crash faults taken at once end in one exit.
    if consumed_crashes and not crashes:
        problems.append(f"{consumed_crashes} crash faults consumed, but the adapter never exited")
    if len(crashes) > consumed_crashes:
        problems.append(f"{len(crashes)} adapter exits for {consumed_crashes} crash faults")
    if restarts[ADAPTER] < 1:
        problems.append("the adapter was never restarted")
    # A planned SIGKILL may land on a process that just killed itself: one exit for both.
    if restarts[EXECUTOR] < 1 or not (
            chaos.kills <= len(kills) <= chaos.kills + len(self_kills)):
        problems.append(f"executor killed {chaos.kills} times and killed itself "
                        f"{len(self_kills)} times, exits seen {len(kills)}, "
                        f"restarted {restarts[EXECUTOR]}")
    if not self_kills:
        problems.append("the executor never died between ending a hold and freeing its lock")
    elif any(NOTE not in line.split() for line in self_kills):
        problems.append(f"self-kills away from a lock: {self_kills}")
    told = Counter(r.status for c in s.candidates.values() for r in c.withdrawals)
    if not told:
        problems.append("no withdrawal was answered")
    if not any(f is not None and f.state is State.WITHDRAWN for f in s.finals.values()):
        problems.append(f"no candidate ended withdrawn (withdrawals answered {dict(told)})")
    if chaos.consumed_of("drop_response") and not (
            paths["OutcomeUnknown"] and any(p.startswith("Reconciled:") for p in paths)):
        problems.append("responses were lost, yet no outcome was unknown and then reconciled")
    return problems + supervisor.problems


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    root = tmp_path_factory.mktemp("chaos")
    children = tuple((name, "lockgate.testing.crashpoints" if name == EXECUTOR else module)
                     for name, module in CHILDREN)
    kind = ClusterSystem if CLUSTER else System
    s = kind(root, children=children, extra_env={
        "LOCKGATE_ITEMS_WORLD_OUTCOME_DEADLINE_S": str(DEADLINE_S),
        # The moment that strands a lock unless release comes from the record.
        "LOCKGATE_CRASH_LOG": str(root / "self-kills"),
        "LOCKGATE_CRASH_EVENTS": ",".join(e.__name__ for e in ENDS_HOLD),
        "LOCKGATE_CRASH_TOOLS": NOTE,
        "LOCKGATE_CRASH_PROBABILITY": str(SELF_KILL_PROBABILITY),
        "LOCKGATE_CRASH_LIMIT": str(SELF_KILL_LIMIT),
        "LOCKGATE_CRASH_SEED": str(SEED),
    })
    with running(s, timeout_s=180.0 if CLUSTER else 60.0):
        yield s


@pytest.fixture
def items(system: System) -> ItemsWorld:
    return ItemsWorld(system.items_dir)


async def test_many_candidates_through_random_faults(
    system: System, gw: Gateway, items: ItemsWorld
) -> None:
    t0 = time.monotonic()
    tag = (f"[seed={SEED} candidates={CANDIDATES}; rerun with LOCKGATE_CHAOS_SEED={SEED}; "
           f"logs in {system.root / 'log'}]")
    runs: list[tuple[Run, Turn]] = []
    for r in range(0, CANDIDATES, PER_RUN):
        case = CASES[(r // PER_RUN) % len(CASES)]
        run = await gw.open_run(tenant=TENANT, actor=ACTOR,
                                context={"space_id": SPACE, "case_id": case})
        runs.append((run, await run.open_turn()))
    candidates = [Candidate(p, *runs[p.n // PER_RUN]) for p in candidate_plan(SEED, CANDIDATES)]

    # -- the chaos: candidates flow while faults are armed and processes die ------------
    supervisor = Supervisor(system, WATCHED)
    supervisor.start()
    chaos, stop = Chaos(), asyncio.Event()
    injector = asyncio.create_task(inject_faults(system, items, supervisor, chaos, stop))
    slots, started = asyncio.Semaphore(IN_FLIGHT), [0]
    chaos_end = time.monotonic() + CHAOS_BUDGET_S
    drain_end = chaos_end + DRAIN_BUDGET_S
    drivers = []
    try:
        for c in candidates:
            await asyncio.sleep(c.planned.gap_s)
            drivers.append(asyncio.create_task(drive(c, slots, started, drain_end)))
        # Faults stop once the last candidate is on its way (or the chaos budget is spent).
        while started[0] < len(candidates) and time.monotonic() < chaos_end:
            await asyncio.sleep(0.1)
    finally:
        stop.set()
        await injector
    chaos_s = time.monotonic() - t0
    # Disarm what no call consumed: the drain runs without faults.
    for armed in await asyncio.to_thread(items.faults):
        chaos.unconsumed[(str(armed["server"]), str(armed["fault"]))] += int(armed["remaining"])
    await asyncio.to_thread(items.clear_faults)

    # -- the drain: every candidate answered, every intent settled ----------------------
    await asyncio.wait(drivers, timeout=max(1.0, drain_end - time.monotonic()))
    for task in drivers:
        task.cancel()
    await asyncio.gather(*drivers, return_exceptions=True)
    histories = await drain_store(system, {c.intent_id for c in candidates}, drain_end)
    await supervisor.settle()
    await supervisor.stop()
    drain_s = time.monotonic() - t0 - chaos_s
    s = Settled({c.intent_id: c for c in candidates}, histories,
                items.drafts(), items.publications(), items.notifications(),
                CaseWorld(system.world_dir).ledger())
    locks = await released_locks(system, s, LOCKS_BUDGET_S)
    self_kills_log = system.root / "self-kills"
    self_kills = self_kills_log.read_text().splitlines() if self_kills_log.exists() else []

    paths = s.recovery_paths()
    summary = (
        f"{tag}\n  chaos {chaos_s:.0f}s, drain {drain_s:.0f}s; final states "
        f"{dict(Counter(f.state.value if f else 'missing' for f in s.finals.values()))}\n"
        f"  faults injected {dict(chaos.injected)}, unconsumed {dict(chaos.unconsumed)}; "
        f"executor kills {chaos.kills} (skipped {chaos.skipped_kills}); "
        f"exits {dict(Counter(supervisor.exits))}; restarts {dict(supervisor.restarts)}; "
        f"self-kills before a lock release {len(self_kills)}\n"
        f"  world: {len(s.drafts)} drafts, {len(s.publications)} publications, "
        f"{len(s.notifications)} notifications, "
        f"{sum(1 for e in s.effects.values() for w, _ in e if w == 'C')} notes; "
        f"locks held {len(locks)}\n"
        f"  withdrawals answered "
        f"{dict(Counter(r.status for c in s.candidates.values() for r in c.withdrawals))}\n"
        f"  recovery events {dict(sorted(paths.items()))}"
    )
    print(summary)

    def report(title: str, problems: list[str]) -> str:
        shown = "\n    ".join(problems[:40])
        more = f"\n    ... and {len(problems) - 40} more" if len(problems) > 40 else ""
        return f"{title}\n{summary}\n    {shown}{more}"

    for title, problems in (
        ("candidates lost (or invented):", lost(s)),
        ("intents neither terminal nor explicitly waiting:", stuck(s)),
        ("effects repeated or unaccounted for:", repeated(s)),
        ("final states and the world disagree:", state_vs_world(s)),
        ("responses inconsistent with the final state:", told_vs_state(s)),
        ("stored responses behind the final state:", await stale_responses(s, RESPONSES_BUDGET_S)),
        ("invariants violated:", invariants(s, locks)),
        ("the faults did not happen as planned:", vacuous(chaos, supervisor, paths, s, self_kills)),
    ):
        assert not problems, report(title, problems)
