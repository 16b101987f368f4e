"""``lockgate eval``: grade runs' proposals and check containment apart; ``--suite`` runs scripted agents first."""

from __future__ import annotations

import argparse
import contextlib
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


EVAL = CommandGroup("eval", _register, on_system(_eval))
