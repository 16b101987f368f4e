"""``lockgate mcp conformance``: run the conformance suite against one MCP server.

Exit status: 0 when no property is violated, 1 when one is, 2 when the suite could not run.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from lockgate.mcpcheck.probe import PROBES, load_probe
from lockgate.mcpcheck.report import Verdict, render_table

if TYPE_CHECKING:
    from lockgate.client.output import Output
    from lockgate.mcpcheck.suite import Target


def add_arguments(p: argparse.ArgumentParser, *, json_default: object = False) -> None:
    """The command's arguments, on a parser the caller made.

    Under ``lockgate`` the ``--json`` given before the command stands: ``json_default``
    is then ``argparse.SUPPRESS``, so this parser's default does not overwrite it.
    """
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--stdio", metavar="COMMAND",
                        help='a command that serves MCP on stdin/stdout (one string, shell-quoted)')
    target.add_argument("--url", help="a streamable-HTTP MCP endpoint")
    p.add_argument("--probe", required=True, metavar="p|q|FILE",
                   help=f"a ready-made probe ({', '.join(PROBES)}) or a JSON probe file")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds per request")
    p.add_argument("--json", action="store_true", default=json_default,
                   help="the report as one JSON document instead of a table")


def add_command(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``conformance`` to ``subparsers`` (an ``add_subparsers()`` result); return its parser.

    The parser's ``handler`` default is :func:`command`.
    """
    p: argparse.ArgumentParser = subparsers.add_parser(
        "conformance", help="probe an MCP server for what matters when an effect must happen once")
    add_arguments(p, json_default=argparse.SUPPRESS)
    p.set_defaults(handler=command)
    return p


def target_of(args: argparse.Namespace) -> Target:
    """The target the arguments name."""
    from lockgate.mcpcheck.suite import HttpTarget, StdioTarget

    if args.url:
        return HttpTarget(url=args.url)
    return StdioTarget(command=tuple(shlex.split(args.stdio)))


def command(args: argparse.Namespace, out: Output | None = None) -> int:
    """Run the suite as the arguments say, print the report; the exit status says its verdict."""
    from lockgate.client.output import Output

    out = out or Output(json=bool(getattr(args, "json", False)))
    try:
        probe = load_probe(args.probe)
    except (OSError, msgspec.ValidationError, msgspec.DecodeError) as exc:
        print(f"mcpcheck: cannot read the probe {args.probe!r}: {exc}", file=sys.stderr)
        return 2
    try:
        from lockgate.mcpcheck.suite import StdioTarget, run_suite
    except ImportError as exc:
        print(f"mcpcheck: the MCP SDK is not installed ({exc}): pip install 'lockgate[mcp]'",
              file=sys.stderr)
        return 2
    target = target_of(args)
    if isinstance(target, StdioTarget) and not target.command:
        print("mcpcheck: --stdio needs a command", file=sys.stderr)
        return 2
    try:
        report = anyio.run(lambda: run_suite(target, probe, timeout_s=args.timeout))
    except Exception as exc:  # connection failures of every transport: one line, not a traceback
        print(f"mcpcheck: could not run the suite: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    out.record(msgspec.to_builtins(report), text=render_table(report))
    return 1 if any(f.verdict == Verdict.VIOLATED for f in report.findings) else 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m lockgate.mcpcheck (--stdio CMD | --url URL) --probe p|q|FILE [--json]``."""
    p = argparse.ArgumentParser(prog="python -m lockgate.mcpcheck", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    return command(p.parse_args(argv))
