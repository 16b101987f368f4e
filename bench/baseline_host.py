"""Runs inside a baseline build's interpreter: starts that build's system with that build's code.

``bench.baseline`` runs this file (not the module: ``bench`` on the path would be the
baseline's) in an interpreter isolated to the baseline's tree (``bench.baseline_site``), so
``lockgate.testing.system`` below is the baseline's own: its supervisor's helpers, its
topology, its service list, its users. It starts the system as the benchmark starts the
current build's, answers with where it listens and who may connect, then obeys one JSON
command a line on stdin (``reseed``, ``ledger``, ``kill``, ``restart``, ``stop``), one JSON
answer a line on stdout. The system is stopped on ``stop``, at the end of stdin (the
benchmark is gone) and on any error. Nothing here imports ``bench``.

Usage: ``python baseline_host.py ROOT BUNDLE_YAML MONITOR_PORT``.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import sys
from pathlib import Path

import msgspec

from lockgate.testing.system import System, bundle_copy
from lockgate.worlds.casenotes.world import World

#: The users the benchmark's drivers connect as.
USERS = ("admin", "agent-tenant-a", "host")


def answer(**fields: object) -> None:
    """One JSON line to the benchmark."""
    print(json.dumps(fields), flush=True)


def pids(system: System) -> dict[str, int]:
    """Every process of the system by name, the broker included."""
    found = {name: proc.pid for name, proc in system.processes.items()}
    if system.server is not None and system.server.process is not None:
        found["nats-server"] = system.server.process.pid
    return found


async def obey(system: System, command: dict[str, str]) -> dict[str, object]:
    """Carry out one command; its answer's fields."""
    match command.get("do"):
        case "reseed":
            await asyncio.to_thread(World.seed, system.world_dir)
            return {}
        case "ledger":
            return {"notes": len(World(system.world_dir).ledger())}
        case "kill":
            system.kill(command["name"])
            return {}
        case "restart":
            await system.restart(command["name"])
            return {"pids": pids(system)}
        case other:
            raise ValueError(f"unknown command {other!r}")


async def serve(root: Path, bundle_yaml: str, monitor_port: int) -> None:
    """Start the system, answer where it is, obey commands until ``stop`` or the end of stdin."""
    policies = bundle_copy(root, bundle_yaml)
    system = System(root, extra_env={"LOCKGATE_POLICY_DIR": str(policies)}, monitor_port=monitor_port)
    try:
        await system.start(timeout_s=90)
        answer(ok=True, url=system.url, pids=pids(system), world_dir=str(system.world_dir),
               system_module=inspect.getfile(System),
               credentials={u: msgspec.structs.asdict(system.credentials(u)) for u in USERS})
        while line := await asyncio.to_thread(sys.stdin.readline):
            command = json.loads(line)
            if command.get("do") == "stop":
                break
            try:
                answer(ok=True, **await obey(system, command))
            except Exception as exc:  # noqa: BLE001 - the benchmark reads the error and stops
                answer(ok=False, error=f"{type(exc).__name__}: {exc}")
    finally:
        await asyncio.to_thread(system.stop)
    answer(ok=True, stopped=True)


def main(argv: list[str]) -> int:
    """Serve until told to stop; 1 (after an error answer) when the system did not start."""
    root, bundle, port = Path(argv[1]), Path(argv[2]), int(argv[3])
    try:
        asyncio.run(serve(root, bundle.read_text(), port))
    except Exception as exc:  # noqa: BLE001 - said to the benchmark, which stops the run
        answer(ok=False, error=f"{type(exc).__name__}: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
