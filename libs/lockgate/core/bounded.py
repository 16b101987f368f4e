"""What a process remembers, bounded: the least recently kept entry goes first."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")


def keep(entries: OrderedDict[K, V], key: K, value: V, capacity: int) -> V:
    """Remember ``value`` under ``key`` as the newest entry; forget the oldest past ``capacity``."""
    entries[key] = value
    entries.move_to_end(key)
    if len(entries) > capacity:
        entries.popitem(last=False)
    return value


class KeyedLocks:
    """One ``asyncio.Lock`` per key, the idle ones forgotten once there are ``capacity``.

    A lock in use stays: whoever holds it, or waits on it, holds its own reference.
    """

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._locks: dict[str, asyncio.Lock] = {}

    def __call__(self, key: str) -> asyncio.Lock:
        """The lock of ``key``."""
        lock = self._locks.get(key)
        if lock is None:
            if len(self._locks) >= self._capacity:
                for idle in [k for k, held in self._locks.items() if not held.locked()]:
                    del self._locks[idle]
            lock = self._locks[key] = asyncio.Lock()
        return lock
