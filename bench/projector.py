"""The read side under the benchmark's load: how far the views lag, how fast they catch up.

The projector is not on the executed path, so the load phases do not wait for it; what
a person reading the views cares about is how stale they are. Two figures:

- **lag under load**: the projector's own status answer (``consumers.views.pending``,
  events in the stream not yet in the views) sampled every ``every_s`` while a phase
  runs, reported as median and maximum events;
- **throughput**: the projector is stopped while the saturated phase runs and started
  again after it; the backlog it then works off, divided by the time until its lag is
  0, is its rate of events applied per second (each one a transaction with its
  tracking, on SQLite).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import time
from dataclasses import dataclass, field

from nats.aio.client import Client


async def lag(nc: Client, timeout_s: float = 1.0) -> int | None:
    """The views' lag in events as the projector says now (``None``: no answer)."""
    try:
        msg = await nc.request("lg.status.projector", b"", timeout=timeout_s)
        return int(json.loads(msg.data)["consumers"]["views"]["pending"])
    except (TimeoutError, KeyError, ValueError, TypeError, Exception):  # noqa: BLE001 - any failure: no figure
        return None


@dataclass
class LagSampler:
    """Samples the lag while a phase runs."""

    nc: Client
    every_s: float = 0.25
    samples: list[int] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None

    def start(self) -> None:
        async def sample() -> None:
            while True:
                n = await lag(self.nc)
                if n is not None:
                    self.samples.append(n)
                await asyncio.sleep(self.every_s)

        self._task = asyncio.create_task(sample())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def figures(self) -> dict[str, float]:
        if not self.samples:
            return {}
        return {"projector_lag_p50_events": float(statistics.median(self.samples)),
                "projector_lag_max_events": float(max(self.samples))}


async def catch_up(nc: Client, timeout_s: float = 300.0) -> tuple[int, float]:
    """Wait for the lag to reach 0 from the projector's first answer after a start.

    Returns the backlog of that first answer and the seconds from it to no lag (the
    process's start-up, before it answers, is not counted).
    """
    deadline = time.monotonic() + timeout_s
    first: tuple[int, float] | None = None
    while time.monotonic() < deadline:
        n = await lag(nc)
        now = time.monotonic()
        if n is not None:
            if first is None:
                first = (n, now)
            if n == 0:
                return first[0], now - first[1]
        await asyncio.sleep(0.02)
    raise TimeoutError(f"the views did not catch up within {timeout_s:g}s")
