"""``python -m bench``: Lockgate's executed path against the raw six-stage chain, in one run.

``--profile`` says where: ``single`` (the default, below), ``cluster-r1`` and
``cluster-r3`` (the local cluster at R1 and at R3 with ``sync_interval: always``,
``bench.profiles``), ``cluster`` (both) or ``all``. Each profile measures the raw chain
on its own nodes, streams and sync beside Lockgate, and reports the ratio; with more
than one profile, or a cluster one, the last line is ``{"profiles": {name: figures}}``.

The single server's phases, in order, after a warm-up of each system:

1. raw chain, open loop   (``--rate`` arrivals/s for ``--duration`` s): latency at low load
2. Lockgate,  open loop   (the same arrivals); the broker counts what each executed
   candidate cost it (``bench.path``): messages per process, deliveries per durable
3. throughput, in turns (``bench.rounds``): ``--rounds`` rounds of closed-loop slices
   (``--concurrency`` proposers for ``--slice`` s each) of the raw chain, the same chain
   with a process per stage, and Lockgate with the projector stopped, which then works off
   the rounds' events (its throughput). The ratio is the median of the rounds' ratios,
   each taken between slices seconds apart, so the host's drift falls on both systems.
4. raw fetch, closed loop (the same chain consumed a batch at a time, as the services
   did before they pulled continuously: the earlier baseline, for continuity)
5. Lockgate,  open loop at half the rate it sustained: latency under real load, short of
   saturation, and how far the views lag meanwhile (``bench.projector``)
6. rejected,  closed loop (``--concurrency`` proposers, ``--reject-count`` calls of a tool
   no turn offers): the path intake refuses alone, recorded and answered
7. fairness: a steady tenant at a low rate, alone and then beside a tenant flooding at
   200 candidates/s for 10 s (``bench.fairness``), under the demo bundle's flood limits

The raw chain (``bench.rawchain``) is the limit of this design on this stack: six
durables, each hop a continuous-pull delivery, a load, an append and an ack, with the
services' own consumer and event store, all six in one process on one connection. The
ratio is Lockgate's throughput to it. The same chain with each stage a process of its
own (as Lockgate's services are, each on its own connection as its own user) is measured
beside it as a reference: how much of the distance is the processes, how much the work.

Phases 1-4 measure the pipeline, so they run with the demo bundle's limits raised a
hundredfold (the limit counters still run, nothing is refused); phase 5 restarts
intake on the demo bundle as it ships.

Each Lockgate phase starts on a freshly seeded case-notes world: the demo world reads
and rewrites one JSON file per call, so its cost grows with the notes already written.
Proposers use the world's load cases (one run per ``case-load-NN``) so that concurrent
notes do not contend for one case version.

``--baseline REV`` measures the build of git revision ``REV`` beside this one in the same
run (``bench.baseline``): its system, started by its own code on a nats-server of its own,
runs the Lockgate open loop after this build's and takes its turn in every round of phase 3,
then stops before phase 4; the summary and the JSON line's ``baseline`` entry give both
builds' figures and this one's over the baseline's.

Per process CPU time is read from /proc around every phase and printed per successful
operation, to show where the time went. Everything lives in a temporary directory and
is stopped at the end, on error, on Ctrl-C and on SIGTERM. Progress goes to stderr;
stdout gets the machine, the tables and, last, one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import math
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench import baseline as baseline_bench
from bench import load, machine, profiles
from bench import policy as policy_bench
from bench.fairness import QUICK_FAIRNESS, Fairness, FairnessPlan, run_fairness
from bench.gateway import LOAD_CASES, TENANT, Proposer
from bench.hops import Hops
from bench.hops import measure as measure_hops
from bench.path import PathCost, counts
from bench.phases import (
    DEMO_BUNDLE,
    check_raw,
    ledger_size,
    progress,
    raised_limits,
    reseed,
    with_cpu,
)
from bench.projector import LagSampler, catch_up
from bench.rawchain import ChainDriver, ChainSpec, WorkerProcess, ensure_consumers
from bench.rounds import Slices, take_turns
from bench.stats import Phase, cpu_table, table
from lockgate.core.ids import random_id
from lockgate.eventstore.jetstream import JetStreamEventStore
from lockgate.operations.natsserver import free_port
from lockgate.testing.system import REPO, System, bundle_copy


@dataclass(frozen=True)
class Plan:
    """How much load each phase offers, and the bounds on how long anything may take."""

    rate_per_s: float
    duration_s: float
    concurrency: int
    raw_count: int
    reject_count: int
    warmup: int
    op_timeout_s: float
    phase_max_s: float
    fairness: FairnessPlan | None = FairnessPlan()
    #: Throughput in turns (``bench.rounds``): rounds, each system's slice, and the start
    #: of a slice its rate leaves out.
    rounds: int = 4
    slice_s: float = 8.0
    settle_s: float = 2.0


DEFAULT = Plan(rate_per_s=20, duration_s=15, concurrency=64, raw_count=6000,
               reject_count=6000, warmup=64, op_timeout_s=30, phase_max_s=120)
QUICK = Plan(rate_per_s=20, duration_s=3, concurrency=64, raw_count=1000,
             reject_count=1000, warmup=16, op_timeout_s=10, phase_max_s=15, fairness=QUICK_FAIRNESS,
             rounds=2, slice_s=3.0, settle_s=1.0)


def parse_args(argv: Sequence[str] | None) -> tuple[Plan, argparse.Namespace]:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true",
                        help="small counts: the whole run takes well under a minute")
    parser.add_argument("--rate", type=float, help=f"open-loop arrivals/s ({DEFAULT.rate_per_s})")
    parser.add_argument("--duration", type=float, help=f"open-loop seconds ({DEFAULT.duration_s})")
    parser.add_argument("--concurrency", type=int,
                        help=f"closed-loop proposers ({DEFAULT.concurrency}, at most {LOAD_CASES})")
    parser.add_argument("--raw-count", type=int,
                        help=f"closed-loop raw chains of the fetch phase ({DEFAULT.raw_count})")
    parser.add_argument("--rounds", type=int,
                        help=f"rounds of closed-loop slices taken in turns ({DEFAULT.rounds})")
    parser.add_argument("--slice", type=float,
                        help=f"seconds of each system's slice in a round ({DEFAULT.slice_s:g})")
    parser.add_argument("--skip-policy", action="store_true",
                        help="leave out the policy-engine benchmark")
    parser.add_argument("--skip-fairness", action="store_true",
                        help="leave out the fairness scenario (a flooding tenant beside a steady one)")
    parser.add_argument("--profile", default="single",
                        choices=(*profiles.PROFILES, *profiles.GROUPS),
                        help="where to run: single (one nats-server, the default), cluster-r1, "
                             "cluster-r3, cluster (both) or all; each reports Lockgate beside the "
                             "raw chain on the same profile")
    parser.add_argument("--partitions", type=int,
                        help="events partitions K of the cluster profiles (3: one per node)")
    parser.add_argument("--baseline", metavar="REV",
                        help="also measure the build of git revision REV, side by side in the same "
                             "run (single profile only)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the temporary directory (logs, store, world) and print it")
    args = parser.parse_args(argv)
    if args.baseline and args.profile != "single":
        parser.error("--baseline measures the single server's run: leave --profile out")
    base = QUICK if args.quick else DEFAULT
    plan = Plan(
        rate_per_s=args.rate or base.rate_per_s,
        duration_s=args.duration or base.duration_s,
        concurrency=min(args.concurrency or base.concurrency, LOAD_CASES),
        raw_count=args.raw_count or base.raw_count,
        reject_count=base.reject_count,
        warmup=base.warmup,
        op_timeout_s=base.op_timeout_s,
        phase_max_s=base.phase_max_s,
        fairness=None if args.skip_fairness else base.fairness,
        rounds=args.rounds or base.rounds,
        slice_s=args.slice or base.slice_s,
        settle_s=min(base.settle_s, (args.slice or base.slice_s) / 4),
    )
    return plan, args


@dataclass
class Run:
    """What one benchmark run measured."""

    phases: list[Phase]
    notes: list[str]
    fairness: Fairness | None
    path: PathCost | None
    #: The same counted around the raw chain's open loop, per chain.
    raw_path: PathCost | None
    #: Where the latency went, by phase mode (``bench.hops``).
    hops: dict[str, Hops]
    #: The projector's throughput and its lag under load (``bench.projector``).
    read_side: dict[str, float | int | None]
    #: The closed loops' slices, round by round (``bench.rounds``).
    slices: Slices | None = None
    #: ``--baseline``: both builds' figures (``bench.baseline.figures``).
    baseline: dict[str, object] | None = None
    #: ``--baseline``: the baseline build's path, counted around its open loop.
    baseline_path: PathCost | None = None


async def run(plan: Plan, root: Path, tree: baseline_bench.Tree | None = None) -> Run:
    """Start everything under ``root``, run the phases, stop everything (``tree``: the baseline
    build measured beside this one, ``bench.baseline``)."""
    policies = bundle_copy(root, raised_limits(DEMO_BUNDLE.read_text()))
    system = System(root, extra_env={"LOCKGATE_POLICY_DIR": str(policies)},
                    monitor_port=free_port())
    spec = ChainSpec()
    fetch_spec = ChainSpec(tenant="bench-fetch", durable_prefix="raw-fetch-", mode="fetch")
    split_spec = ChainSpec(tenant="bench-split", durable_prefix="raw-split-")
    nonce = random_id()[:8]
    max_s = 10 * plan.phase_max_s + 2 * plan.rounds * plan.slice_s + 300
    workers = WorkerProcess("", spec, root / "log" / "rawchain.log", max_s=max_s)
    fetch_workers = WorkerProcess("", fetch_spec, root / "log" / "rawchain-fetch.log", max_s=max_s)
    split_workers = [WorkerProcess("", split_spec, root / "log" / f"rawchain-split-{k}.log", max_s=max_s,
                                   stages=(k,)) for k in range(1, split_spec.stages + 1)]
    proposer: Proposer | None = None
    driver: ChainDriver | None = None
    fetch_driver: ChainDriver | None = None
    split_driver: ChainDriver | None = None
    nc = None
    notes: list[str] = []
    path: PathCost | None = None
    base: baseline_bench.BaselineSystem | None = None
    base_proposer: Proposer | None = None
    baseline_entry: dict[str, object] | None = None
    try:
        progress(f"starting nats-server, six services and the case-notes adapter under {root}")
        await system.start(timeout_s=60)
        if tree is not None:
            progress(f"starting the baseline {tree.rev} ({tree.commit[:12]}) with its own code, "
                     "on a nats-server of its own")
            base = baseline_bench.BaselineSystem(tree, root / "baseline", monitor_port=free_port())
            await base.start(raised_limits((tree.root / DEMO_BUNDLE.relative_to(REPO)).read_text()))
            progress(f"baseline up, started by {base.system_module}")
        nc = await system.connect()  # the raw chain runs as the topology owner
        admin = system.credentials("admin")
        for s, ws in ((spec, [workers]), (fetch_spec, [fetch_workers]), (split_spec, split_workers)):
            await ensure_consumers(nc.jetstream(), s)
            for w in ws:
                w.url, w.user, w.password = system.url, admin.user, admin.password
                await w.start()
            progress(f"raw chain ({s.mode}): durables {s.durable(1)}..{s.durable(s.stages)} "
                     f"on tenant {s.tenant}, {'one worker process' if len(ws) == 1 else 'a process per stage'}")
        driver = ChainDriver(nc, spec, nonce)
        await driver.start()
        fetch_driver = ChainDriver(nc, fetch_spec, f"{nonce}f")  # event ids differ from the other chain's
        await fetch_driver.start()
        split_driver = ChainDriver(nc, split_spec, f"{nonce}s")
        await split_driver.start()
        proposer = Proposer(system.url, nonce, credentials=system.credentials("agent-tenant-a"),
                            host=system.credentials("host"))
        await proposer.start()
        if base is not None:
            creds = type(admin)  # the baseline's users, in this build's client's terms
            base_proposer = Proposer(base.url, f"{nonce}b", credentials=creds(**base.credentials["agent-tenant-a"]),
                                     host=creds(**base.credentials["host"]))
            await base_proposer.start()

        warm = plan.warmup
        progress(f"warm-up: {warm} raw chains, {warm} Lockgate proposals")
        for fire in (driver.fire("warm"), fetch_driver.fire("warm"), split_driver.fire("warm"),
                     proposer.fire("warm", plan.op_timeout_s),
                     *([base_proposer.fire("warm", plan.op_timeout_s)] if base_proposer else [])):
            await load.closed_loop(Phase("warm", "warm"), fire, concurrency=8, count=warm,
                                   op_timeout_s=plan.op_timeout_s, max_s=plan.phase_max_s)

        pids = {"nats-server": system.server.process.pid} if system.server and \
            system.server.process else {}
        pids.update({name: proc.pid for name, proc in system.processes.items()})
        if workers.proc is not None:
            pids["rawchain worker"] = workers.proc.pid
        if fetch_workers.proc is not None:
            pids["rawfetch worker"] = fetch_workers.proc.pid
        for k, w in enumerate(split_workers, start=1):
            if w.proc is not None:
                pids[f"rawsplit worker {k}"] = w.proc.pid
        pids["bench drivers"] = os.getpid()
        if base is not None:
            pids.update(base.named_pids())

        measured = functools.partial(with_cpu, pids)

        phases: list[Phase] = []
        read_side: dict[str, float | int | None] = {}

        def open_loop(phase: Phase, fire: load.Fire) -> Awaitable[Phase]:
            return load.open_loop(phase, fire, rate_per_s=plan.rate_per_s,
                                  duration_s=plan.duration_s, op_timeout_s=plan.op_timeout_s)

        open_mode = f"open {plan.rate_per_s:g}/s x {plan.duration_s:g}s"
        progress(f"raw chain, {open_mode}")
        raw_open = Phase("raw chain", open_mode)
        raw_before = await counts(system.monitor_port)
        await measured(raw_open, open_loop(raw_open, driver.fire("open")))
        phases.append(raw_open)
        await asyncio.sleep(1.0)  # the last chains' acks are counted
        raw_path = PathCost.between(raw_before, await counts(system.monitor_port), raw_open.ok)
        progress(f"Lockgate, {open_mode}")
        await reseed(system)
        lg_open = Phase("lockgate", open_mode)
        await asyncio.sleep(1.0)  # the reseed's writes are not counted
        before = await counts(system.monitor_port)
        phases.append(await measured(lg_open, open_loop(
            lg_open, proposer.fire("open", plan.op_timeout_s))))
        await asyncio.sleep(1.0)  # the last candidates' settling (locks, holds) is counted
        path = PathCost.between(before, await counts(system.monitor_port), lg_open.ok)
        base_open, base_path = Phase(baseline_bench.SYSTEM, open_mode), None
        if base is not None and base_proposer is not None:
            progress(f"baseline, {open_mode}")
            await base.command("reseed")
            await asyncio.sleep(1.0)
            before = await counts(base.monitor_port)
            phases.append(await measured(base_open, open_loop(
                base_open, base_proposer.fire("open", plan.op_timeout_s))))
            await asyncio.sleep(1.0)
            base_path = PathCost.between(before, await counts(base.monitor_port), base_open.ok)

        closed_mode = f"closed x{plan.concurrency}"
        turns_mode = f"{closed_mode}, {plan.rounds} x {plan.slice_s:g}s"
        progress(f"throughput in turns: {plan.rounds} rounds of {plan.slice_s:g}s closed-loop slices "
                 "of the raw chain, the chain with a process per stage, and Lockgate (the projector stopped)"
                 + (f", and the baseline {tree.rev} beside them" if tree is not None else ""))
        ledger_open = await ledger_size(system)
        await reseed(system)
        raw_closed = Phase("raw chain", turns_mode)
        split_closed = Phase("raw split", turns_mode)
        lg_closed = Phase("lockgate", turns_mode)
        system.kill("projector")  # its backlog after the rounds measures its throughput
        pids.pop("projector", None)
        turns: list[tuple[Phase, load.Fire]] = [
            (raw_closed, driver.fire("closed")), (split_closed, split_driver.fire("closed")),
            (lg_closed, proposer.fire("closed", plan.op_timeout_s))]
        base_closed = Phase(baseline_bench.SYSTEM, turns_mode)
        if base is not None and base_proposer is not None:
            await base.command("reseed")
            await base.command("kill", name="projector")  # as this build's, stopped alike
            pids.pop(f"{baseline_bench.SYSTEM} projector", None)
            turns.append((base_closed, base_proposer.fire("closed", plan.op_timeout_s)))
        slices = await take_turns(
            turns, pids, rounds=plan.rounds, duration_s=plan.slice_s, settle_s=plan.settle_s,
            concurrency=plan.concurrency, op_timeout_s=plan.op_timeout_s)
        phases += [phase for phase, _ in turns]
        ledger_closed = await ledger_size(system)
        if base is not None and base_proposer is not None and tree is not None:
            notes.append(f"baseline {base_closed.mode}: {(await base.command('ledger'))['notes']} notes "
                         f"in the case-notes ledger for {base_closed.ok} executed responses")
            baseline_entry = baseline_bench.figures(
                tree, baseline_bench.Side(base_open, base_closed, base_path, baseline_bench.SYSTEM),
                baseline_bench.Side(lg_open, lg_closed, path, "lockgate"), slices, base.isolated())
            progress("baseline stopped: the phases left measure this build alone")
            await base_proposer.stop()
            await base.stop()
            for name in base.named_pids():
                pids.pop(name, None)
        progress("projector started again: working off the rounds' events")
        await system.restart("projector")
        backlog, took_s = await catch_up(nc)
        read_side["projector_events_per_s"] = round(backlog / took_s, 1) if took_s > 0 else None
        read_side["projector_backlog_events"] = backlog
        pids["projector"] = system.processes["projector"].pid
        progress(f"raw fetch, {closed_mode}, {plan.raw_count} chains")
        fetch_closed = Phase("raw fetch", closed_mode)
        await measured(fetch_closed, load.closed_loop(
            fetch_closed, fetch_driver.fire("closed"), concurrency=plan.concurrency,
            count=plan.raw_count, op_timeout_s=plan.op_timeout_s, max_s=plan.phase_max_s))
        phases.append(fetch_closed)
        half_rate = round(lg_closed.per_s / 2, 1) if lg_closed.per_s == lg_closed.per_s else 0.0
        if half_rate >= 1:
            half_mode = f"open {half_rate:g}/s x {plan.duration_s:g}s (half)"
            progress(f"Lockgate, {half_mode} of its saturated rate")
            await reseed(system)
            lg_half = Phase("lockgate", half_mode)
            sampler = LagSampler(nc)
            sampler.start()
            phases.append(await measured(lg_half, load.open_loop(
                lg_half, proposer.fire("half", plan.op_timeout_s), rate_per_s=half_rate,
                duration_s=plan.duration_s, op_timeout_s=plan.op_timeout_s)))
            await sampler.stop()
            read_side.update(sampler.figures())
        progress(f"rejected, {closed_mode}, {plan.reject_count} calls of a tool no turn offers")
        rejected = Phase("rejected", closed_mode)
        phases.append(await measured(rejected, load.closed_loop(
            rejected, proposer.fire("reject", plan.op_timeout_s, tool="no.such_tool", expect="rejected"),
            concurrency=plan.concurrency, count=plan.reject_count, op_timeout_s=plan.op_timeout_s,
            max_s=plan.phase_max_s)))

        progress("checking what was stored")
        store = JetStreamEventStore(nc)
        hops = {lg_open.mode: await measure_hops(store, TENANT, proposer.sent.get("open", []))}
        if half_rate >= 1:
            hops[lg_half.mode] = await measure_hops(store, TENANT, proposer.sent.get("half", []))
        notes.append("raw open:   " + await check_raw(driver, spec, "open", raw_open))
        notes.append("raw closed: " + await check_raw(driver, spec, "closed", raw_closed))
        notes.append("raw split:  " + await check_raw(split_driver, split_spec, "closed", split_closed))
        notes.append("raw fetch:  " + await check_raw(fetch_driver, fetch_spec, "closed", fetch_closed))
        ledgers = [(lg_open, ledger_open), (lg_closed, ledger_closed)]
        if half_rate >= 1:
            ledgers.append((lg_half, await ledger_size(system)))
        for phase, ledger in ledgers:
            notes.append(f"lockgate {phase.mode}: {ledger} notes in the case-notes "
                         f"ledger for {phase.ok} executed responses")
        fairness = None
        if plan.fairness is not None:
            f = plan.fairness
            progress(f"fairness: intake restarted on the demo bundle; steady tenant {f.steady_per_s:g}/s "
                     f"alone for {f.steady_s:g}s, then beside a {f.flood_per_s:g}/s flood for {f.flood_s:g}s")
            (policies / "bundle.yaml").write_text(DEMO_BUNDLE.read_text())
            system.kill("intake")
            await system.restart("intake")
            await reseed(system)
            fairness = await run_fairness(system, nonce, f)
            executed = fairness.idle.ok + fairness.busy.ok + fairness.flood.ok
            notes.append(f"fairness: {await ledger_size(system)} notes in the case-notes ledger for "
                         f"{executed} executed responses")
        return Run(phases, notes, fairness, path, raw_path, hops, read_side, slices, baseline_entry,
                   base_path)
    finally:
        progress("stopping")
        for closer in (proposer.stop() if proposer else None, driver.stop() if driver else None,
                       base_proposer.stop() if base_proposer else None, base.stop() if base else None,
                       fetch_driver.stop() if fetch_driver else None,
                       split_driver.stop() if split_driver else None, workers.stop(),
                       fetch_workers.stop(), *(w.stop() for w in split_workers),
                       nc.close() if nc else None):
            if closer is not None:
                with contextlib.suppress(Exception):
                    await closer
        await asyncio.to_thread(system.stop)


def summary(phases: list[Phase], slices: Slices | None = None) -> dict[str, object]:
    """The final JSON line: throughput at saturation, latency at low load.

    With ``slices``, the ratios are the medians of the rounds' ratios (and each round's is
    listed), the throughputs each system's median slice.
    """

    def pick(system: str, mode: str) -> Phase:
        return next(p for p in phases if p.system == system and p.mode.startswith(mode))

    def num(x: float, digits: int) -> float | None:
        return None if math.isnan(x) else round(x, digits)

    lg, raw = pick("lockgate", "closed").per_s, pick("raw chain", "closed").per_s
    fetch = pick("raw fetch", "closed").per_s
    half = next((p for p in phases if p.system == "lockgate" and p.mode.endswith("(half)")), None)
    turns: dict[str, object] = {}
    ratio = lg / raw if raw else math.nan
    if slices is not None:
        ratio = slices.ratio("lockgate", "raw chain")
        split = slices.median("raw split")
        turns = {
            "ratio_rounds": [num(r, 4) for r in slices.ratios("lockgate", "raw chain")],
            "raw_split_per_s": num(split, 1),
            "split_ratio": num(slices.ratio("lockgate", "raw split"), 4),
        }
    return {
        "lockgate_per_s": num(lg, 1),
        "raw_chain_per_s": num(raw, 1),
        "raw_fetch_per_s": num(fetch, 1),
        "throughput_ratio": num(ratio, 4),
        **turns,
        "fetch_ratio": num(lg / fetch if fetch else math.nan, 4),
        "rejected_per_s": num(pick("rejected", "closed").per_s, 1),
        "half_rate_per_s": num(half.offered / half.planned_s if half and half.planned_s else math.nan, 1),
        "lockgate_half_p99_ms": num(half.latency_ms(0.99) if half else math.nan, 2),
        "lockgate_p50_ms": num(pick("lockgate", "open").latency_ms(0.5), 2),
        "lockgate_p99_ms": num(pick("lockgate", "open").latency_ms(0.99), 2),
        "raw_p50_ms": num(pick("raw chain", "open").latency_ms(0.5), 2),
    }


async def _main(plan: Plan, args: argparse.Namespace) -> int:
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    # Explicitly, also for SIGINT: a shell starts background jobs with SIGINT ignored.
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, task.cancel)

    print("machine")
    for key, value in machine.describe().items():
        print(f"  {key:<13} {value}")
    names = profiles.GROUPS.get(args.profile, (args.profile,))
    if names == ("single",):
        # Today's run, and today's last line.
        figures = await _single(plan, args)
        print(json.dumps(figures))
        return 0
    cplan = profiles.cluster_plan(plan_quick(args), rate_per_s=args.rate, duration_s=args.duration,
                                  concurrency=args.concurrency, rounds=args.rounds,
                                  slice_s=args.slice)
    results: dict[str, dict[str, object]] = {}
    took: dict[str, float] = {}
    for name in names:
        began = time.monotonic()
        profile = profiles.with_partitions(profiles.PROFILES[name], args.partitions)
        print()
        print(f"=== profile {profile.describe()}")
        if name == "single":
            results[name] = {"profile": name, **profile.setup(), "open_rate_per_s": plan.rate_per_s,
                             **await _single(plan, args)}
        else:
            print(f"plan: {cplan}")
            sys.stdout.flush()
            results[name] = await _cluster(profile, cplan, args)
        took[name] = round(time.monotonic() - began, 1)
        results[name]["run_s"] = took[name]
        sys.stdout.flush()
    print()
    print("each profile: Lockgate beside the raw chain on the same nodes, streams and sync, "
          "in the same run")
    print(profiles.summary_table(results))
    print(f"all profiles took {sum(took.values()):.0f} s")
    print(json.dumps({"profiles": results}))
    return 0


async def _cluster(profile: profiles.Profile, plan: profiles.ClusterPlan,
                   args: argparse.Namespace) -> dict[str, object]:
    """Run one cluster profile; print its tables; return its figures."""
    root_dir = tempfile.mkdtemp(prefix="lockgate-bench-")
    try:
        measured = await profiles.run_cluster(profile, plan, Path(root_dir))
    finally:
        if args.keep:
            progress(f"kept {root_dir}")
        else:
            shutil.rmtree(root_dir, ignore_errors=True)
    print()
    print(table(measured.phases))
    print()
    print("CPU ms per successful operation, by process")
    print(cpu_table(measured.phases))
    print()
    for p in measured.phases:
        if p.overloaded:
            print(f"WARNING: {p.system} did not keep up with {p.mode}: {p.ok}/{p.offered} done "
                  f"in {p.elapsed_s:.1f}s for {p.planned_s:.1f}s of arrivals")
    for n in measured.notes:
        print(n)
    if measured.slices is not None:
        print()
        print(turns_table(measured.slices))
    if measured.hops is not None:
        print()
        print(f"where the latency of an executed candidate goes ({measured.phases[-1].mode}, "
              f"{measured.hops.sampled} sampled): median gap between consecutive events of its record")
        print(measured.hops.table())
    if measured.paths is not None:
        lg_path, raw_path = measured.paths
        print()
        print(f"the path of one executed candidate, counted by the nodes ({measured.phases[-1].mode})")
        print(lg_path.table())
        print()
        print("the raw chain's path, counted the same way, per chain")
        print(raw_path.table())
    f = measured.figures
    print(f"{profile.name}: Lockgate sustains {f['lockgate_per_s']}/s executed against the raw "
          f"chain's {f['raw_chain_per_s']}/s (ratio {f['throughput_ratio']}); at "
          f"{f['open_rate_per_s']}/s offered, p50 {f['lockgate_p50_ms']} ms vs {f['raw_p50_ms']} ms raw")
    return f


async def _single(plan: Plan, args: argparse.Namespace) -> dict[str, object]:
    """The single-server run as it has always been: every phase, its tables, its figures
    (with ``--baseline``, the baseline build's beside them)."""
    with contextlib.ExitStack() as stack:
        tree = stack.enter_context(baseline_bench.materialized(args.baseline)) if args.baseline else None
        if tree is not None:
            print(f"baseline: {tree.rev} = {tree.commit}")
        return await _single_run(plan, args, tree)


async def _single_run(plan: Plan, args: argparse.Namespace,
                      tree: baseline_bench.Tree | None) -> dict[str, object]:
    print(f"plan: {plan}")
    sys.stdout.flush()
    if not args.skip_policy:
        # The policy engine alone first (one JSON line of its own); the pipeline's
        # figures stay the run's last line.
        print("\npolicy decisions: Lockgate's evaluation beside a bare cedarpy call")
        await asyncio.to_thread(policy_bench.run, plan_quick(args))
        print()
        sys.stdout.flush()
    root_dir = tempfile.mkdtemp(prefix="lockgate-bench-")
    try:
        measured = await run(plan, Path(root_dir), tree)
        phases, notes, fairness = measured.phases, measured.notes, measured.fairness
    finally:
        if args.keep:
            progress(f"kept {root_dir}")
        else:
            shutil.rmtree(root_dir, ignore_errors=True)
    print()
    print(table(phases))
    print()
    print("CPU ms per successful operation, by process")
    print(cpu_table(phases))
    print()
    for p in phases:
        if p.max_lag_s > 0.01:
            print(f"note: the {p.system} open-loop driver ran up to {p.max_lag_s * 1000:.0f} ms "
                  "late (charged to latency)")
        if p.overloaded:
            print(f"WARNING: {p.system} did not keep up with {p.mode}: {p.ok}/{p.offered} done "
                  f"in {p.elapsed_s:.1f}s for {p.planned_s:.1f}s of arrivals, so its latency "
                  "includes a growing queue; try a lower --rate")
    for n in notes:
        print(n)
    if measured.slices is not None:
        print()
        print(turns_table(measured.slices))
    figures: dict[str, object] = dict(summary(phases, measured.slices))
    lg_open = next(p for p in phases if p.system == "lockgate" and p.mode.startswith("open"))
    lg_closed = next(p for p in phases if p.system == "lockgate" and p.mode.startswith("closed"))
    # Lockgate's own processes and the broker, saturated (not the drivers, not the raw chains).
    figures["cpu_ms_per_candidate"] = baseline_bench.cpu_ms(lg_closed, baseline=False)
    if measured.path is not None:
        print()
        print(f"the path of one executed candidate, counted by the broker ({lg_open.mode}): "
              "messages each process published and was delivered, deliveries per durable")
        print(measured.path.table())
        figures.update(measured.path.figures())
    if measured.baseline_path is not None:
        print()
        print("the baseline's path, counted the same way on its own broker (its open loop)")
        print(measured.baseline_path.table())
    if measured.raw_path is not None:
        print()
        print("the raw chain's path, counted the same way (raw open loop), per chain")
        print(measured.raw_path.table())
        figures.update(measured.raw_path.raw_figures())
    for mode, hops in measured.hops.items():
        print()
        print(f"where the latency of an executed candidate goes ({mode}, {hops.sampled} sampled): "
              "median gap between consecutive events of its record")
        print(hops.table())
    if measured.read_side:
        r = measured.read_side
        print()
        print(f"read side: the projector worked off {r.get('projector_backlog_events')} events at "
              f"{r.get('projector_events_per_s')} events/s; during the half-rate phase the views "
              f"lagged the stream by {r.get('projector_lag_p50_events')} events at the median, "
              f"{r.get('projector_lag_max_events')} at most")
        figures.update(measured.read_side)
    ratio = figures["throughput_ratio"]
    if fairness is not None:
        print()
        print("fairness: the steady tenant alone, then beside the flooding tenant (demo bundle limits)")
        print(table([fairness.idle, fairness.busy, fairness.flood]))
        fair = fairness.figures()
        print(f"steady tenant p99 {fair['steady_flood_p99_ms']} ms beside the flood against "
              f"{fair['steady_idle_p99_ms']} ms idle ({fair['steady_p99_ratio']}x; goal at most 3x); "
              f"{fair['flood_answered']}/{fair['flood_offered']} flood candidates answered "
              f"({fair['flood_executed']} executed, {fair['flood_rate_limited']} rate.limited)")
        figures.update(fair)
    if measured.baseline is not None:
        print()
        print(baseline_bench.table(measured.baseline))
        figures["baseline"] = measured.baseline
    print(f"Lockgate sustains {figures['lockgate_per_s']}/s executed against the raw chain's "
          f"{figures['raw_chain_per_s']}/s (ratio {ratio}); at {plan.rate_per_s:g}/s offered, "
          f"p50 {figures['lockgate_p50_ms']} ms vs {figures['raw_p50_ms']} ms raw")
    return figures


def turns_table(slices: Slices) -> str:
    """Each round's steady rates and Lockgate's ratio to the raw chain within it."""
    systems = list(slices.rates)
    lines = ["throughput in turns: each round's steady rate (/s), and Lockgate's ratio within it",
             f"{'round':<7}" + "".join(f"{s:>12}" for s in systems) + f"{'ratio':>9}"]
    ratios = slices.ratios("lockgate", "raw chain")
    for n, ratio in enumerate(ratios):
        lines.append(f"{n + 1:<7}" + "".join(f"{slices.rates[s][n]:>12.1f}" for s in systems)
                     + f"{ratio:>9.3f}")
    lines.append(f"{'median':<7}" + "".join(f"{slices.median(s):>12.1f}" for s in systems)
                 + f"{slices.ratio('lockgate', 'raw chain'):>9.3f}")
    return "\n".join(lines)


def plan_quick(args: argparse.Namespace) -> bool:
    """Whether this is a ``--quick`` run."""
    return bool(getattr(args, "quick", False))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; 130 when interrupted."""
    plan, args = parse_args(argv)
    try:
        return asyncio.run(_main(plan, args))
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("interrupted: everything stopped", file=sys.stderr)
        return 130
