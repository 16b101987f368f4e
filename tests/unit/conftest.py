"""Fixtures the unit tests share."""

from __future__ import annotations

import pytest

from lockgate.runtime.context import MemoryPorts
from lockgate.worlds.casenotes.adapter import CONTRACT


@pytest.fixture
def ports() -> MemoryPorts:
    """In-memory ports with case.add_note registered (still offered); no adapter answers facts
    unless a test says so. A test module that needs other ports defines its own ``ports``."""
    return MemoryPorts.create(CONTRACT)
