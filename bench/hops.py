"""Where one executed candidate's latency goes, read from the record it left.

Every event carries the time its writer created it, and the proposer notes when it
sent each candidate and when the answer arrived, on the same clock. For a sample of
a phase's candidates the gaps between consecutive events are grouped by the pair of
event types (``ExecutionAuthorized -> AttemptStarted``: the executor's order reaching
the adapter and the adapter's report coming back), with the front (sent to the first
event) and the back (the last event to the answer in hand). The medians add up to
about the median latency, so a change that lengthens one step shows up by name.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass

from lockgate.eventstore.base import EventStore
from lockgate.intent.codec import decode_event


@dataclass(frozen=True)
class Sent:
    """One candidate as the proposer saw it: wall-clock seconds sent and answered."""

    intent_id: str
    sent_at: float
    answered_at: float


@dataclass(frozen=True)
class Hops:
    """Median milliseconds per step, in the order the steps happen."""

    steps: list[tuple[str, float, int]]
    total_ms: float
    sampled: int

    def table(self) -> str:
        lines = [f"{'step':<58} {'p50 ms':>7} {'seen':>5}"]
        lines += [f"{name:<58} {ms:>7.2f} {n:>5}" for name, ms, n in self.steps]
        lines.append(f"{'sum of the medians':<58} {sum(ms for _, ms, _ in self.steps):>7.2f}")
        lines.append(f"{'median latency of the same candidates':<58} {self.total_ms:>7.2f}")
        return "\n".join(lines)


async def measure(store: EventStore, tenant: str, sent: list[Sent], sample: int = 200) -> Hops:
    """Load up to ``sample`` of the candidates' histories and time each step."""
    picks = sent[:: max(1, len(sent) // sample)][:sample]
    gaps: dict[str, list[float]] = defaultdict(list)
    order: dict[str, float] = {}
    totals: list[float] = []
    for n, s in enumerate(picks):
        history = await store.load(tenant, s.intent_id)
        events = [decode_event(r) for r in history.events]
        if not events:
            continue
        times = [e.timestamp.timestamp() for e in events]
        names = [type(e).__name__ for e in events]
        steps = [("proposal sent -> " + names[0], times[0] - s.sent_at)]
        steps += [(f"{names[i - 1]} -> {names[i]}", times[i] - times[i - 1])
                  for i in range(1, len(events))]
        steps.append((names[-1] + " -> answer in hand", s.answered_at - times[-1]))
        for position, (name, seconds) in enumerate(steps):
            gaps[name].append(1000 * seconds)
            # Steps appear in the order of their first sighting, earliest position first.
            order.setdefault(name, position + n * 1e-6)
        totals.append(1000 * (s.answered_at - s.sent_at))
    ranked = sorted(gaps, key=lambda name: order[name])
    return Hops([(name, statistics.median(gaps[name]), len(gaps[name])) for name in ranked],
                statistics.median(totals) if totals else float("nan"), len(totals))
