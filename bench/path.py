"""What one executed candidate costs on the broker, counted by the broker itself.

Read from nats-server's monitoring endpoints around a phase: ``/connz`` gives every
connection's messages in (published by the process) and out (delivered to it), named
``lockgate-<service>`` or ``adapter.<name>``; ``/jsz`` gives every durable consumer's
deliveries and every stream's last sequence (what it stored: on a replicated stream
each of those is written, and with ``sync_interval: always`` synced, on every replica).
Divided by the phase's executed candidates (or raw chains), these are the path's length
as numbers, so a change that adds a round trip shows up in ``make bench`` as one more
message per candidate, whatever the timings did; counted the same way around the raw
chain, they say how much longer Lockgate's path is than the floor's.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from typing import Any


def _get(port: int, path: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as reply:  # noqa: S310
        answer: dict[str, Any] = json.loads(reply.read())
        return answer


@dataclass
class Counts:
    """Broker-side counters at one moment."""

    sent: Counter[str] = field(default_factory=Counter)
    received: Counter[str] = field(default_factory=Counter)
    deliveries: Counter[str] = field(default_factory=Counter)
    stored: Counter[str] = field(default_factory=Counter)

    @classmethod
    def read(cls, *ports: int) -> Counts:
        """The counters of the nodes monitored on ``ports`` (one server, or a cluster's).

        Clients' messages are summed over the nodes they are connected to; a stream's
        and a durable's counters are taken from the replica furthest along (every
        replica of a replicated stream reports them), then summed by name.
        """
        counts = cls()
        stored: dict[str, int] = {}
        delivered: dict[tuple[str, str], int] = {}
        for port in ports:
            connz = _get(port, "/connz?limit=1024")
            for conn in connz.get("connections") or []:
                name = str(conn.get("name") or "unnamed").removeprefix("lockgate-")
                counts.sent[name] += int(conn.get("in_msgs", 0))
                counts.received[name] += int(conn.get("out_msgs", 0))
            jsz = _get(port, "/jsz?consumers=true&accounts=true")
            for account in jsz.get("account_details") or []:
                for stream in account.get("stream_detail", []):
                    last = int(stream.get("state", {}).get("last_seq", 0))
                    stored[stream["name"]] = max(stored.get(stream["name"], 0), last)
                    for consumer in stream.get("consumer_detail", []) or []:
                        key = (stream["name"], consumer["name"])
                        seq = int(consumer.get("delivered", {}).get("consumer_seq", 0))
                        delivered[key] = max(delivered.get(key, 0), seq)
        for name, last in stored.items():
            counts.stored[name] += last
        for (_, name), seq in delivered.items():
            counts.deliveries[name] += seq
        return counts


async def counts(*ports: int) -> Counts:
    """The counters now (read off the event loop)."""
    return await asyncio.to_thread(Counts.read, *ports)


@dataclass(frozen=True)
class PathCost:
    """Broker messages per executed candidate, by process and by durable."""

    per: int
    sent: dict[str, float]
    received: dict[str, float]
    deliveries: dict[str, float]
    stored: dict[str, float] = field(default_factory=dict)

    @classmethod
    def between(cls, before: Counts, after: Counts, per: int) -> PathCost:
        def rate(a: Counter[str], b: Counter[str]) -> dict[str, float]:
            return {k: (b[k] - a[k]) / per for k in sorted(b) if b[k] - a[k] > 0}

        n = max(1, per)
        return cls(n, rate(before.sent, after.sent), rate(before.received, after.received),
                   rate(before.deliveries, after.deliveries), rate(before.stored, after.stored))

    def table(self) -> str:
        """Per process: messages published and delivered; per durable: deliveries."""
        lines = [f"{'process':<20} {'published':>9} {'delivered':>9}"]
        for name in sorted(set(self.sent) | set(self.received)):
            lines.append(f"{name:<20} {self.sent.get(name, 0):>9.1f} {self.received.get(name, 0):>9.1f}")
        lines.append(f"{'all':<20} {sum(self.sent.values()):>9.1f} {sum(self.received.values()):>9.1f}")
        lines.append("")
        lines.append(f"{'durable':<20} {'deliveries':>10}")
        for name, n in self.deliveries.items():
            lines.append(f"{name:<20} {n:>10.2f}")
        lines.append(f"{'all':<20} {sum(self.deliveries.values()):>10.2f}")
        lines.append("")
        lines.append(f"{'stream':<20} {'stored':>10}")
        for name, n in self.stored.items():
            lines.append(f"{name:<20} {n:>10.2f}")
        lines.append(f"{'all':<20} {sum(self.stored.values()):>10.2f}")
        return "\n".join(lines)

    def figures(self) -> dict[str, float]:
        """For the JSON line."""
        return {
            "messages_per_candidate": round(sum(self.sent.values()), 1),
            "deliveries_per_candidate": round(sum(self.deliveries.values()), 2),
            "stored_per_candidate": round(sum(self.stored.values()), 2),
        }

    def raw_figures(self) -> dict[str, float]:
        """The same figures for the raw chain, per chain."""
        return {
            "raw_messages_per_chain": round(sum(self.sent.values()), 1),
            "raw_deliveries_per_chain": round(sum(self.deliveries.values()), 2),
            "raw_stored_per_chain": round(sum(self.stored.values()), 2),
        }
