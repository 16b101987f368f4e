"""``lockgate replay``: recorded candidates again, in a fixture world, or under another bundle.

::

    lockgate replay <run id> [--tenant T]            # one run's candidates
    lockgate replay --since 2026-12-01T00:00 --until 2026-12-02T00:00
    lockgate replay --intent ID [--intent ID ...]
    lockgate replay <selection> --bundle DIR [--json]   # the decisions DIR would change
    lockgate replay <selection> --bundle DIR --world    # ... and the whole replay under DIR

The candidates come from the views (the permanent record); the context of each run and
the capabilities' contracts are read from the running system as the ``replay`` user,
which can reach nothing else (``--fixtures FILE`` declares runs, and answers, first). A
running system that cannot be read is an error: ``--offline`` reads none, and the
contracts compiled into lockgate answer only with ``--builtin-contracts``.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from nats.errors import Error as NatsError

from lockgate.core.errors import LockgateError
from lockgate.operations.roles import REPLAY
from lockgate.replay.fixtures import Fixtures
from lockgate.replay.record import (
    Candidate,
    Known,
    Selection,
    Sources,
    candidates,
    demo_contracts,
    utc_text,
)
from lockgate.runtime.credentials import Credentials
from lockgate.runtime.settings import Settings

if TYPE_CHECKING:
    from lockgate.client.output import Output
    from lockgate.replay.sources import BrokerDeployment
    from lockgate.views.store import Views


class Where(Protocol):
    """What the ``lockgate`` CLI knows of the running system (``lockgate.cli.where.Where``)."""

    @property
    def url(self) -> str:
        """The broker's URL."""

    @property
    def var_dir(self) -> Path:
        """The deployment's var directory."""

    @property
    def settings(self) -> Settings:
        """The deployment's settings."""

    def credentials(self, user: str) -> Credentials | None:
        """``user``'s credentials (``None``: a broker without users)."""


def add_command(sub: argparse._SubParsersAction[argparse.ArgumentParser],
                globals_: Callable[[argparse.ArgumentParser], None]) -> None:
    """Add ``replay`` to the CLI's subcommands."""
    rp = sub.add_parser("replay", help="replay recorded candidates in a fixture world, or ask "
                                       "another policy bundle what it would have decided")
    globals_(rp)
    rp.add_argument("run", nargs="?", default="", help="the run whose candidates to replay")
    rp.add_argument("--tenant", default="", help="only this tenant's candidates")
    rp.add_argument("--since", default="", help="candidates recorded at or after this time (ISO-8601 UTC)")
    rp.add_argument("--until", default="", help="candidates recorded before this time (ISO-8601 UTC)")
    rp.add_argument("--intent", action="append", default=[], metavar="ID", help="this candidate (repeatable)")
    rp.add_argument("--bundle", type=Path, default=None,
                    help="print the decisions this policy bundle would change, and every one not decided "
                         "on the evidence as recorded (no world is asked)")
    rp.add_argument("--world", action="store_true",
                    help="with --bundle: also replay the candidates in a fixture world under it")
    rp.add_argument("--fixtures", type=Path, default=None, help="a fixture file: runs and answers to declare")
    rp.add_argument("--no-recorded-evidence", action="store_true",
                    help="answer only from --fixtures, never from the record")
    rp.add_argument("--offline", action="store_true",
                    help="read no running system: the views as they are, runs only from --fixtures")
    rp.add_argument("--builtin-contracts", action="store_true",
                    help="where no other source has a contract, use the demo worlds' compiled into "
                         "lockgate (every line it affects says so)")
    rp.add_argument("--all", action="store_true", help="with --bundle: every decision, changed or not")
    rp.add_argument("--wait", type=float, default=5.0, help="seconds to wait for the views to catch up")


def run(args: argparse.Namespace, where: Where, out: Output,
        fresh_views: Callable[[], Awaitable[Views]]) -> int:
    """Run ``lockgate replay``; ``fresh_views`` opens the views once the projector caught up.

    A person reads tables; ``--json`` prints one JSON document (``counterfactual``, ``replay``).
    """
    return asyncio.run(_replay(args, where, out, fresh_views))


