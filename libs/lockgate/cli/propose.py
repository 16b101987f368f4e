"""``lockgate propose``: one tool call from the shell, as the tenant's agent runtime and the host."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import msgspec

from lockgate.cli.group import CommandGroup, Subparsers, UsageError, command
from lockgate.cli.where import Where, on_system, subject_id
from lockgate.client.output import Output


def _register(sub: Subparsers) -> None:
    pr = command(sub, "propose", "propose one tool call and print the model-facing response")
    pr.add_argument("--tenant", required=True)
    pr.add_argument("--actor", required=True)
    pr.add_argument("--context", action="append", default=[], metavar="KEY=VALUE")
    pr.add_argument("--tool", required=True)
    pr.add_argument("--arguments", required=True, help="raw argument text, exactly as the model wrote it")
    pr.add_argument("--call-id", default=None)
    pr.add_argument("--timeout", type=float, default=30.0)


def _context(pairs: Sequence[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise UsageError(f"--context expects KEY=VALUE, got {pair!r}")
        out[key] = value
    return out


async def _propose(args: argparse.Namespace, where: Where, out: Output) -> int:
    gw = await where.gateway(f"agent-{subject_id(args.tenant, 'tenant')}", host=True)
    try:
        run = await gw.open_run(tenant=args.tenant, actor=args.actor, context=_context(args.context))
        turn = await run.open_turn()
        resp = await turn.propose(tool=args.tool, arguments=args.arguments,
                                  call_id=args.call_id, timeout_s=args.timeout)
        out.record(msgspec.to_builtins(resp))
        return 0
    finally:
        await gw.close()


PROPOSE = CommandGroup("propose", _register, on_system(_propose))
