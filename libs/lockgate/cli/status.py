"""``lockgate status``: exit 0 only when every service and adapter answers and makes progress."""

from __future__ import annotations

import argparse
import asyncio

from lockgate.cli.group import CommandGroup, Subparsers, add_as, command
from lockgate.cli.where import locate
from lockgate.client.output import Output
from lockgate.operations.deployment import read_run_info


def _register(sub: Subparsers) -> None:
    add_as(command(sub, "status",
                   "exit 0 only when every service and adapter answers and makes progress"),
           "operator")


def _status(args: argparse.Namespace, out: Output) -> int:
    from lockgate.operations.commands import cmd_status

    where = locate(args)
    person = where.person("operator", getattr(args, "as_", None))
    return asyncio.run(cmd_status(where.url, where.credentials(f"operator-{person}"),
                                  read_run_info(where.var_dir), output=out))


STATUS = CommandGroup("status", _register, _status)