async def _views(where: Where, out: Output, fresh_views: Callable[[], Awaitable[Views]], *,
                 offline: bool) -> Views:
    """The views, up to date when the running system says so; as they are without one."""
    from lockgate.views.store import open_views

    if offline:
        return open_views(where.settings.views_url, var_dir=where.var_dir)
    try:
        return await fresh_views()
    except (LockgateError, NatsError, OSError, TimeoutError) as exc:
        out.warn(f"the views are read as they are ({exc})")
        return open_views(where.settings.views_url, var_dir=where.var_dir)


async def _sources(where: Where, args: argparse.Namespace) -> tuple[Sources, BrokerDeployment | None]:
    """Declared runs first, then the running system's (as the ``replay`` user), then, when
    asked for, the contracts compiled into lockgate.

    Raises:
        DeploymentUnreachable: the running system cannot be read (and ``--offline`` was not given).
    """
    from lockgate.replay.sources import BrokerDeployment

    declared = Fixtures()
    if args.fixtures is not None:
        declared.declare(args.fixtures)
    broker = None if args.offline else await BrokerDeployment.open(where.url, where.credentials(REPLAY))
    builtin = Known({}, demo_contracts()) if args.builtin_contracts else None
    return Sources(Known(dict(declared.runs), {}), broker, builtin), broker


def _whole_runs(views: Views, chosen: list[Candidate]) -> list[Candidate]:
    """Every recorded candidate of the runs ``chosen`` belong to."""
    runs = sorted({(c.first.tenant, c.first.run_id) for c in chosen if c.first is not None})
    found = {c.intent_id: c for c in chosen}
    for tenant, run_id in runs:
        found.update((c.intent_id, c) for c in candidates(views, Selection(run_id=run_id, tenant=tenant)))
    return list(found.values())


async def _replay(args: argparse.Namespace, where: Where, out: Output,
                  fresh_views: Callable[[], Awaitable[Views]]) -> int:
    # Imported here: the fixture world builds every service's handlers, which no other
    # command needs to load.
    from lockgate.authz import PolicyBundle
    from lockgate.replay.counterfactual import counterfactual
    from lockgate.replay.report import changes_table, replay, replay_table, summary

    selection = Selection(run_id=args.run, tenant=args.tenant, since=args.since and utc_text(args.since),
                          until=args.until and utc_text(args.until), intent_ids=tuple(args.intent))
    selection.check()
    # The running system first: one that cannot be read ends the command before anything
    # is read as it is.
    sources, broker = await _sources(where, args)
    try:
        bundle = PolicyBundle.load(args.bundle) if args.bundle is not None else None
        views = await _views(where, out, fresh_views, offline=args.offline)
        try:
            chosen: list[Candidate] = candidates(views, selection)
            # What a run did before a decision is on the record of the whole run, not
            # only of the candidates selected.
            runs = _whole_runs(views, chosen) if bundle is not None and bundle.uses_prior_effects else None
        finally:
            views.close()
        answer: dict[str, object] = {}
        text: list[str] = []
        if bundle is not None:
            rows = await counterfactual(chosen, bundle, sources, runs=runs)
            answer["counterfactual"] = {
                "bundle": str(args.bundle), "revision": bundle.revision,
                "decisions": sum(not r.undecidable for r in rows),
                "changed": sum(r.changed for r in rows),
                "not_as_recorded": sum(not (r.as_recorded or r.undecidable) for r in rows),
                "undecidable": sum(bool(r.undecidable) for r in rows),
                "summary": summary(rows, str(args.bundle)),
                "rows": [r.as_json() for r in rows if r.changed or not r.as_recorded or args.all]}
            text.append(changes_table(rows, str(args.bundle), every=args.all))
        if args.bundle is None or args.world:
            bundle_dir = args.bundle if args.bundle is not None else where.settings.policy_dir
            result = await replay(chosen, sources, bundle_dir, declared=args.fixtures,
                                  recorded_evidence=not args.no_recorded_evidence)
            answer["replay"] = result.as_json()
            text.append(replay_table(result))
    finally:
        if broker is not None:
            await broker.close()
    out.record(answer, text="\n\n".join(text))
    return 0
