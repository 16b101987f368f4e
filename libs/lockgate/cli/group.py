"""What a ``lockgate`` command group is, and the options every command takes.

A group is one top-level command (``review``, ``world``, ``mcp``) with its subcommands:
it adds its parser(s) to the ``lockgate`` parser and runs what was parsed. A group's
module declares both together; :mod:`lockgate.cli.app` lists every group once and
dispatches by name.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

from lockgate.client.output import Output
from lockgate.core.errors import LockgateError

#: What ``add_subparsers()`` returns: where a group adds its command.
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


class UsageError(LockgateError):
    """A command that cannot run as asked (one line says why)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="cli.usage")


@dataclass(frozen=True)
class CommandGroup:
    """A command the ``lockgate`` parser parses: its name, its parser(s), and what runs it."""

    #: The word a person types, as ``register`` adds it.
    name: str
    #: Adds the command (and its subcommands) to the ``lockgate`` parser's subcommands.
    register: Callable[[Subparsers], None]
    #: Runs a parsed command; returns the exit code, raises for the one-line error.
    run: Callable[[argparse.Namespace, Output], int]


@dataclass(frozen=True)
class OwnArguments:
    """A command that parses its own arguments: the ``lockgate`` parser only lists it."""

    name: str
    register: Callable[[Subparsers], None]
    #: Runs on the words after the command's name (``--json`` given before it appended).
    main: Callable[[list[str]], int]


def add_globals(p: argparse.ArgumentParser, *, top: bool = False) -> None:
    """``--url``, ``--var-dir`` and ``--json``, accepted before the command and after it."""
    default = None if top else argparse.SUPPRESS
    p.add_argument("--url", default=default,
                   help="NATS URL (default: LOCKGATE_NATS_URL, else the one `lockgate run` chose)")
    p.add_argument("--var-dir", type=Path, default=default,
                   help="the deployment's var directory (default: LOCKGATE_VAR_DIR, else the checkout's var/)")
    json_flag(p, top=top)


def json_flag(p: argparse.ArgumentParser, *, top: bool = False) -> None:
    """``--json``: machine output only (one JSON document, or JSON Lines for rows).

    Given on a subcommand's parser with ``top`` false, it does not reset what was given
    before the subcommand (argparse would write a subparser's default over it).
    """
    p.add_argument("--json", action="store_true", default=False if top else argparse.SUPPRESS,
                   help="machine output: one JSON document, or JSON Lines for rows; "
                        "nothing else on stdout")


def add_as(p: argparse.ArgumentParser, kind: str) -> None:
    """``--as NAME``: the reviewer or operator the command acts as."""
    p.add_argument("--as", dest="as_", metavar="NAME", default=None,
                   help=f"the {kind} to act as (default: the first one configured)")


def command(sub: Subparsers, name: str, help_: str) -> argparse.ArgumentParser:
    """A command's parser (``review`` or ``review list``), taking the global options after its name too."""
    c = sub.add_parser(name, help=help_)
    add_globals(c)
    return c
