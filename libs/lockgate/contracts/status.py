"""What a process answers on ``lg.status.<name>``: alive, and whether its durables make progress."""

from __future__ import annotations

from typing import Any

import msgspec


class ConsumerProgress(msgspec.Struct, frozen=True):
    """One durable as its service sees it: work waiting on the server, and what it did lately."""

    #: Messages the server has not delivered yet (-1: the server did not say).
    pending: int
    #: Seconds since this process last settled one of its messages.
    idle_s: float
    #: Age of the oldest handler still running (0 when none runs).
    busy_s: float


class ProcessStatus(msgspec.Struct, frozen=True, kw_only=True):
    """A service's answer on ``lg.status.<name>`` (an adapter answers with the first fields)."""

    service: str
    pid: int
    instance: str = ""
    #: Connected and serving (its ports are built).
    ready: bool = True
    consumers: dict[str, ConsumerProgress] = msgspec.field(default_factory=dict)
    #: Where the process serves its Prometheus metrics (``http://127.0.0.1:<port>/metrics``);
    #: empty when it serves none.
    metrics: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The answer as JSON-ready builtins."""
        out: dict[str, Any] = msgspec.to_builtins(self)
        return out
