"""Which events stream holds an intent: K partitions, chosen by a stable hash of its id.

One stream is served by one leader, and a leader tops out (measured at about
31k optimistic appends/s on one server); so a deployment may keep its events in K
streams, each with its own leader, the intent's partition decided here and nowhere
else. Per-aggregate optimistic concurrency is unchanged: an aggregate lives in one
stream, its subjects under that stream's prefix.

K = 1 (the embedded default) is the one stream ``LG_EVENTS`` with subjects
``lg.evt.<tenant>.<intent>.<version>.<EventType>.<route>``, exactly as before
partitions existed. K > 1 is ``LG_EVENTS_0`` … ``LG_EVENTS_<K-1>`` with subjects
``lg.evt.p<k>.<tenant>.<intent>...``: one token more, so no subject of one layout
matches a filter of the other, and the parser tells them apart by their length
(``lockgate.eventstore.subjects``).

The hash is CRC-32 of the intent id's bytes, modulo K: stable across processes,
machines and Python versions (``hash()`` is salted per process). Changing K moves
intents between streams, so K is chosen when a deployment is created; a running one
keeps it (the admin step refuses streams that disagree with it).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass

from lockgate.eventstore.subjects import PREFIX

#: The events stream of K = 1, and the stem of the partitioned ones' names.
STREAM = "LG_EVENTS"
#: The most partitions a deployment may have (each is a stream and a durable per consumer).
MAX_PARTITIONS = 64


@dataclass(frozen=True)
class Partition:
    """One events stream: its index, name and subject prefix."""

    index: int
    stream: str
    prefix: str


@dataclass(frozen=True)
class Partitions:
    """K events streams (``count``), and which of them holds an intent."""

    count: int = 1
    stem: str = STREAM
    subject_prefix: str = PREFIX

    def __post_init__(self) -> None:
        if not 1 <= self.count <= MAX_PARTITIONS:
            raise ValueError(f"event partitions must be 1..{MAX_PARTITIONS}, not {self.count}")

    def index_of(self, intent_id: str) -> int:
        """The partition of ``intent_id``."""
        return zlib.crc32(intent_id.encode()) % self.count if self.count > 1 else 0

    def of(self, intent_id: str) -> Partition:
        """The stream that holds ``intent_id``'s events."""
        return self[self.index_of(intent_id)]

    def __getitem__(self, index: int) -> Partition:
        if not 0 <= index < self.count:
            raise IndexError(index)
        if self.count == 1:
            return Partition(0, self.stem, self.subject_prefix)
        return Partition(index, f"{self.stem}_{index}", f"{self.subject_prefix}.p{index}")

    def __iter__(self) -> Iterator[Partition]:
        return (self[i] for i in range(self.count))

    def __len__(self) -> int:
        return self.count

    @property
    def streams(self) -> tuple[str, ...]:
        """Every events stream's name, in partition order."""
        return tuple(p.stream for p in self)


#: The embedded default: one stream.
SINGLE = Partitions()
