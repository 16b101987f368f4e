"""``lockgate reconcile`` and ``lockgate withdraw``: an operator settles an unknown outcome or stops a candidate."""

from __future__ import annotations

import argparse

import msgspec

from lockgate.cli.group import CommandGroup, Subparsers, add_as, command
from lockgate.cli.where import Where, on_system, operator, subject_id
from lockgate.client.output import Output
from lockgate.contracts.vocabulary import Finding


def _register_reconcile(sub: Subparsers) -> None:
    rc = command(sub, "reconcile", "settle an unknown outcome as an operator")
    rc.add_argument("intent")
    rc.add_argument("--tenant", required=True)
    found = rc.add_mutually_exclusive_group(required=True)
    found.add_argument("--confirmed", action="store_true", help="the effect happened")
    found.add_argument("--absent", action="store_true", help="the effect did not happen")
    rc.add_argument("--why", required=True, help="the evidence (recorded with who decided)")
    add_as(rc, "operator")


def _register_withdraw(sub: Subparsers) -> None:
    wd = command(sub, "withdraw", "stop a candidate by its state, as an operator")
    wd.add_argument("intent")
    wd.add_argument("--tenant", required=True)
    wd.add_argument("--why", default="")
    add_as(wd, "operator")


async def _reconcile(args: argparse.Namespace, where: Where, out: Output) -> int:
    gw = await operator(where, args)
    try:
        event = await gw.resolve_outcome(
            tenant=subject_id(args.tenant, "tenant"), candidate_id=subject_id(args.intent, "intent"),
            finding=Finding.CONFIRMED if args.confirmed else Finding.ABSENT, why=args.why,
        )
    finally:
        await gw.close()
    found = "happened" if args.confirmed else "did not happen"
    out.record({"recorded": event, "by": gw.principal},
               text=f"recorded {event} for intent {args.intent} by {gw.principal}: the effect {found}")
    return 0


async def _withdraw(args: argparse.Namespace, where: Where, out: Output) -> int:
    gw = await operator(where, args)
    try:
        resp = await gw.withdraw(subject_id(args.tenant, "tenant"), subject_id(args.intent, "intent"),
                                 why=args.why)
    finally:
        await gw.close()
    out.record(msgspec.to_builtins(resp))
    return 0


RECONCILE = CommandGroup("reconcile", _register_reconcile, on_system(_reconcile))
WITHDRAW = CommandGroup("withdraw", _register_withdraw, on_system(_withdraw))
