"""What every profile's run shares: progress lines, the bundle it runs on, the checks after.

Moved out of ``bench.cli`` unchanged so that the single-server run and the cluster
profiles (``bench.profiles``) prepare and check their phases with the same code.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Mapping

import yaml

from bench.cpu import CpuMeter
from bench.rawchain import ChainDriver, ChainSpec
from bench.stats import Phase
from lockgate.testing.system import REPO, System
from lockgate.worlds.casenotes.world import World

DEMO_BUNDLE = REPO / "deploy" / "policies" / "bundle.yaml"


def progress(text: str) -> None:
    """A progress line on stderr."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


async def check_raw(driver: ChainDriver, spec: ChainSpec, label: str, phase: Phase,
                    sample: int = 50) -> str:
    """Load a sample of the phase's aggregates and check each holds the whole chain."""
    n = phase.offered
    picks = sorted({round(i * (n - 1) / max(1, sample - 1)) for i in range(min(sample, n))})
    want = spec.event_types()
    bad = [i for i in picks if await driver.stored_types(driver.aggregate_id(label, i)) != want]
    return f"{len(picks) - len(bad)}/{len(picks)} sampled aggregates hold {'+'.join(want)}"


async def reseed(system: System) -> None:
    """Give a Lockgate phase a freshly seeded case world.

    The demo world rewrites one JSON file with every note and reads it whole on every
    call, so its cost grows with the notes already written; reseeding makes each phase
    independent of what ran before it. Nothing is in flight between phases.
    """
    await asyncio.to_thread(World.seed, system.world_dir)


async def ledger_size(system: System) -> int:
    """Notes the case-notes world accepted since it was last seeded."""
    return await asyncio.to_thread(lambda: len(World(system.world_dir).ledger()))


def raised_limits(text: str, factor: int = 100) -> str:
    """The bundle's admission settings with every flood limit raised ``factor``-fold."""
    config = yaml.safe_load(text) or {}
    for limit in config.get("limits", []):
        for name in ("per_s", "burst", "max_in_flight"):
            if limit.get(name) is not None:
                limit[name] = limit[name] * factor
    return yaml.safe_dump(config, sort_keys=False)


async def with_cpu(pids: Mapping[str, int], phase: Phase, work: Awaitable[Phase]) -> Phase:
    """Run ``work`` and put the CPU time the processes ``pids`` spent meanwhile on ``phase``
    (``pids`` is read when the phase starts: add a restarted process before it)."""
    meter = CpuMeter(pids)
    await work
    phase.cpu_s = meter.spent()
    return phase
