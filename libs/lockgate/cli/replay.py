"""``lockgate replay``: replay recorded candidates (``lockgate.replay.cli``), reading the views as the replay role."""

from __future__ import annotations

import argparse

from lockgate.cli.group import CommandGroup, Subparsers, add_globals
from lockgate.cli.where import locate, views
from lockgate.client.output import Output
from lockgate.operations import roles
from lockgate.replay import cli as replay_cli


def _register(sub: Subparsers) -> None:
    replay_cli.add_command(sub, add_globals)


def _replay(args: argparse.Namespace, out: Output) -> int:
    where = locate(args)
    return replay_cli.run(args, where, out, lambda: views(where, args, out, user=roles.REPLAY))


REPLAY = CommandGroup("replay", _register, _replay)
