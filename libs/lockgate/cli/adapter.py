"""``lockgate adapter serve | scaffold``: typed Python functions as capabilities (``lockgate.adapters.serve``).

It serves or writes files; it does not look for a running system first.
"""

from __future__ import annotations

from lockgate.adapters import serve as adapter_cli
from lockgate.cli.group import CommandGroup, Subparsers, add_globals


def _register(sub: Subparsers) -> None:
    adapter_cli.add_command(sub, add_globals)


ADAPTER = CommandGroup("adapter", _register, adapter_cli.run)
