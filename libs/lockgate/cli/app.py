"""``lockgate``: run the system, check it, propose from the shell, review, operate, read worlds.

Every command finds the running system by itself: the URL and the credentials
``lockgate run`` made are under its ``var`` directory (``run.json``, ``credentials/``),
and each command connects as the role it needs: ``propose`` as the tenant's agent
runtime (and the trusted host to open the run), ``review …`` as a reviewer,
``reconcile``, ``withdraw``, ``events``, ``intents`` and ``status`` as an operator.
Global options (``--url``, ``--var-dir``, ``--json``) go before or after the command.

Every command answers a person by default (tables, a short record, a sentence) and a
script with ``--json`` (one JSON document for a record, JSON Lines for rows, nothing
else on stdout); an error is one line on stderr and a non-zero exit either way.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from pydantic import ValidationError

from lockgate.cli.adapter import ADAPTER
from lockgate.cli.demo import DEMO
from lockgate.cli.eval import EVAL
from lockgate.cli.group import CommandGroup, OwnArguments, add_globals
from lockgate.cli.intents import EVENTS, INTENTS
from lockgate.cli.mcp import MCP
from lockgate.cli.operate import RECONCILE, WITHDRAW
from lockgate.cli.policy import POLICY
from lockgate.cli.propose import PROPOSE
from lockgate.cli.replay import REPLAY
from lockgate.cli.review import REVIEW
from lockgate.cli.run import RUN
from lockgate.cli.status import STATUS
from lockgate.cli.token import TOKEN
from lockgate.cli.world import WORLD
from lockgate.client.output import Output
from lockgate.client.sdk import ClientError
from lockgate.core.errors import LockgateError

#: Every command, in the order ``lockgate --help`` lists them. A new command is a module in
#: this package that declares its group, and one entry here.
GROUPS: tuple[CommandGroup | OwnArguments, ...] = (
    RUN, STATUS, PROPOSE, DEMO, WORLD, INTENTS, RECONCILE, WITHDRAW, REVIEW, TOKEN, POLICY,
    EVENTS, EVAL, MCP, REPLAY, ADAPTER,
)
_PARSED = {g.name: g for g in GROUPS if isinstance(g, CommandGroup)}
_OWN = {g.name: g for g in GROUPS if isinstance(g, OwnArguments)}


class RegistryError(LockgateError):
    """A group registered a command under another name than it declares (a programming error)."""

    def __init__(self, declared: Sequence[str], registered: Sequence[str]) -> None:
        super().__init__(f"command groups declare {list(declared)} but registered {list(registered)}",
                         code="cli.registry")


def parser() -> argparse.ArgumentParser:
    """The command-line interface: the global options, then every group's command.

    Raises:
        RegistryError: a group's ``register`` added another command than its ``name``.
    """
    p = argparse.ArgumentParser(prog="lockgate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_globals(p, top=True)
    sub = p.add_subparsers(dest="command", required=True)
    for group in GROUPS:
        group.register(sub)
    declared = [g.name for g in GROUPS]
    if list(sub.choices) != declared:
        raise RegistryError(declared, list(sub.choices))
    return p


def _command_at(argv: Sequence[str]) -> int | None:
    """Where the command's name is: the first word that is not a global option or its value."""
    at = 0
    while at < len(argv):
        word = argv[at]
        if word in ("--url", "--var-dir"):
            at += 2
        elif word.startswith("-"):
            at += 1
        else:
            return at
    return None


def _fail(message: str) -> int:
    print(f"lockgate: {message}", file=sys.stderr, flush=True)
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``lockgate`` command: every error ends in one line and a non-zero exit."""
    argv = list(sys.argv[1:] if argv is None else argv)
    at = _command_at(argv)
    if at is not None and argv[at] in _OWN:
        # It parses its own arguments (policy authoring works on files only: no broker);
        # --json given before the command is passed on to them.
        return _OWN[argv[at]].main(argv[at + 1:] + (["--json"] if "--json" in argv[:at] else []))
    args = parser().parse_args(argv)
    out = Output(json=bool(args.json))
    # The SDK's connection warnings would add lines to the one an error gets here.
    logging.getLogger("lockgate.client").setLevel(logging.ERROR)
    if args.var_dir is not None:
        # Every default under var/ (credentials, worlds, run.json) follows it.
        os.environ["LOCKGATE_VAR_DIR"] = str(args.var_dir.resolve())
    try:
        return _PARSED[args.command].run(args, out)
    except BrokenPipeError:
        # `lockgate intents | head`: the reader left; so do we, quietly.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        return 130
    except ClientError as exc:
        return _fail(f"{exc.code}: {exc}" if exc.code not in str(exc) else str(exc))
    except LockgateError as exc:
        return _fail(str(exc))
    except ValidationError as exc:
        errors = exc.errors()
        where = ".".join(str(p) for p in errors[0]["loc"]) if errors else "?"
        what = errors[0]["msg"] if errors else str(exc)
        return _fail(f"invalid setting {where}: {what} (check the LOCKGATE_* variables)")
    except (OSError, TimeoutError) as exc:
        return _fail(f"{type(exc).__name__}: {exc}")
    except Exception as exc:  # the last line of defence: one line, not a traceback
        if os.environ.get("LOCKGATE_DEBUG"):
            raise
        return _fail(f"unexpected {type(exc).__name__}: {exc} (LOCKGATE_DEBUG=1 shows the traceback)")
