"""Outcomes of one load phase and the figures printed from them."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..1) of already sorted values; NaN when empty."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


@dataclass
class Phase:
    """What one load phase did: every outcome, the latency of each success, how long it took."""

    system: str
    mode: str
    offered: int = 0
    latencies_s: list[float] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)
    elapsed_s: float = 0.0
    #: How late the open-loop driver started an arrival at worst (its own lag).
    max_lag_s: float = 0.0
    #: Open loop: how long the arrivals were spread over (0 for a closed loop).
    planned_s: float = 0.0
    #: CPU seconds each process spent during the phase.
    cpu_s: dict[str, float] = field(default_factory=dict)
    #: A phase of closed-loop slices (``bench.rounds``): its median steady rate.
    steady_per_s: float | None = None

    @property
    def ok(self) -> int:
        """Completed successfully (Lockgate: status ``executed``; raw: Stage6 seen)."""
        return self.outcomes.get("ok", 0)

    @property
    def failed(self) -> int:
        """Everything offered that did not complete successfully."""
        return self.offered - self.ok

    @property
    def per_s(self) -> float:
        """Successful completions per second of the phase (of slices: their median steady rate)."""
        if self.steady_per_s is not None:
            return self.steady_per_s
        return self.ok / self.elapsed_s if self.elapsed_s > 0 else math.nan

    @property
    def overloaded(self) -> bool:
        """Open loop: the system fell behind the arrivals, so latency includes a growing queue.

        Said when anything offered did not succeed, or the last completion came more
        than a second (or a tenth of the phase) after the last arrival.
        """
        if not self.planned_s:
            return False
        return self.ok < self.offered or self.elapsed_s > self.planned_s + max(
            1.0, 0.1 * self.planned_s
        )

    def latency_ms(self, q: float) -> float:
        """A latency percentile of the successes, in milliseconds."""
        return percentile(sorted(self.latencies_s), q) * 1000.0

    def row(self) -> list[str]:
        """One line of the printed table."""
        others = {k: v for k, v in self.outcomes.items() if k != "ok"}
        return [
            self.system,
            self.mode,
            str(self.offered),
            str(self.ok),
            f"{self.elapsed_s:.2f}",
            f"{self.per_s:.1f}",
            f"{self.latency_ms(0.5):.2f}",
            f"{self.latency_ms(0.99):.2f}",
            f"{self.latency_ms(1.0):.2f}",
            ", ".join(f"{k}={v}" for k, v in sorted(others.items())) or "-",
        ]


HEADER = ["system", "load", "offered", "ok", "elapsed s", "ok/s", "p50 ms", "p99 ms", "max ms",
          "not ok"]


def table(phases: list[Phase]) -> str:
    """The phases as an aligned text table."""
    rows = [HEADER] + [p.row() for p in phases]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip()
             for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def cpu_table(phases: list[Phase]) -> str:
    """CPU milliseconds per successful operation, by process and phase (0 rows left out)."""
    names: list[str] = []
    for p in phases:
        names += [n for n in p.cpu_s if n not in names]
    header = ["process"] + [f"{p.system} {p.mode.split()[0]}" for p in phases]
    rows = [header]
    for name in names:
        cells = [p.cpu_s.get(name, 0.0) * 1000 / p.ok if p.ok else math.nan for p in phases]
        if all(c < 0.005 for c in cells if not math.isnan(c)):
            continue
        rows.append([name] + [f"{c:.2f}" for c in cells])
    total = [sum(p.cpu_s.values()) * 1000 / p.ok if p.ok else math.nan for p in phases]
    rows.append(["all"] + [f"{c:.2f}" for c in total])
    busy = [sum(p.cpu_s.values()) / p.elapsed_s if p.elapsed_s else math.nan for p in phases]
    rows.append(["cores busy"] + [f"{b:.2f}" for b in busy])
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in
                       enumerate(zip(r, widths, strict=True))) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
