"""``lockgate policy shadow`` and ``lockgate policy promote``: a bundle tried on live traffic first.

::

    lockgate policy shadow DIR        # run DIR beside the active bundle: decided, recorded, never enforced
    lockgate policy shadow            # where the bundles stand, and the log of changes
    lockgate policy shadow --off      # stop it
    lockgate policy promote           # make the shadow the active bundle (asks first when it
                                      # turned an allow into a deny in the last --last decisions)

The running system's policy service does each (as the operator ``--as`` names, who must
act for every tenant); what the shadow would have changed is in the views
(``lockgate.views``: the console's Shadow page, ``lockgate_shadow_decisions_total``).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from lockgate.authz.engine import BundleError, PolicyBundle, bundle_files
from lockgate.cli.group import UsageError, add_as
from lockgate.cli.where import Where, locate, operator, views
from lockgate.client.output import Output
from lockgate.client.sdk.errors import ClientError
from lockgate.contracts.messages import PolicyCommand, PolicyStatus
from lockgate.core.errors import LockgateError

#: What a flip to refusal is named in the views.
ALLOW_TO_DENY = "allow->deny"


def add_parsers(sub: Any, json_flag: Any) -> None:
    """The ``shadow`` and ``promote`` subcommands of ``lockgate policy``."""
    s = sub.add_parser("shadow", help="run a bundle beside the active one on live traffic "
                                      "(recorded, never enforced); no DIR: where they stand")
    s.add_argument("dir", type=Path, nargs="?", default=None,
                   help="the bundle to run as the shadow (validated here first)")
    s.add_argument("--off", action="store_true", help="stop the shadow bundle")
    p = sub.add_parser("promote", help="make the shadow bundle the active one")
    p.add_argument("--last", type=int, default=1000, metavar="N",
                   help="how many of the shadow's latest decisions to look at for flips (1000)")
    p.add_argument("--yes", action="store_true",
                   help="promote even when the shadow turned an allow into a deny, without asking")
    p.add_argument("--wait", type=float, default=5.0, help="seconds to wait for the views to catch up")
    for parser in (s, p):
        json_flag(parser)
        parser.add_argument("--url", default=None, help="NATS URL (default: the one `lockgate run` chose)")
        parser.add_argument("--var-dir", type=Path, default=None, help="the deployment's var directory")
        add_as(parser, "operator")


def run(args: argparse.Namespace, out: Output) -> int:
    """Run ``shadow`` or ``promote`` on the running system; one line on stderr for an error."""
    handler = _shadow if args.policy_command == "shadow" else _promote
    try:
        return asyncio.run(handler(args, locate(args), out))
    except ClientError as exc:
        message = f"{exc.code}: {exc}" if exc.code not in str(exc) else str(exc)
    except (LockgateError, OSError, TimeoutError) as exc:
        message = str(exc)
    print(f"lockgate: {message}", file=sys.stderr, flush=True)
    return 1


async def _shadow(args: argparse.Namespace, where: Where, out: Output) -> int:
    if args.dir is not None and args.off:
        raise UsageError("give a bundle to shadow, or --off, not both")
    command = None
    if args.dir is not None:
        try:
            bundle = PolicyBundle.load(args.dir)
        except BundleError as exc:
            raise UsageError(f"invalid bundle {args.dir}: {exc} (see `lockgate policy validate`)") from None
        command = PolicyCommand(files=bundle_files(args.dir))
    verb = "shadow" if command is not None else "shadow-off" if args.off else "status"
    gw = await operator(where, args)
    try:
        status = await gw.policy_command(verb, command)
    finally:
        await gw.close()
    if command is not None and status.shadow_revision != bundle.revision:
        raise UsageError(f"policy runs shadow {status.shadow_revision}, not {bundle.revision}")
    out.record(msgspec.to_builtins(status), text=_described(status))
    return 0


async def _promote(args: argparse.Namespace, where: Where, out: Output) -> int:
    gw = await operator(where, args)
    try:
        status = await gw.policy_command("status")
        if status.shadow_revision is None:
            raise UsageError("no shadow bundle runs: start one with `lockgate policy shadow DIR`")
        flips = await _flips(where, args, out, status.shadow_revision)
        refused = sum(n for (_, flip, _), n in flips.items() if flip == ALLOW_TO_DENY)
        if refused and not args.yes and not _confirmed(refused, flips, args.last, out):
            raise UsageError(f"not promoted: the shadow turned {refused} allowed decisions into "
                             "denials (--yes promotes anyway)")
        after = await gw.policy_command("promote", PolicyCommand(revision=status.shadow_revision,
                                                                 flips=refused))
    finally:
        await gw.close()
    out.record(msgspec.to_builtins(after),
               text=f"promoted {status.shadow_revision} over {status.active_revision}\n"
                    + _described(after))
    return 0


async def _flips(where: Where, args: argparse.Namespace, out: Output,
                 revision: str) -> Counter[tuple[str, str, str]]:
    """The shadow's flips among its latest ``--last`` decisions: (capability, flip, policy) → count."""
    seen = await views(where, args, out)
    try:
        rows = seen.shadow_decisions(revision=revision, limit=max(1, args.last))
    finally:
        seen.close()
    return Counter((r.tool, r.flip, r.policy) for r in rows if r.flip)


def _confirmed(refused: int, flips: Counter[tuple[str, str, str]], last: int, out: Output) -> bool:
    """Ask the person at the terminal; nobody there (or --json) is a no."""
    lines = [f"the shadow turned {refused} of its last {last} decisions from allow to deny:"]
    lines += [f"  {n:>5}  {tool}  {flip}  {policy or '-'}"
              for (tool, flip, policy), n in flips.most_common()]
    print("\n".join(lines), file=sys.stderr)
    if out.json or not sys.stdin.isatty():
        return False
    print("promote it anyway? [y/N] ", end="", file=sys.stderr, flush=True)
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def _described(status: PolicyStatus) -> str:
    """Where the bundles stand, in words, with the latest changes."""
    lines = [f"active  {status.active_revision}"]
    if status.shadow_revision is None:
        lines.append("shadow  none")
    else:
        lines.append(f"shadow  {status.shadow_revision} (by {status.shadow_by} since "
                     f"{status.shadow_since:%Y-%m-%d %H:%M:%S}Z)" if status.shadow_since else
                     f"shadow  {status.shadow_revision}")
    changes: Sequence[Any] = status.changes[-10:]
    if changes:
        lines.append("changes (latest last):")
        lines += [f"  {c.at:%Y-%m-%d %H:%M:%S}Z  {c.action:<10}  {c.revision[:19]}  "
                  f"active {c.active_revision[:19]}  by {c.by}" + (f"  ({c.flips} flips confirmed)"
                                                                   if c.flips else "")
                  for c in changes]
    return "\n".join(lines)
