"""The benchmark's profiles: where Lockgate and the raw chain run, side by side, in one run.

- ``single``: one nats-server, one process of every service (``bench.cli``'s run, as
  it has always been);
- ``cluster-r1``: the local cluster (``lockgate.testing.cluster.ClusterSystem``): three
  nodes, every stream and bucket at R1 at the server's default sync, K events
  partitions placed one per node (JetStream would put every R1 stream on one node), two
  replicas of every service and adapter, the views on PostgreSQL;
- ``cluster-r3``: the same at R3 with ``sync_interval: always`` (``make cluster``'s
  profile), partition leaders spread one per node.

On a cluster profile the raw chain is laid out as Lockgate's events are: K streams at
the same replicas on the same nodes, each partition's leader on the node that leads
Lockgate's partition of the same index, each stage's durable on every partition, and as
many worker processes as a service has replicas, sharing the durables (and, as the
reference beside it, the same chain with a process per stage and replica). The phases
are few, to keep a cluster profile within a few minutes on two cores: a warm-up,
throughput in turns (``bench.rounds``: rounds of closed-loop slices of each system, the
projector stopped, as on one server), then a short open loop of each at the same rate,
the lower of ``rate_per_s`` and half Lockgate's saturated rate (a fixed rate Lockgate
cannot sustain would measure a queue).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench import load, path
from bench.gateway import LOAD_CASES, TENANT, Proposer
from bench.hops import Hops
from bench.hops import measure as measure_hops
from bench.phases import (
    DEMO_BUNDLE,
    check_raw,
    ledger_size,
    progress,
    raised_limits,
    reseed,
    with_cpu,
)
from bench.projector import catch_up
from bench.rawchain import ChainDriver, ChainSpec, WorkerProcess, ensure_consumers
from bench.rounds import Slices, take_turns
from bench.stats import Phase
from lockgate.core.ids import random_id
from lockgate.eventstore.jetstream import partition_stream_configs
from lockgate.eventstore.partitions import Partitions
from lockgate.operations.cluster import cluster_report, wait_for_leaders
from lockgate.operations.supervisor import CLUSTER_CHILD_REPLICAS
from lockgate.runtime.topology import spread_leaders
from lockgate.testing.cluster import ClusterSystem, place_on_nodes
from lockgate.testing.system import System, bundle_copy
from lockgate.worlds.casenotes.adapter import CONTRACT as CASE_NOTES


@dataclass(frozen=True)
class Profile:
    """Where a profile runs: nodes, replicas of every stream, fsync, events partitions."""

    name: str
    nodes: int
    replicas: int
    sync_always: bool
    partitions: int
    #: Processes of each service and adapter (and raw chain workers beside them).
    service_replicas: int

    def setup(self) -> dict[str, str | int]:
        """The profile as the JSON line names it."""
        return {"nodes": self.nodes, "stream_replicas": self.replicas,
                "sync_interval": "always" if self.sync_always else "default",
                "partitions": self.partitions, "service_replicas": self.service_replicas}

    def describe(self) -> str:
        """One line for the output."""
        sync = "sync_interval: always" if self.sync_always else "the server's default sync"
        nodes = "one nats-server" if self.nodes == 1 else f"{self.nodes} nodes"
        return (f"{self.name}: {nodes}, R{self.replicas}, {sync}, K={self.partitions} events "
                f"partition{'s' if self.partitions > 1 else ''}, {self.service_replicas} "
                f"process{'es' if self.service_replicas > 1 else ''} of every service and adapter")


SINGLE = Profile("single", nodes=1, replicas=1, sync_always=False, partitions=1, service_replicas=1)
CLUSTER_R1 = Profile("cluster-r1", nodes=3, replicas=1, sync_always=False, partitions=3,
                     service_replicas=CLUSTER_CHILD_REPLICAS)
CLUSTER_R3 = Profile("cluster-r3", nodes=3, replicas=3, sync_always=True, partitions=3,
                     service_replicas=CLUSTER_CHILD_REPLICAS)
PROFILES: dict[str, Profile] = {p.name: p for p in (SINGLE, CLUSTER_R1, CLUSTER_R3)}
#: What ``--profile`` accepts beside the names: several at once.
GROUPS: dict[str, tuple[str, ...]] = {"cluster": ("cluster-r1", "cluster-r3"),
                                      "all": ("single", "cluster-r1", "cluster-r3")}


def with_partitions(profile: Profile, partitions: int | None) -> Profile:
    """``profile`` with another K (a cluster profile's ``--partitions``)."""
    if partitions is None or profile.nodes == 1:
        return profile
    return Profile(profile.name, profile.nodes, profile.replicas, profile.sync_always, partitions,
                   profile.service_replicas)


@dataclass(frozen=True)
class ClusterPlan:
    """A cluster profile's load, and the bounds on how long anything may take."""

    rate_per_s: float
    duration_s: float
    concurrency: int
    warmup: int
    op_timeout_s: float
    phase_max_s: float
    start_timeout_s: float = 180.0
    #: Throughput in turns (``bench.rounds``).
    rounds: int = 3
    slice_s: float = 10.0
    settle_s: float = 3.0
    #: Measure the chain with a process per stage and replica beside the floor too.
    split: bool = True
    #: Wait for the closed loop's attempt deadlines to pass before the open loops, so
    #: that the gate's durable handing each attempt's trigger again is not counted in their path.
    settle_deadlines: bool = True


CLUSTER_DEFAULT = ClusterPlan(rate_per_s=20, duration_s=10, concurrency=64, warmup=32,
                              op_timeout_s=30, phase_max_s=120)
CLUSTER_QUICK = ClusterPlan(rate_per_s=20, duration_s=3, concurrency=64, warmup=8, op_timeout_s=15,
                            phase_max_s=30, settle_deadlines=False, rounds=1, slice_s=4.0,
                            settle_s=1.0, split=False)


@dataclass
class ProfileRun:
    """What one cluster profile measured."""

    profile: Profile
    phases: list[Phase]
    notes: list[str]
    figures: dict[str, object] = field(default_factory=dict)
    #: Where the open loop's latency went (``bench.hops``).
    hops: Hops | None = None
    #: The open loops' paths as the nodes counted them: Lockgate's, then the raw chain's.
    paths: tuple[path.PathCost, path.PathCost] | None = None
    #: The closed loops' slices, round by round (``bench.rounds``).
    slices: Slices | None = None


def views_of(system: System) -> str:
    """Where the processes' views are, from the URL they are handed: postgresql or sqlite."""
    url = system.env().get("LOCKGATE_VIEWS_URL", "")
    return "postgresql" if url.startswith(("postgresql://", "postgres://")) else "sqlite"


def _num(x: float, digits: int) -> float | None:
    return None if math.isnan(x) else round(x, digits)


def _cpu_ms(phase: Phase, own: bool) -> float | None:
    """CPU ms per success of the phase: the broker's nodes with Lockgate's processes
    (``own``) or with the raw chain's workers; never the drivers."""
    spent = [v for k, v in phase.cpu_s.items() if "driver" not in k
             and (("worker" not in k) if own else (k.startswith("nats") or "worker" in k))]
    return round(1000 * sum(spent) / phase.ok, 2) if spent and phase.ok else None


async def run_cluster(profile: Profile, plan: ClusterPlan, root: Path) -> ProfileRun:
    """Start the profile's cluster under ``root``, run its phases, stop everything."""
    began = time.monotonic()
    policies = bundle_copy(root, raised_limits(DEMO_BUNDLE.read_text()))
    partitions = Partitions(profile.partitions)
    system = ClusterSystem(root, extra_env={"LOCKGATE_POLICY_DIR": str(policies)},
                           size=profile.nodes, partitions=partitions, replicas=profile.replicas,
                           sync_always=profile.sync_always)
    spec = ChainSpec(partitions=profile.partitions, replicas=profile.replicas)
    nonce = random_id()[:8]
    split_spec = ChainSpec(tenant="bench-split", durable_prefix="raw-split-",
                           partitions=profile.partitions, replicas=profile.replicas)
    max_s = 6 * plan.phase_max_s + 3 * plan.rounds * plan.slice_s + 300
    workers = [WorkerProcess("", spec, root / "log" / f"rawchain-{i}.log", max_s=max_s)
               for i in range(1, profile.service_replicas + 1)]
    split_workers = [WorkerProcess("", split_spec, root / "log" / f"rawchain-split-{k}-{i}.log",
                                   max_s=max_s, stages=(k,))
                     for i in range(1, profile.service_replicas + 1)
                     for k in range(1, split_spec.stages + 1)] if plan.split else []
    proposer: Proposer | None = None
    driver: ChainDriver | None = None
    split_driver: ChainDriver | None = None
    nc = None
    notes: list[str] = []
    try:
        progress(f"starting {profile.describe()} under {root}")
        await system.start(timeout_s=plan.start_timeout_s)
        started_s = time.monotonic() - began
        progress(f"views on {views_of(system)} ({system.env().get('LOCKGATE_VIEWS_URL') or 'var/'})")
        nc = await system.connect()  # the raw chain runs as the topology owner
        js = nc.jetstream()
        nodes = [n.name for n in system.nodes]
        if profile.replicas == 1 and profile.partitions > 1:
            # As the cluster placed Lockgate's partitions: one per node, by its tag.
            await place_on_nodes(js, partition_stream_configs(spec.layout, replicas=1), nodes)
        await ensure_consumers(js, spec)
        if plan.split:  # its durables on the same streams
            await ensure_consumers(js, split_spec)
        await spread_leaders(nc, spec.layout, nodes)
        await wait_for_leaders(system.nodes, spec.layout.streams, timeout_s=60)
        report = await cluster_report(system.nodes)
        watched = (*partitions.streams, *spec.layout.streams)
        leaders = {s.stream: s.leader for s in report.streams if s.stream in watched}
        admin = system.credentials("admin")
        for w in (*workers, *split_workers):
            w.url, w.user, w.password = system.url, admin.user, admin.password
            await w.start()
        progress(f"raw chain: durables {spec.durable(1)}..{spec.durable(spec.stages)} on "
                 f"{', '.join(spec.layout.streams)}, {len(workers)} worker processes (and "
                 f"{len(split_workers)}, a process per stage and replica); leaders {leaders}")
        driver = ChainDriver(nc, spec, nonce)
        await driver.start()
        if plan.split:
            split_driver = ChainDriver(nc, split_spec, f"{nonce}s")
            await split_driver.start()
        proposer = Proposer(system.url, nonce, credentials=system.credentials("agent-tenant-a"),
                            host=system.credentials("host"))
        await proposer.start(timeout_s=60)

        progress(f"warm-up: {plan.warmup} raw chains, {plan.warmup} Lockgate proposals")
        warm = [driver.fire("warm"), proposer.fire("warm", plan.op_timeout_s)]
        if split_driver is not None:
            warm.append(split_driver.fire("warm"))
        for fire in warm:
            await load.closed_loop(Phase("warm", "warm"), fire, concurrency=8, count=plan.warmup,
                                   op_timeout_s=plan.op_timeout_s, max_s=plan.phase_max_s)

        pids: dict[str, int] = {}
        for node, server in zip(nodes, system.cluster.nodes if system.cluster else [], strict=True):
            if server.process is not None:
                pids[f"nats-{node}"] = server.process.pid
        pids.update({label: proc.pid for label, proc in system.processes.items()})
        for i, w in enumerate(workers, start=1):
            if w.proc is not None:
                pids[f"rawchain worker {i}"] = w.proc.pid
        for w in split_workers:
            if w.proc is not None:
                pids[f"rawsplit worker {w.log_file.stem.removeprefix('rawchain-split-')}"] = w.proc.pid
        pids["bench drivers"] = os.getpid()

        measured = functools.partial(with_cpu, pids)

        phases: list[Phase] = []
        turns_mode = f"closed x{plan.concurrency}, {plan.rounds} x {plan.slice_s:g}s"
        progress(f"throughput in turns: {plan.rounds} rounds of {plan.slice_s:g}s closed-loop slices "
                 "of the raw chain, the chain with a process per stage, and Lockgate (the projector stopped)")
        await reseed(system)
        raw_closed = Phase("raw chain", turns_mode)
        split_closed = Phase("raw split", turns_mode)
        lg_closed = Phase("lockgate", turns_mode)
        system.kill("projector")  # as on one server: the read side is not on the path
        pids.pop("projector", None)
        turns = [(raw_closed, driver.fire("closed"))]
        if split_driver is not None:
            turns.append((split_closed, split_driver.fire("closed")))
        turns.append((lg_closed, proposer.fire("closed", plan.op_timeout_s)))
        slices = await take_turns(
            turns, pids, rounds=plan.rounds, duration_s=plan.slice_s, settle_s=plan.settle_s,
            concurrency=plan.concurrency, op_timeout_s=plan.op_timeout_s)
        phases += [phase for phase, _ in turns]
        closed_end = time.monotonic()
        ledger_closed = await ledger_size(system)
        progress("projector started again: working off the phase's events")
        await system.restart("projector")
        projector_per_s: float | None = None
        try:
            backlog, took_s = await catch_up(nc, timeout_s=plan.phase_max_s)
            projector_per_s = round(backlog / took_s, 1) if took_s > 0 else None
        except TimeoutError as exc:
            notes.append(f"projector: {exc}")
        pids["projector"] = system.processes["projector"].pid
        # The closed loop's attempts come due at their deadline, each trigger handed to the
        # gate once more: not the open loops' cost, so not in their counts.
        due = closed_end + CASE_NOTES.outcome_deadline_s + 1.0 - time.monotonic()
        if plan.settle_deadlines and due > 0:
            progress(f"waiting {due:.0f}s for the closed loop's attempt deadlines to pass")
            await asyncio.sleep(due)

        rate = plan.rate_per_s
        if lg_closed.per_s == lg_closed.per_s and lg_closed.per_s / 2 < rate:
            rate = max(1.0, round(lg_closed.per_s / 2, 1))
        open_mode = f"open {rate:g}/s x {plan.duration_s:g}s"
        progress(f"raw chain, {open_mode}")
        raw_open = Phase("raw chain", open_mode)
        monitors = [int(n.monitor.rsplit(":", 1)[1]) for n in system.nodes]
        before = await path.counts(*monitors)
        phases.append(await measured(raw_open, load.open_loop(
            raw_open, driver.fire("open"), rate_per_s=rate, duration_s=plan.duration_s,
            op_timeout_s=plan.op_timeout_s)))
        await asyncio.sleep(1.0)  # the last chains' acks are counted
        raw_path = path.PathCost.between(before, await path.counts(*monitors), raw_open.ok)
        progress(f"Lockgate, {open_mode}")
        await reseed(system)
        lg_open = Phase("lockgate", open_mode)
        await asyncio.sleep(1.0)  # the reseed's writes are not counted
        before = await path.counts(*monitors)
        phases.append(await measured(lg_open, load.open_loop(
            lg_open, proposer.fire("open", plan.op_timeout_s), rate_per_s=rate,
            duration_s=plan.duration_s, op_timeout_s=plan.op_timeout_s)))
        await asyncio.sleep(1.0)  # the last candidates' settling (locks, holds) is counted
        lg_path = path.PathCost.between(before, await path.counts(*monitors), lg_open.ok)
        ledger_open = await ledger_size(system)

        progress("checking what was stored")
        hops = await measure_hops(system.store(nc), TENANT, proposer.sent.get("open", []))
        notes.append("raw closed: " + await check_raw(driver, spec, "closed", raw_closed))
        if split_driver is not None:
            notes.append("raw split:  " + await check_raw(split_driver, split_spec, "closed", split_closed))
        notes.append("raw open:   " + await check_raw(driver, spec, "open", raw_open))
        for phase, ledger in ((lg_closed, ledger_closed), (lg_open, ledger_open)):
            notes.append(f"lockgate {phase.mode}: {ledger} notes in the case-notes ledger for "
                         f"{phase.ok} executed responses")
        lg, raw = lg_closed.per_s, raw_closed.per_s
        figures: dict[str, object] = {
            "profile": profile.name, **profile.setup(), "raw_chain_workers": len(workers),
            "lockgate_per_s": _num(lg, 1),
            "raw_chain_per_s": _num(raw, 1),
            "throughput_ratio": _num(slices.ratio("lockgate", "raw chain"), 4),
            "ratio_rounds": [_num(r, 4) for r in slices.ratios("lockgate", "raw chain")],
            "raw_split_per_s": _num(split_closed.per_s, 1) if plan.split else None,
            "split_ratio": _num(slices.ratio("lockgate", "raw split"), 4) if plan.split else None,
            "open_rate_per_s": rate,
            "lockgate_p50_ms": _num(lg_open.latency_ms(0.5), 2),
            "lockgate_p99_ms": _num(lg_open.latency_ms(0.99), 2),
            "raw_p50_ms": _num(raw_open.latency_ms(0.5), 2),
            "raw_p99_ms": _num(raw_open.latency_ms(0.99), 2),
            "cpu_ms_per_candidate": _cpu_ms(lg_closed, own=True),
            "raw_cpu_ms_per_chain": _cpu_ms(raw_closed, own=False),
            "projector_events_per_s": projector_per_s,
            **lg_path.figures(), **raw_path.raw_figures(),
            "leaders": leaders,
            "views": views_of(system),
            "start_s": round(started_s, 1),
        }
        return ProfileRun(profile, phases, notes, figures, hops, (lg_path, raw_path), slices)
    finally:
        progress("stopping")
        closers = [proposer.stop() if proposer else None, driver.stop() if driver else None,
                   split_driver.stop() if split_driver else None,
                   *(w.stop() for w in (*workers, *split_workers)), nc.close() if nc else None]
        for closer in closers:
            if closer is not None:
                with contextlib.suppress(Exception):
                    await closer
        await asyncio.to_thread(system.stop)


def cluster_plan(quick: bool, *, rate_per_s: float | None = None, duration_s: float | None = None,
                 concurrency: int | None = None, rounds: int | None = None,
                 slice_s: float | None = None) -> ClusterPlan:
    """A cluster profile's plan: the defaults (or ``--quick``'s), with what was asked."""
    base = CLUSTER_QUICK if quick else CLUSTER_DEFAULT
    return ClusterPlan(
        rate_per_s=rate_per_s or base.rate_per_s,
        duration_s=duration_s or base.duration_s,
        concurrency=min(concurrency or base.concurrency, LOAD_CASES),
        warmup=base.warmup,
        op_timeout_s=base.op_timeout_s,
        phase_max_s=base.phase_max_s,
        start_timeout_s=base.start_timeout_s,
        settle_deadlines=base.settle_deadlines,
        rounds=rounds or base.rounds,
        slice_s=slice_s or base.slice_s,
        settle_s=min(base.settle_s, (slice_s or base.slice_s) / 4),
        split=base.split,
    )


def summary_table(results: dict[str, dict[str, object]]) -> str:
    """One row per profile: its setup, both throughputs, the ratio, latency, CPU, and the
    path's length (messages published and stored per candidate, and per raw chain)."""
    header = ["profile", "nodes", "R", "sync", "K", "procs", "lockgate/s", "raw chain/s", "ratio",
              "open /s", "p50 ms", "p99 ms", "raw p50 ms", "CPU ms/cand", "msgs", "raw msgs",
              "stored", "raw stored"]
    keys = ["nodes", "stream_replicas", "sync_interval", "partitions", "service_replicas",
            "lockgate_per_s", "raw_chain_per_s", "throughput_ratio", "open_rate_per_s",
            "lockgate_p50_ms", "lockgate_p99_ms", "raw_p50_ms", "cpu_ms_per_candidate",
            "messages_per_candidate", "raw_messages_per_chain", "stored_per_candidate",
            "raw_stored_per_chain"]
    rows = [header]
    for name, f in results.items():
        rows.append([name, *("-" if f.get(k) is None else str(f.get(k, "-")) for k in keys)])
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
