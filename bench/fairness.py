"""Fairness: a steady tenant's latency beside a tenant flooding Lockgate, in one run.

The steady tenant (``tenant-a``, one run per load case, as the other phases) proposes
at a low fixed rate, first alone (its idle figures), then while another tenant
(``tenant-b``: ``user-77`` on ``case-999``, the only case it has) proposes at a high
fixed rate. Both are open loops, so a queue in front of Lockgate is charged to it.
Everything is bounded: a fixed number of arrivals, each operation by a timeout, and the
broker is the local one the bench started (loopback only).

What it shows: the steady tenant's p50/p99 during the flood against its own idle
p50/p99 measured minutes earlier on the same machine, and how many flood candidates
were *answered* (any model-facing response: executed, or denied by a flood limit) as
opposed to left without an answer. The demo bundle's limits are what is measured.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections import Counter
from dataclasses import dataclass, field

import lockgate.client
from bench import load
from bench.gateway import Proposer
from bench.load import Fire
from bench.stats import Phase
from lockgate.client.sdk import ClientError, Gateway, Turn
from lockgate.runtime.credentials import Credentials
from lockgate.testing.system import System

FLOOD_TENANT, FLOOD_ACTOR, FLOOD_CASE = "tenant-b", "user-77", "case-999"
TOOL = "case.add_note"


@dataclass(frozen=True)
class FairnessPlan:
    """How much each side offers, and for how long."""

    steady_per_s: float = 5.0
    steady_s: float = 10.0
    flood_per_s: float = 200.0
    flood_s: float = 10.0
    op_timeout_s: float = 30.0


QUICK_FAIRNESS = FairnessPlan(steady_per_s=5.0, steady_s=2.0, flood_per_s=50.0, flood_s=1.0,
                              op_timeout_s=20.0)


@dataclass
class Flooder:
    """One run of the flooding tenant; every proposal a call of its own."""

    url: str
    nonce: str
    gw: Gateway | None = None
    turn: Turn | None = None
    answers: Counter[str] = field(default_factory=Counter)
    #: The flooding tenant's agent runtime and the trusted host (None without users).
    credentials: Credentials | None = None
    host: Credentials | None = None

    async def start(self) -> None:
        """Connect and open the flooding run's turn."""
        self.gw = await lockgate.client.connect(self.url, credentials=self.credentials,
                                                host=self.host, timeout_s=10.0)
        run = await self.gw.open_run(tenant=FLOOD_TENANT, actor=FLOOD_ACTOR,
                                     context={"case_id": FLOOD_CASE})
        self.turn = await run.open_turn()

    def fire(self, op_timeout_s: float) -> Fire:
        """Propose flood note ``i``; the outcome is the answer's status and code."""

        async def propose(i: int) -> str:
            assert self.turn is not None
            try:
                r = await self.turn.propose(tool=TOOL, arguments=json.dumps({"note": f"flood {i}"}),
                                            call_id=f"{self.nonce}-flood-{i}", timeout_s=op_timeout_s)
            except ClientError as exc:
                return f"error:{exc.code}"
            return "ok" if r.status == "executed" else f"{r.status}:{r.code}"

        return propose

    async def stop(self) -> None:
        """Close the connection."""
        if self.gw is not None:
            await self.gw.close()


@dataclass
class Fairness:
    """The three phases: the steady tenant idle, the steady tenant during the flood, the flood."""

    idle: Phase
    busy: Phase
    flood: Phase

    @property
    def answered(self) -> int:
        """Flood candidates that got a model-facing answer of any kind."""
        unanswered = sum(n for k, n in self.flood.outcomes.items()
                         if k in ("timeout", "unfinished") or k.startswith("error:"))
        return self.flood.offered - unanswered

    def figures(self) -> dict[str, float | int | None]:
        """The JSON figures of the scenario."""

        def num(x: float) -> float | None:
            return None if math.isnan(x) else round(x, 2)

        idle99, busy99 = self.idle.latency_ms(0.99), self.busy.latency_ms(0.99)
        return {
            "steady_idle_p50_ms": num(self.idle.latency_ms(0.5)),
            "steady_idle_p99_ms": num(idle99),
            "steady_flood_p50_ms": num(self.busy.latency_ms(0.5)),
            "steady_flood_p99_ms": num(busy99),
            "steady_p99_ratio": num(busy99 / idle99 if idle99 else math.nan),
            "flood_offered": self.flood.offered,
            "flood_answered": self.answered,
            "flood_executed": self.flood.ok,
            "flood_rate_limited": self.flood.outcomes.get("denied:rate.limited", 0),
        }


async def run_fairness(system: System, nonce: str, plan: FairnessPlan) -> Fairness:
    """Measure the steady tenant idle, then beside the flood (each tenant as its own user)."""
    host = system.credentials("host")
    steady = Proposer(system.url, f"{nonce}-steady", runs=16,
                      credentials=system.credentials("agent-tenant-a"), host=host)
    flooder = Flooder(system.url, nonce, credentials=system.credentials(f"agent-{FLOOD_TENANT}"),
                      host=host)
    await steady.start()
    await flooder.start()
    try:
        idle = await load.open_loop(Phase("steady tenant", "idle"), steady.fire("idle", plan.op_timeout_s),
                                    rate_per_s=plan.steady_per_s, duration_s=plan.steady_s,
                                    op_timeout_s=plan.op_timeout_s)
        busy = Phase("steady tenant", f"beside {plan.flood_per_s:g}/s flood")
        flood = Phase("flood tenant", f"open {plan.flood_per_s:g}/s x {plan.flood_s:g}s")
        # The steady arrivals span the flood's; they start together.
        await asyncio.gather(
            load.open_loop(busy, steady.fire("busy", plan.op_timeout_s), rate_per_s=plan.steady_per_s,
                           duration_s=plan.flood_s, op_timeout_s=plan.op_timeout_s),
            load.open_loop(flood, flooder.fire(plan.op_timeout_s), rate_per_s=plan.flood_per_s,
                           duration_s=plan.flood_s, op_timeout_s=plan.op_timeout_s),
        )
        return Fairness(idle, busy, flood)
    finally:
        await flooder.stop()
        await steady.stop()
