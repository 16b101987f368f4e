"""``lockgate mcp servers | snapshot | diff | quarantine | map``: operators and the MCP adapter.

Every command is a request to the MCP adapter on ``lg.mcp.op.<verb>.<operator>``, sent
as the operator's own NATS user: the broker lets only that user publish a subject ending
in its name, so the adapter records the authenticated operator as the reviewer, and only
the adapter's user can write the records on ``LG_MCP`` (``lockgate.operations.roles``).
Answers are JSON (printed as one document with ``--json``, as ``key  value`` blocks and
tables for a person); remote text in them (descriptions) is the servers' and untrusted, and
is cleaned before a person reads it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from lockgate.contracts import mcp_subjects as subjects
from lockgate.core.errors import LockgateError
from lockgate.mcp.config import ConfigError, read_structured

if TYPE_CHECKING:
    from lockgate.client.output import Output
    from lockgate.client.sdk import Gateway

#: How long a command waits for the adapter's answer.
TIMEOUT_S = 10.0


class Where(Protocol):
    """What the ``lockgate`` CLI knows of the running system that these commands use (``lockgate.cli.where.Where``)."""

    def person(self, kind: str, chosen: str | None) -> str:
        """The reviewer or operator to act as: ``--as``, else the only or first one configured."""

    async def gateway(self, user: str, *, host: bool = False, principal: str = "") -> Gateway:
        """A connection as ``user``."""


class McpCommandError(LockgateError):
    """The adapter refused the request, or did not answer."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}" if detail else code, code=code)


def add_commands(subparsers: Any, globals_: Callable[[argparse.ArgumentParser], None]) -> Any:
    """Add ``mcp`` and its commands to the ``lockgate`` parser's subcommands.

    ``globals_`` adds the options every command takes (``--url``, ``--var-dir``, ``--json``).

    Returns:
        The ``mcp`` command's subcommands (an ``add_subparsers()`` result), where the command
        line adds the commands that are not requests to the adapter.
    """
    mcp = subparsers.add_parser("mcp", help="MCP servers: identities, snapshots, quarantine, mappings")
    verbs = mcp.add_subparsers(dest="mcp_command", required=True)

    def verb(name: str, help_: str) -> argparse.ArgumentParser:
        c: argparse.ArgumentParser = verbs.add_parser(name, help=help_)
        globals_(c)
        c.add_argument("--as", dest="as_", metavar="NAME", default=None,
                       help="the operator to act as (default: the first one configured)")
        return c

    verb("servers", "every configured server: identity, snapshot, mappings, quarantine")
    snap = verb("snapshot", "a server's latest discovery snapshot (or --seq N)")
    snap.add_argument("server")
    snap.add_argument("--seq", type=int, default=None)
    d = verb("diff", "per tool, what changed between two snapshots (default: mapped vs latest)")
    d.add_argument("server")
    d.add_argument("--from", dest="from_", type=int, default=None, metavar="SEQ")
    d.add_argument("--to", type=int, default=None, metavar="SEQ")
    q = verb("quarantine", "tools no current mapping covers (new or changed)")
    q.add_argument("server", nargs="?", default=None)
    m = verb("map", "review a tool: write its mapping from a file, or --disable it")
    m.add_argument("server")
    m.add_argument("tool")
    how = m.add_mutually_exclusive_group(required=True)
    how.add_argument("--file", type=Path, help="the mapping, YAML or JSON")
    how.add_argument("--disable", action="store_true", help="disable every mapping of the tool")
    return verbs


def request_body(args: argparse.Namespace) -> dict[str, Any]:
    """The request a parsed command sends.

    Raises:
        ConfigError: the mapping file cannot be read.
    """
    command = args.mcp_command
    if command == "servers":
        return {}
    if command == "snapshot":
        return {"server": args.server, **({"seq": args.seq} if args.seq is not None else {})}
    if command == "diff":
        return {"server": args.server, "from": args.from_, "to": args.to}
    if command == "quarantine":
        return {"server": args.server} if args.server else {}
    if args.disable:
        return {"server": args.server, "tool": args.tool, "disable": True}
    mapping = read_structured(args.file)
    if not isinstance(mapping, dict):
        raise ConfigError(f"{args.file}: a mapping is an object")
    return {"server": args.server, "tool": args.tool, "mapping": mapping}


async def ask(where: Where, args: argparse.Namespace) -> dict[str, Any]:
    """Send the command to the adapter as the operator; its answer.

    Raises:
        McpCommandError: the adapter refused, or no adapter answered.
    """
    person = where.person("operator", getattr(args, "as_", None))
    gw = await where.gateway(f"operator-{person}", principal=person)
    try:
        reply = await gw.nc.request(subjects.op(args.mcp_command, gw.principal),
                                    json.dumps(request_body(args)).encode(), timeout=TIMEOUT_S)
    except (NatsTimeout, NoRespondersError):
        raise McpCommandError("mcp.unavailable", "the MCP adapter did not answer") from None
    finally:
        await gw.close()
    answer = json.loads(reply.data)
    if not isinstance(answer, dict):
        raise McpCommandError("mcp.malformed", "the adapter's answer is not an object")
    if "error" in answer:
        raise McpCommandError(str(answer["error"]), str(answer.get("detail", "")))
    return answer


def run(args: argparse.Namespace, where: Where, out: Output) -> int:
    """Run one ``lockgate mcp`` request to the adapter; print its answer (one JSON document with ``--json``)."""
    answer = asyncio.run(ask(where, args))
    out.record(dict(sorted(answer.items())))
    return 0
