"""Closed loops of several systems taken in turns, so that the host's drift falls on all of them.

On a shared virtual machine the same closed loop runs a fifth faster or slower from one
minute to the next (the same build's Lockgate closed loop measured 13.2 to 18.7 ms of CPU
per candidate in six runs of one afternoon, every process alike), so one system's phase
and the next system's are not measured on the same machine. Here each system's closed
loop is cut into slices of a few seconds, taken in turn (the order alternating from round
to round), and a ratio is taken within each round, between slices seconds apart; the
figure reported is the median of the rounds'.

A slice's rate counts the operations that complete between its settling time and its end:
neither the ramp at its start nor the drain after it (an operation still running at the
end is waited for, and counted in the phase, not in the rate) biases a system whose
operations take longer.
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from bench.cpu import CpuMeter
from bench.load import Fire, attempt, run_workers
from bench.stats import Phase


@dataclass
class Slices:
    """Each system's steady rate in every round (operations per second)."""

    rates: dict[str, list[float]] = field(default_factory=dict)

    def median(self, system: str) -> float:
        """The system's median slice rate."""
        return statistics.median(self.rates[system])

    def ratios(self, system: str, baseline: str) -> list[float]:
        """``system`` over ``baseline``, round by round."""
        return [s / b if b else float("nan")
                for s, b in zip(self.rates[system], self.rates[baseline], strict=True)]

    def ratio(self, system: str, baseline: str) -> float:
        """The median of the rounds' ratios."""
        return statistics.median(self.ratios(system, baseline))


async def steady(
    phase: Phase, fire: Fire, *, concurrency: int, duration_s: float, settle_s: float,
    op_timeout_s: float, first: int = 0,
) -> float:
    """One slice: ``concurrency`` workers, each one operation after another, for ``duration_s``.

    Returns the completions per second between ``settle_s`` and ``duration_s``. Every
    outcome and latency goes to ``phase``, whose ``elapsed_s`` grows by the slice's whole
    length, the drain included (what the CPU was spent over).
    """
    loop = asyncio.get_running_loop()
    numbers = itertools.count(first)
    start = loop.time()
    window_from, stop_at = start + settle_s, start + duration_s
    in_window = 0

    async def worker() -> None:
        nonlocal in_window
        while loop.time() < stop_at:
            outcome, ended = await attempt(phase, fire, next(numbers), op_timeout_s)
            if outcome == "ok" and window_from <= ended <= stop_at:
                in_window += 1

    await run_workers(worker, concurrency)
    phase.elapsed_s += loop.time() - start
    return in_window / (duration_s - settle_s)


async def take_turns(
    systems: Sequence[tuple[Phase, Fire]], pids: Mapping[str, int], *, rounds: int,
    duration_s: float, settle_s: float, concurrency: int, op_timeout_s: float,
    between: Callable[[], Awaitable[None]] | None = None,
) -> Slices:
    """Run ``rounds`` rounds of one slice of each system, the order reversed every other round.

    Each phase gathers its slices' outcomes, latencies and the CPU ``pids`` spent during
    them; its ``steady_per_s`` is its median slice rate. ``between``: awaited before each
    slice (a pause for the broker's timers, say).
    """
    slices = Slices({phase.system: [] for phase, _ in systems})
    numbers = {phase.system: 0 for phase, _ in systems}
    for n in range(rounds):
        for phase, fire in (systems if n % 2 == 0 else list(reversed(systems))):
            if between is not None:
                await between()
            meter = CpuMeter(pids)
            before = phase.offered
            rate = await steady(phase, fire, concurrency=concurrency, duration_s=duration_s,
                                settle_s=settle_s, op_timeout_s=op_timeout_s,
                                first=numbers[phase.system])
            numbers[phase.system] += phase.offered - before
            for name, spent in meter.spent().items():
                phase.cpu_s[name] = phase.cpu_s.get(name, 0.0) + spent
            slices.rates[phase.system].append(rate)
    for phase, _ in systems:
        phase.steady_per_s = slices.median(phase.system)
    return slices
