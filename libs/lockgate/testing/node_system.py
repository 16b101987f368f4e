"""The whole system for tests written in another language, and a few questions they ask of it.

``python -m lockgate.testing.node_system`` starts ``System`` (nats-server, the services and
the case-notes adapter, each its own process) under a temporary directory, writes one JSON
line on stdout once every process is ready::

    {"url": "nats://127.0.0.1:…", "var_dir": "…", "world_dir": "…"}

and then answers one JSON command a line on stdin with one JSON line on stdout, so a test
can check the world from outside the client it tests:

- ``{"op": "ledger"}``: ``{"ledger": [...]}``, the case-notes world's writes, oldest first.
- ``{"op": "review", "verb": "approve"|"deny"|"edit", "candidate": …, "tenant": …}``:
  decided through ``lockgate review``, as a reviewer would, asked again until it succeeds
  for up to ``within_s`` (30 by default); ``args``, a list of strings, are passed to the
  command (``["--why", "not now"]``; an edit's new argument text as the command takes it,
  ``["--arguments", '{"note": "…"}']``). ``{"output": "…"}``.
- ``{"op": "events", "tenant": …, "intent": …}``: ``{"events": [...]}``, the type names of
  the intent's stored events (none for an intent never recorded).
- ``{"op": "violations", "account": …}``: ``{"violations": [...]}``, the broker's
  permission-violation lines for users of that account so far (``EDGE``: hosts, agent
  runtimes, reviewers).

A command that fails answers ``{"error": "…"}``. The system stops, every process with it,
when stdin ends or on SIGTERM or SIGINT.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

from lockgate.testing.frameworks import review
from lockgate.testing.system import System
from lockgate.worlds.casenotes.world import World

#: The verbs ``{"op": "review"}`` takes (those of ``lockgate review``).
REVIEW_VERBS = ("approve", "deny", "edit")


class CommandError(Exception):
    """A command the harness cannot answer (unknown, or missing a field)."""


def _field(command: dict[str, Any], name: str) -> str:
    value = command.get(name)
    if not isinstance(value, str) or not value:
        raise CommandError(f"{command.get('op')!r} needs {name!r} (a string)")
    return value


async def _events(system: System, tenant: str, intent_id: str) -> list[str]:
    nc = await system.connect()
    try:
        stored = await system.store(nc).load(tenant, intent_id)
    finally:
        await nc.close()
    return [event.event_type for event in stored.events]


async def answer(system: System, command: dict[str, Any]) -> dict[str, Any]:
    """The answer to one command.

    Raises:
        CommandError: an unknown ``op``, or a field missing.
    """
    op = command.get("op")
    if op == "ledger":
        return {"ledger": World(system.world_dir).ledger()}
    if op == "review":
        verb = _field(command, "verb")
        if verb not in REVIEW_VERBS:
            raise CommandError(f"review verb {verb!r} is not one of {REVIEW_VERBS}")
        extra = command.get("args", [])
        within_s = command.get("within_s", 30.0)
        if not isinstance(extra, list) or not all(isinstance(a, str) for a in extra):
            raise CommandError("review 'args' is a list of strings")
        if not isinstance(within_s, int | float):
            raise CommandError("review 'within_s' is a number")
        if verb == "edit" and "--arguments" not in extra:
            # Refused now: the command would fail on its usage every time it is asked again.
            raise CommandError("review 'edit' needs the new argument text in 'args' (--arguments <text>)")
        output = await review(system, verb, _field(command, "candidate"), *extra,
                              tenant=command.get("tenant") or "tenant-a", within_s=float(within_s))
        return {"output": output}
    if op == "events":
        return {"events": await _events(system, _field(command, "tenant"), _field(command, "intent"))}
    if op == "violations":
        return {"violations": system.violations(_field(command, "account"))}
    raise CommandError(f"unknown op {op!r}")


async def _serve(system: System, reader: asyncio.StreamReader, stop: asyncio.Event) -> None:
    """Answer commands until stdin ends or ``stop`` is set."""
    stopped = asyncio.ensure_future(stop.wait())
    try:
        while True:
            line = asyncio.ensure_future(reader.readline())
            await asyncio.wait({line, stopped}, return_when=asyncio.FIRST_COMPLETED)
            if not line.done():
                line.cancel()
                return
            data = line.result()
            if not data:
                return  # stdin ended: the test process is done (or gone)
            try:
                command = json.loads(data)
                if not isinstance(command, dict):
                    raise CommandError("a command is a JSON object")
                reply = await answer(system, command)
            except Exception as exc:  # noqa: BLE001 - every failure is the asker's answer, not the harness's end
                reply = {"error": f"{type(exc).__name__}: {exc}"}
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()
    finally:
        stopped.cancel()


async def run(root: Path) -> None:
    """Start the system under ``root``, say where it is, answer commands, stop it."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    system = System(root)
    try:
        await system.start()
        ready = {"url": system.url, "var_dir": str(system.root), "world_dir": str(system.world_dir)}
        sys.stdout.write(json.dumps(ready) + "\n")
        sys.stdout.flush()
        await _serve(system, reader, stop)
    finally:
        await asyncio.to_thread(system.stop)
    broke = system.violations()
    if broke:
        print(f"services stepped outside their roles: {broke[:5]}", file=sys.stderr)


def main() -> int:
    """Run the harness in a temporary directory removed when it ends."""
    with tempfile.TemporaryDirectory(prefix="lockgate-system-") as tmp:
        asyncio.run(run(Path(tmp)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
