"""What the suite needs to know to tell whether an effect happened: the probe description.

MCP says nothing about how to look an effect up, so the suite is told, per server: which
tool creates, which argument carries the client's key (or reference), which tool queries by
it and how to read its answer. Keys are generated per run, so the suite can run again
against the same server without meeting its own earlier effects.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec


class Probe(msgspec.Struct, frozen=True, kw_only=True):
    """How to create an effect under a client key, and how to look it up by that key."""

    #: A name for the report.
    name: str
    #: The tool whose call has the effect.
    create_tool: str
    #: The ``create_tool`` argument that carries the client's key or reference.
    key_argument: str
    #: The tool that looks effects up by the key; empty when the server has none.
    query_tool: str = ""
    #: The ``query_tool`` argument that carries the key.
    query_key_argument: str = ""
    #: ``create_tool``'s other arguments (the suite adds the key).
    arguments: dict[str, Any] = msgspec.field(default_factory=dict)
    #: Overrides that make a *different* call under the same key (changed-arguments probe).
    changed_arguments: dict[str, Any] = msgspec.field(default_factory=dict)
    #: The field of the create result's structured content naming the effect.
    id_field: str = "item_id"
    #: The query result's field saying whether anything was found (a boolean).
    found_field: str = "found"
    #: The query result's field counting the effects under the key; empty when it has none.
    count_field: str = "count"
    #: How long the cancel probe lets a call run before it cancels it.
    cancel_after_s: float = 0.5
    #: How long the suite polls the query for an effect that is not visible at once.
    visibility_wait_s: float = 3.0


#: Server P of the fixture servers: idempotent private drafts by ``client_key``.
P_PROBE = Probe(
    name="p",
    create_tool="create_item",
    key_argument="client_key",
    query_tool="get_item",
    query_key_argument="client_key",
    arguments={"title": "mcpcheck probe", "body": "created by the conformance suite"},
    changed_arguments={"body": "a different body under the same key"},
)

#: Server Q of the fixture servers: publishes and notifies, queryable by ``client_ref``.
Q_PROBE = Probe(
    name="q",
    create_tool="create_item",
    key_argument="client_ref",
    query_tool="find_item",
    query_key_argument="client_ref",
    arguments={"title": "mcpcheck probe", "body": "created by the conformance suite",
               "notify": False},
    changed_arguments={"body": "a different body under the same reference"},
)

#: The ready-made probes, by name.
PROBES: dict[str, Probe] = {"p": P_PROBE, "q": Q_PROBE}


def load_probe(spec: str) -> Probe:
    """A ready-made probe by name (``p``, ``q``), or one read from a JSON file.

    Raises:
        FileNotFoundError: ``spec`` is neither a known name nor a file.
        msgspec.ValidationError: the file does not describe a probe.
    """
    if spec in PROBES:
        return PROBES[spec]
    return msgspec.json.decode(Path(spec).read_bytes(), type=Probe)
