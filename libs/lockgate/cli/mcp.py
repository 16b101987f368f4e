"""``lockgate mcp …``: operators and the MCP adapter; its commands are in ``lockgate.mcp.cli``."""

from __future__ import annotations

import argparse

from lockgate.cli.group import CommandGroup, Subparsers, add_globals
from lockgate.cli.where import locate
from lockgate.client.output import Output
from lockgate.mcp import cli as mcp_cli


def _register(sub: Subparsers) -> None:
    mcp_cli.add_commands(sub, add_globals)


def _mcp(args: argparse.Namespace, out: Output) -> int:
    return mcp_cli.run(args, locate(args), out)


MCP = CommandGroup("mcp", _register, _mcp)
