"""Proof over many runs: a few hundred candidates through seeded, random faults.

Candidates go to both items servers (``draft.prepare_private`` on P, ``item.publish``
on Q), about one in ten of them invalid, while a seeded plan arms faults in the world
at random moments (lost responses, adapter crashes after send or after commit,
failures before send) and SIGKILLs the executor. A supervisor task brings back every
process that died, as ``make run``'s supervisor would. Once the faults stop and every
intent has settled, the event store and the world must agree: nothing happened twice,
nothing was lost, nothing is stuck, and DESIGN's invariants hold.

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

import pytest

from lockgate.client.sdk import ClientError, Gateway, ResponseTimeout, Run, Turn
from lockgate.contracts.capability import CapabilityContract
from lockgate.contracts.disclosure import model_view
from lockgate.contracts.responses import ModelResponse
from lockgate.core.ids import intent_id_for
from lockgate.eventstore.jetstream import JetStreamEventStore
from lockgate.intent.aggregate import EffectIntent, Event, State
from lockgate.intent.codec import fold
from lockgate.testing.invariants import by_intent, violations
from lockgate.testing.system import System
from lockgate.worlds.items.adapter import DRAFT, PUBLISH, draft_contract, publish_contract
from lockgate.worlds.items.world import FAULTS, SERVERS
from lockgate.worlds.items.world import World as ItemsWorld

SEED = int(os.environ.get("LOCKGATE_CHAOS_SEED", "20260417"))
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
#: Subscribers of space-1 in the items world's seed: one notification each per publication.
SUBSCRIBERS = 3
ADAPTER, EXECUTOR = "adapter.items", "executor"
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

TOOLS = {"P": DRAFT, "Q": PUBLISH}
CONTRACTS: dict[str, CapabilityContract] = {
    DRAFT: draft_contract(DEADLINE_S), PUBLISH: publish_contract(DEADLINE_S),
}
WAITING = frozenset({State.UNKNOWN, State.NEEDS_OPERATOR})
#: What the model was told, and the final states that are consistent with it.
CONSISTENT: dict[str, frozenset[State]] = {
    "executed": frozenset({State.COMPLETED}),
    "rejected": frozenset({State.REJECTED}),
    "denied": frozenset({State.DENIED}),
    "unavailable": frozenset({State.FAILED, State.REFUSED, State.DENIED}),
    "withdrawn": frozenset({State.WITHDRAWN}),
    # Evidence decides later: found, proven absent and retried, or still open.
    "outcome_unknown": frozenset({State.COMPLETED, State.FAILED, State.REFUSED} | WAITING),
}


def invalid_arguments(rng: random.Random, n: int) -> str:
    """Arguments the system must reject before any effect."""
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
        server = rng.choice(SERVERS)
        arguments = f'{{"title": "t{n}", "body": "b{n}"}}' if valid else invalid_arguments(rng, n)
        plan.append(Planned(n, server, arguments, valid, gap_s=rng.uniform(0.0, 0.25)))
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
            if not supervisor.alive(EXECUTOR):
                chaos.skipped_kills += 1  # still coming back from the last kill
                continue
            supervisor.hold(EXECUTOR, action.pause_s)
            system.kill(EXECUTOR)
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

    @property
    def intent_id(self) -> str:
        return intent_id_for(TENANT, self.run.id, self.planned.call_id)

    def told(self) -> list[ModelResponse]:
        return [r for r in (self.first, self.later) if r is not None]


async def drive(c: Candidate, slots: asyncio.Semaphore, started: list[int], until: float) -> None:
    """Propose one candidate (holding a slot until the first response), then follow it up."""
    async with slots:
        started[0] += 1
        try:
            c.first = await c.turn.propose(tool=c.planned.tool, arguments=c.planned.arguments,
                                           call_id=c.planned.call_id, timeout_s=PROPOSE_TIMEOUT_S)
        except ClientError as exc:
            c.error = f"propose: {type(exc).__name__}: {exc}"
            return
    if c.first.status == "outcome_unknown":
        # What an agent runtime does: wait for the evidence to settle it.
        with contextlib.suppress(ResponseTimeout):  # still open: judged against the store
            c.later = await c.run.wait(c.intent_id, past="outcome_unknown",
                                       timeout_s=max(1.0, until - time.monotonic()))


async def drain_store(system: System, intent_ids: set[str], until: float) -> dict[str, list[Event]]:
    """Every stored history, once each of ``intent_ids`` is terminal or ``until`` has passed."""
    nc = await system.connect()  # the record is read as the topology owner
    try:
        while True:
            histories = by_intent([e async for e in JetStreamEventStore(nc).scan()])
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

    def __post_init__(self) -> None:
        self.finals = {i: fold(self.histories.get(i, [])) for i in self.candidates}
        self.effects: dict[str, list[tuple[str, dict[str, str]]]] = defaultdict(list)
        for d in self.drafts:
            self.effects[d["intent_id"]].append(("P", d))
        for p in self.publications:
            self.effects[p["intent_id"]].append(("Q", p))

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
                if isinstance(e, EffectIntent.Reconciled):
                    paths[f"Reconciled:{e.finding}/{e.resolution}"] += 1
                elif isinstance(e, (EffectIntent.GateRefused, EffectIntent.AttemptFailedBeforeSend)):
                    paths[f"{type(e).__name__}:{e.reason}"] += 1
                elif isinstance(e, (EffectIntent.OutcomeUnknown, EffectIntent.ExecutionAuthorized)):
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
                key = "draft_id" if c.planned.server == "P" else "publication_id"
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
        if c.later is None and c.first.status == "outcome_unknown" and f.state.terminal:
            problems.append(f"{label}: the client waited past outcome_unknown and heard nothing")
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


def invariants(s: Settled) -> list[str]:
    """DESIGN's invariants over the whole store and both ledgers."""
    ledger = [{**p, "idempotency_key": p["client_ref"]} for p in s.publications]
    ledger += [{**d, "idempotency_key": d["idempotency_key"]} for d in s.drafts]
    return violations(s.histories, ledger)


