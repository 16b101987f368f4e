"""``lockgate token``: a console token for a reviewer or operator (``lockgate.client.tokens``)."""

from __future__ import annotations

import argparse
import sys

from lockgate.cli.group import CommandGroup, Subparsers, UsageError, command
from lockgate.cli.where import locate
from lockgate.client.output import Output
from lockgate.client.tokens import (
    DEFAULT_TTL_S,
    MAX_TTL_S,
    ConsoleSettings,
    issue,
    read_console_info,
)


def _register(sub: Subparsers) -> None:
    p = command(sub, "token", "print a console token for a reviewer (or --operator)")
    p.add_argument("--as", dest="as_", metavar="NAME", default=None,
                   help="the person (default: the first reviewer, or operator with --operator)")
    p.add_argument("--operator", action="store_true",
                   help="a token for an operator (reconcile, withdraw) instead of a reviewer")
    p.add_argument("--ttl", type=float, default=DEFAULT_TTL_S, metavar="SECONDS",
                   help=f"how long it is valid (default {DEFAULT_TTL_S:g}, at most {MAX_TTL_S:g})")


def _token(args: argparse.Namespace, out: Output) -> int:
    """Print a console token for a reviewer or operator, and where to use it.

    A person reads the token on its own line, then whose it is and where to paste it; with
    ``--json``: ``{"token", "person", "role", "expires_at", "console"}``.

    Raises:
        UsageError: no such person, or a broker without per-person users.
    """
    where = locate(args)
    kind = "operator" if args.operator else "reviewer"
    person = where.person(kind, args.as_)
    creds = where.credentials(f"{kind}-{person}")
    if creds is None:
        raise UsageError("the console acts as each person's own NATS user, and this broker has none")
    try:
        token, expires = issue(creds, ttl_s=args.ttl, settings=where.settings)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    running = read_console_info(where.var_dir)
    port = ConsoleSettings().port
    url = running.url if running else (
        f"http://127.0.0.1:{port}/" if port else "the console's URL (`lockgate run` prints it)")
    out.record({"token": token, "person": person, "role": kind, "expires_at": expires.isoformat(),
                "console": url if running or port else None}, text=token)
    # Beside the token, not with it: `TOKEN=$(lockgate token)` keeps the token alone.
    print(f"a console token for {kind} {person}, valid until {expires.isoformat()}: "
          f"open {url} and paste it (or open {url}#token=<the token>); "
          "keep it as you keep a password", file=sys.stderr, flush=True)
    return 0


TOKEN = CommandGroup("token", _register, _token)
