"""Two ways to offer load, shared by Lockgate and the raw chain so both are measured alike.

A *fire* is an async callable ``fire(i) -> outcome`` that performs operation ``i`` and
returns ``"ok"`` or a short outcome code. The drivers time it and bound everything:
each operation by ``op_timeout_s``, each phase by a deadline; nothing runs past them.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from bench.stats import Phase

Fire = Callable[[int], Awaitable[str]]


async def _bounded(fire: Fire, i: int, op_timeout_s: float) -> str:
    try:
        return await asyncio.wait_for(fire(i), op_timeout_s)
    except TimeoutError:
        return "timeout"
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - an outcome to count, not a crash
        return f"error:{type(exc).__name__}"


async def attempt(phase: Phase, fire: Fire, i: int, op_timeout_s: float) -> tuple[str, float]:
    """Run operation ``i`` once for a closed loop, counted in ``phase`` (offered, its outcome,
    its latency when it succeeded): its outcome, and the loop time it ended at."""
    loop = asyncio.get_running_loop()
    phase.offered += 1
    began = loop.time()
    outcome = await _bounded(fire, i, op_timeout_s)
    now = loop.time()
    phase.outcomes[outcome] += 1
    if outcome == "ok":
        phase.latencies_s.append(now - began)
    return outcome, now


async def run_workers(worker: Callable[[], Coroutine[Any, Any, None]], concurrency: int) -> None:
    """Run ``concurrency`` copies of ``worker`` to their end; none outlives this call."""
    workers = [asyncio.create_task(worker()) for _ in range(concurrency)]
    try:
        await asyncio.gather(*workers)
    finally:
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)


async def open_loop(
    phase: Phase, fire: Fire, *, rate_per_s: float, duration_s: float, op_timeout_s: float,
    first: int = 0,
) -> Phase:
    """Start operations at a fixed rate for ``duration_s``, whatever the completions do.

    Latency runs from each operation's *scheduled* arrival, so a late driver or a
    queue in front of the system is charged to the system (no coordinated omission).
    """
    loop = asyncio.get_running_loop()
    count = max(1, round(rate_per_s * duration_s))
    phase.offered = count
    phase.planned_s = count / rate_per_s
    start = loop.time() + 0.05

    async def one(i: int, at: float) -> None:
        try:
            outcome = await _bounded(fire, first + i, op_timeout_s)
        except asyncio.CancelledError:
            phase.outcomes["unfinished"] += 1
            raise
        phase.outcomes[outcome] += 1
        if outcome == "ok":
            phase.latencies_s.append(loop.time() - at)

    tasks: list[asyncio.Task[None]] = []
    try:
        for i in range(count):
            at = start + i / rate_per_s
            delay = at - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            phase.max_lag_s = max(phase.max_lag_s, loop.time() - at)
            tasks.append(asyncio.create_task(one(i, at)))
        # Every operation is bounded by op_timeout_s; the margin covers the bookkeeping.
        await asyncio.wait(tasks, timeout=op_timeout_s + 5.0)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    phase.elapsed_s = loop.time() - start
    return phase


async def closed_loop(
    phase: Phase, fire: Fire, *, concurrency: int, count: int, op_timeout_s: float,
    max_s: float, first: int = 0,
) -> Phase:
    """``concurrency`` workers each run one operation after another until ``count`` are done.

    Throughput is successes over the time from the first start to the last completion.
    The phase stops starting new operations after ``max_s``.
    """
    loop = asyncio.get_running_loop()
    numbers = itertools.count()
    start = loop.time()
    stop_at = start + max_s
    last = start

    async def worker() -> None:
        nonlocal last
        while True:
            i = next(numbers)
            if i >= count or loop.time() >= stop_at:
                return
            _, ended = await attempt(phase, fire, first + i, op_timeout_s)
            last = max(last, ended)

    await run_workers(worker, concurrency)
    phase.elapsed_s = last - start
    return phase
