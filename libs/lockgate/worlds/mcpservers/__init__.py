"""Two fixture MCP servers with one ``create_item`` schema and different consequences.

``p`` keeps idempotent private drafts keyed by ``client_key``; ``q`` publishes and notifies
subscribers on every call, queryable by ``client_ref``. Each runs as a real process
(``python -m lockgate.worlds.mcpservers {p|q} --stdio|--http --state DIR``), keeps its state
and a ledger of every call in SQLite under ``DIR``, and reads the faults a test armed with
:func:`arm` at every request.
"""

from lockgate.worlds.mcpservers.process import HttpServerProcess, stdio_command
from lockgate.worlds.mcpservers.state import (
    FAULTS,
    INJECTED_DESCRIPTION,
    LISTING_FAULTS,
    ONE_SHOT_FAULTS,
    REASONS,
    SERVERS,
    SUBSCRIBERS,
    FixtureError,
    KeyConflict,
    State,
    UnknownFault,
    arm,
    armed,
    disarm,
    read_port,
)

__all__ = [
    "FAULTS",
    "INJECTED_DESCRIPTION",
    "LISTING_FAULTS",
    "ONE_SHOT_FAULTS",
    "REASONS",
    "SERVERS",
    "SUBSCRIBERS",
    "FixtureError",
    "HttpServerProcess",
    "KeyConflict",
    "State",
    "UnknownFault",
    "arm",
    "armed",
    "disarm",
    "read_port",
    "stdio_command",
]
