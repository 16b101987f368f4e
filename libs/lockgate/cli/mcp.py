"""``lockgate mcp …``: operators and the MCP adapter (``lockgate.mcp.cli``), and the conformance
suite any MCP server can be run against (``lockgate mcp conformance``, ``lockgate.mcpcheck.cli``)."""

from __future__ import annotations

import argparse

from lockgate.cli.group import CommandGroup, Subparsers, add_globals
from lockgate.cli.where import locate
from lockgate.client.output import Output
from lockgate.mcp import cli as mcp_cli
from lockgate.mcpcheck import cli as mcpcheck_cli

#: The ``mcp`` command that talks to an MCP server rather than to Lockgate.
CONFORMANCE = "conformance"


def _register(sub: Subparsers) -> None:
    verbs = mcp_cli.add_commands(sub, add_globals)
    # What a server does when an effect must happen once: the suite, not a request to the adapter.
    mcpcheck_cli.add_command(verbs)


def _mcp(args: argparse.Namespace, out: Output) -> int:
    if args.mcp_command == CONFORMANCE:
        return mcpcheck_cli.command(args, out)
    return mcp_cli.run(args, locate(args), out)


MCP = CommandGroup("mcp", _register, _mcp)
