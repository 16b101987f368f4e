"""The ``lockgate`` command: one module per command group, listed once in :mod:`lockgate.cli.app`.

Where a new command goes: a module here that declares its group (a
:class:`~lockgate.cli.group.CommandGroup`: its name, the function that adds its parser(s)
and the one that runs what was parsed), and one line in ``app.GROUPS`` (the order
``lockgate --help`` lists them). The options every command takes and the typed usage
error are in :mod:`lockgate.cli.group`; finding the running system and connecting as the
role a command needs is :mod:`lockgate.cli.where`. Every command answers through the
:class:`~lockgate.client.output.Output` it is handed.
"""

from lockgate.cli.app import main

__all__ = ["main"]
