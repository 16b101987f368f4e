"""The timers port: a held JetStream trigger that times an attempt, let go early.

The executor holds the trigger of an attempt it authorized as that attempt's timer (it is
asked for again until the deadline). When this process records the attempt's end, the timer
has nothing left to time: ``Timers.done`` acknowledges the trigger on its reply subject, so
it is not handed back at the deadline for nothing.
"""

from __future__ import annotations

import contextlib
from typing import Protocol

from nats.aio.client import Client
from nats.errors import Error as NatsError

__all__ = ["MemoryTimers", "NatsTimers", "Timers"]

#: What acknowledges a JetStream delivery on its reply subject.
ACK = b"+ACK"


class Timers(Protocol):
    """Triggers held as timers, by where they are acknowledged (their reply subject)."""

    async def done(self, timer: str) -> None:
        """This trigger is done: stop timing it. Best effort, never raises: a timer not
        let go runs out as before."""
        ...


class NatsTimers:
    """``Timers`` over a NATS connection: an acknowledgement published to the reply subject."""

    def __init__(self, nc: Client) -> None:
        self._nc = nc

    async def done(self, timer: str) -> None:
        """Acknowledge the trigger held at ``timer``."""
        with contextlib.suppress(NatsError):
            await self._nc.publish(timer, ACK)


class MemoryTimers:
    """The fake ``Timers``: which timers were let go."""

    def __init__(self) -> None:
        #: Reply subjects acknowledged, in order.
        self.done_timers: list[str] = []

    async def done(self, timer: str) -> None:
        """Keep ``timer`` as let go."""
        self.done_timers.append(timer)
