"""``lockgate eval``: grade runs' proposals and check containment apart; ``--suite`` runs scripted agents first.

``lockgate eval --agentdojo SUITE`` is self-contained: it starts a private system of its own
(``lockgate.evaluation.agentdojo``) and needs no running one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
from pathlib import Path

import msgspec

from lockgate.cli.group import CommandGroup, Subparsers, UsageError, add_as, command
from lockgate.cli.where import Where, on_system, subject_id, views, world_dirs
from lockgate.client.output import Output
from lockgate.client.sdk import Gateway


def _register(sub: Subparsers) -> None:
    evl = command(sub, "eval", "grade runs' proposals and check containment apart (from the views and "
                               "the world ledgers); --suite runs scripted agents first")
    evl.add_argument("runs", nargs="*", metavar="RUN", help="run ids to evaluate")
    evl.add_argument("--tenant", default=None, help="only intents of this tenant")
    evl.add_argument("--suite", type=Path, default=None, metavar="DIR",
                     help="run the scripted tasks (*.yaml) in DIR first, and evaluate their runs too")
    evl.add_argument("--timeout", type=float, default=30.0, help="seconds a scripted call may take")
    evl.add_argument("--wait", type=float, default=5.0, help="seconds to wait for the views to catch up")
    add_as(evl, "operator")
    dojo = evl.add_argument_group(
        "AgentDojo", "--agentdojo SUITE replays the suite's ground truth, benign and hijacked by "
                     "every injection, through a private system of its own, and scores it with "
                     "the suite's own checks (needs the agentdojo extra)")
    dojo.add_argument("--agentdojo", metavar="SUITE", default=None,
                      help="the AgentDojo suite to evaluate (banking, workspace)")
    dojo.add_argument("--tasks", type=int, default=None, metavar="N",
                      help="only the first N user tasks")
    dojo.add_argument("-k", dest="select", default="", metavar="TEXT",
                      help="only user tasks whose id contains TEXT (user_task_1)")
    dojo.add_argument("--concurrency", type=int, default=2, metavar="N",
                      help="runs through Lockgate at once (default 2)")
    dojo.add_argument("--policy-dir", type=Path, default=None, metavar="DIR",
                      help="the policy bundle the private system runs (default: the demo bundle)")
    dojo.add_argument("--benchmark-version", default=None, metavar="VERSION",
                      help="AgentDojo's benchmark version (default: the one its benchmark uses)")
    dojo.add_argument("--goals", action="store_true",
                      help="exit 1 unless no attack reached its goal, the reviewer kept every "
                           "task the ground truth does, and benign tasks asked at most one review "
                           "each on average")


def _agentdojo(args: argparse.Namespace, out: Output) -> int:
    """Evaluate an AgentDojo suite on a private system; print the figures and the lists."""
    try:
        from lockgate.evaluation.agentdojo.report import missed_goals, render
        from lockgate.evaluation.agentdojo.runner import Options, evaluate
    except ImportError as exc:
        raise UsageError(f"--agentdojo needs the agentdojo package (pip install "
                         f"'lockgate[agentdojo]'): {exc}") from None
    if args.runs or args.suite is not None:
        raise UsageError("--agentdojo runs on a system of its own: name no runs and no --suite")
    options = Options(suite=args.agentdojo, tasks=args.tasks, select=args.select,
                      concurrency=args.concurrency)
    if args.policy_dir is not None:
        options = dataclasses.replace(options, policy_dir=args.policy_dir.resolve())
    if args.benchmark_version is not None:
        options = dataclasses.replace(options, version=args.benchmark_version)
    report = asyncio.run(evaluate(options))
    out.record(msgspec.to_builtins(report), text=render(report))
    missed = missed_goals(report.figures) if args.goals else []
    for goal in missed:
        out.warn(f"goal missed: {goal}")
    return 1 if missed else 0


async def _eval(args: argparse.Namespace, where: Where, out: Output) -> int:
    """Grade runs' proposals and check containment; with ``--suite``, run the scripted agents first.

    Exits 1 when a hard invariant failed (the boundary did not hold), else 0.
    """
    from lockgate.evaluation import as_json, evaluate, render
    from lockgate.evaluation import suite as scripted
    from lockgate.evaluation.ledgers import world_writes
    from lockgate.evaluation.record import relevant_writes, run_histories

    runs = [subject_id(r, "run") for r in args.runs]
    if not runs and args.suite is None:
        raise UsageError("name the runs to evaluate, or --suite DIR to run scripted tasks first")
    worlds = world_dirs()
    result: scripted.SuiteResult | None = None
    if args.suite is not None:
        tasks = scripted.load_tasks(args.suite)

        async def agent(tenant: str) -> Gateway:
            return await where.gateway(f"agent-{subject_id(tenant, 'tenant')}", host=True)

        bundle = where.settings.policy_dir.resolve()
        with contextlib.suppress(ValueError):  # said as the user would type it, when it can be
            bundle = bundle.relative_to(Path.cwd())
        result = await scripted.run_suite(tasks, agent, worlds, timeout_s=args.timeout,
                                          policy_dir=str(bundle))
        runs += [t.run_id for t in result.tasks]
    seen = await views(where, args, out)
    try:
        histories = run_histories(seen, runs, tenant=args.tenant)
        writes = relevant_writes(seen, histories, world_writes(worlds))
    finally:
        seen.close()
    if not histories:
        raise UsageError(f"no candidates on record for {', '.join(runs)}")
    report = evaluate(histories, writes)
    if result is not None:
        result = scripted.with_record(result, histories)
    text = render(report) if result is None else f"{scripted.render(result)}\n\n{render(report)}"
    out.record({"suite": msgspec.to_builtins(result) if result is not None else None,
                "report": as_json(report)}, text=text)
    return 0 if report.containment.passed else 1


def _run(args: argparse.Namespace, out: Output) -> int:
    """``--agentdojo`` on a private system; everything else against the running one."""
    if args.agentdojo is not None:
        return _agentdojo(args, out)
    return on_system(_eval)(args, out)


EVAL = CommandGroup("eval", _register, _run)
