"""The benchmark's fairness scenario runs: a flooding tenant beside a steady one, every candidate answered.

Only the harness is checked (nothing timed): a short flood against the real system and
the demo bundle's limits, counted by outcome.
"""

from __future__ import annotations

from bench.fairness import FairnessPlan, run_fairness
from lockgate.core.ids import random_id
from lockgate.testing.system import System
from lockgate.worlds.casenotes.world import World

PLAN = FairnessPlan(steady_per_s=4, steady_s=1, flood_per_s=60, flood_s=1, op_timeout_s=60)


async def test_the_fairness_scenario_answers_every_candidate(system: System, world: World) -> None:
    writes = len(world.ledger())
    fairness = await run_fairness(system, random_id()[:8], PLAN)
    assert (fairness.idle.offered, fairness.busy.offered, fairness.flood.offered) == (4, 4, 60)
    assert fairness.idle.ok == fairness.busy.ok == 4  # the steady tenant is served
    assert fairness.answered == 60
    assert set(fairness.flood.outcomes) <= {"ok", "denied:rate.limited"}
    figures = fairness.figures()
    assert figures["flood_answered"] == 60 and figures["steady_p99_ratio"] is not None
    executed = fairness.idle.ok + fairness.busy.ok + fairness.flood.ok
    assert len(world.ledger()) - writes == executed
