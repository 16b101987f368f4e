"""The clock a decision reads: a function handed to handlers, so a test can set the time."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

#: What handlers and deciding functions are given to tell the time.
Clock = Callable[[], datetime]


def utc_now() -> datetime:
    """The wall clock, in UTC."""
    return datetime.now(UTC)
