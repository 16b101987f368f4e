"""The executor as tests run it when it must die at one exact moment.

The moment: right after the executor appended an event that ended an intent's hold on
its resource, and before the release that follows it in the same handler. Nothing else
runs in between (the kill is synchronous, before the next ``await``), so a test can prove
that the lock is released from the record (by the restarted executor, handed the trigger
again or, for an event that ends a hold elsewhere, by its lock durable) and not only by the
step after the append.

``python -m lockgate.testing.crashpoints`` runs the executor with these variables:

- ``LOCKGATE_CRASH_LOG``: a file; each self-inflicted SIGKILL first appends a line to it
  (``<pid> <capability> <intent id> <event types>``), so a test can count them across
  restarts.
- ``LOCKGATE_CRASH_EVENTS``: comma-separated event types that make the moment (default:
  ``EffectCompleted``).
- ``LOCKGATE_CRASH_TOOLS``: comma-separated capabilities whose intents make it (default:
  any).
- ``LOCKGATE_CRASH_PROBABILITY``: chance of dying at each such moment (default 1).
- ``LOCKGATE_CRASH_LIMIT``: at most this many deaths in all, as counted in the log
  (default 1): then it runs on as the plain executor.
- ``LOCKGATE_CRASH_SEED``: seeds the draws (with the number of deaths so far).

Test-only: production runs ``python -m lockgate.executor``.
"""

from __future__ import annotations

import os
import random
import signal
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from lockgate.executor.app import create_app
from lockgate.executor.handlers import ExecutorHandlers
from lockgate.intent.aggregate import EffectIntent, Event
from lockgate.runtime.entry import run_service


@dataclass
class CrashPlan:
    """When the executor kills itself."""

    log: Path
    events: frozenset[str] = frozenset({"EffectCompleted"})
    tools: frozenset[str] = frozenset()
    probability: float = 1.0
    limit: int = 1
    seed: str = "0"
    _draws: int = field(default=0, init=False)

    def deaths(self) -> int:
        """How many times an executor under this plan died so far."""
        try:
            return len(self.log.read_text().splitlines())
        except FileNotFoundError:
            return 0

    def due(self, intent: EffectIntent, events: Sequence[Event]) -> bool:
        """True when ``events`` make the moment and the plan says this is the time."""
        if not any(type(e).__name__ in self.events for e in events):
            return False
        if self.tools and intent.tool not in self.tools:
            return False
        deaths = self.deaths()
        if deaths >= self.limit:
            return False
        self._draws += 1
        draw = random.Random(f"{self.seed}:{deaths}:{os.getpid()}:{self._draws}").random()
        return draw < self.probability

    def die(self, intent: EffectIntent, events: Sequence[Event]) -> NoReturn:
        """Write the death down, then SIGKILL this process."""
        with open(self.log, "a") as log:
            names = ",".join(type(e).__name__ for e in events)
            log.write(f"{os.getpid()} {intent.tool} {intent.intent_id} {names}\n")
            log.flush()
            os.fsync(log.fileno())
        os.kill(os.getpid(), signal.SIGKILL)
        raise SystemExit(137)  # pragma: no cover - SIGKILL cannot be caught


def install(plan: CrashPlan) -> None:
    """Make every executor in this process die by ``plan`` between an append and its release."""
    release = ExecutorHandlers._release_if_done

    async def release_unless_dead(
        self: ExecutorHandlers, intent: EffectIntent, events: Sequence[Event], *, sweep: bool = False
    ) -> None:
        if plan.due(intent, events):
            plan.die(intent, events)
        await release(self, intent, events, sweep=sweep)

    ExecutorHandlers._release_if_done = release_unless_dead  # type: ignore[method-assign]


def plan_from_environment() -> CrashPlan:
    """The plan ``LOCKGATE_CRASH_*`` describes (see the module docstring)."""
    env = os.environ
    return CrashPlan(
        log=Path(env["LOCKGATE_CRASH_LOG"]),
        events=frozenset(t for t in env.get("LOCKGATE_CRASH_EVENTS", "EffectCompleted").split(",") if t),
        tools=frozenset(t for t in env.get("LOCKGATE_CRASH_TOOLS", "").split(",") if t),
        probability=float(env.get("LOCKGATE_CRASH_PROBABILITY", "1")),
        limit=int(env.get("LOCKGATE_CRASH_LIMIT", "1")),
        seed=env.get("LOCKGATE_CRASH_SEED", "0"),
    )


def main() -> None:
    """Run the executor under the environment's crash plan."""
    install(plan_from_environment())
    run_service(create_app, "executor")


if __name__ == "__main__":
    main()