def vacuous(chaos: Chaos, supervisor: Supervisor, paths: Counter[str]) -> list[str]:
    """The faults really happened: a run without them proves nothing."""
    crashes = [code for name, code in supervisor.exits if name == ADAPTER]
    kills = [code for name, code in supervisor.exits if name == EXECUTOR]
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
    if supervisor.restarts[ADAPTER] < 1:
        problems.append("the adapter was never restarted")
    if supervisor.restarts[EXECUTOR] < 1 or len(kills) != chaos.kills:
        problems.append(f"executor killed {chaos.kills} times, exits seen {len(kills)}, "
                        f"restarted {supervisor.restarts[EXECUTOR]}")
    if chaos.consumed_of("drop_response") and not (
            paths["OutcomeUnknown"] and any(p.startswith("Reconciled:") for p in paths)):
        problems.append("responses were lost, yet no outcome was unknown and then reconciled")
    return problems + supervisor.problems


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    s = System(tmp_path_factory.mktemp("chaos"),
               extra_env={"LOCKGATE_ITEMS_WORLD_OUTCOME_DEADLINE_S": str(DEADLINE_S)})
    try:
        asyncio.run(s.start())
        yield s
    finally:
        s.stop()


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
    for _ in range(0, CANDIDATES, PER_RUN):
        run = await gw.open_run(tenant=TENANT, actor=ACTOR, context={"space_id": SPACE})
        runs.append((run, await run.open_turn()))
    candidates = [Candidate(p, *runs[p.n // PER_RUN]) for p in candidate_plan(SEED, CANDIDATES)]

    # -- the chaos: candidates flow while faults are armed and processes die ------------
    supervisor = Supervisor(system, (ADAPTER, EXECUTOR))
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
                items.drafts(), items.publications(), items.notifications())

    paths = s.recovery_paths()
    summary = (
        f"{tag}\n  chaos {chaos_s:.0f}s, drain {drain_s:.0f}s; final states "
        f"{dict(Counter(f.state.value if f else 'missing' for f in s.finals.values()))}\n"
        f"  faults injected {dict(chaos.injected)}, unconsumed {dict(chaos.unconsumed)}; "
        f"executor kills {chaos.kills} (skipped {chaos.skipped_kills}); "
        f"exits {dict(Counter(supervisor.exits))}; restarts {dict(supervisor.restarts)}\n"
        f"  world: {len(s.drafts)} drafts, {len(s.publications)} publications, "
        f"{len(s.notifications)} notifications\n  recovery events {dict(sorted(paths.items()))}"
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
        ("invariants violated:", invariants(s)),
        ("the faults did not happen as planned:", vacuous(chaos, supervisor, paths)),
    ):
        assert not problems, report(title, problems)
