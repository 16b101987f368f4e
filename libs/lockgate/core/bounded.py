"""What a process remembers, bounded: the least recently kept entry goes first."""

from __future__ import annotations

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
