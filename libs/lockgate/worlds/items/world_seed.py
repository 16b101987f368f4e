"""The items world's demo seed: its spaces, actors and subscribers.

``World.seed`` writes them; the world's module docstring lists them.
"""

from __future__ import annotations

DEMO_SPACES = [
    ("space-1", "tenant-a", "open"),
    ("space-archived", "tenant-a", "archived"),
    ("space-9", "tenant-b", "open"),
]
DEMO_ACTORS = [("user-42", "tenant-a", 1), ("user-13", "tenant-a", 0), ("user-77", "tenant-b", 1)]
DEMO_SUBSCRIBERS = [
    ("space-1", "subscriber-1"),
    ("space-1", "subscriber-2"),
    ("space-1", "subscriber-3"),
    ("space-9", "subscriber-9"),
]
