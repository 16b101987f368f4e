"""The orders port: an authorized attempt's order handed to its capability's workers, and a
request to stop one.

An order is published to the ``LG_EXEC`` stream deduplicated by its attempt id (the broker
drops a second publish within its duplicate window; an adapter's check of each order stops
one past it); a request to stop is best effort and core NATS (the record says it was asked).
"""

from __future__ import annotations

from typing import Protocol

import msgspec
from nats.aio.client import Client
from nats.js import JetStreamContext

from lockgate.contracts import subjects
from lockgate.contracts.messages import ExecutionOrder

__all__ = ["MemoryOrders", "NatsOrders", "Orders"]


class Orders(Protocol):
    """Where the executor sends orders and asks workers to stop.

    A broker that does not answer raises ``nats.errors.Error`` (the order is sent again when
    its trigger is handed again).
    """

    async def send(self, order: ExecutionOrder) -> None:
        """Hand ``order`` to its capability's workers, once per attempt id."""
        ...

    async def interrupt(self, capability: str, intent_id: str, attempt_id: str) -> None:
        """Ask the workers of ``capability`` to stop the attempt (best effort)."""
        ...


class NatsOrders:
    """``Orders`` over JetStream (orders) and core NATS (interruptions)."""

    def __init__(self, nc: Client, js: JetStreamContext) -> None:
        self._nc = nc
        self._js = js

    async def send(self, order: ExecutionOrder) -> None:
        """Publish ``order`` on its capability's subject, deduplicated by attempt id."""
        await self._js.publish(subjects.order(order.capability), msgspec.json.encode(order),
                               headers={"Nats-Msg-Id": f"order-{order.attempt_id}"})

    async def interrupt(self, capability: str, intent_id: str, attempt_id: str) -> None:
        """Publish the request to stop on the capability's interrupt subject."""
        await self._nc.publish(subjects.interrupt(capability), msgspec.json.encode(
            {"intent_id": intent_id, "attempt_id": attempt_id}))


class MemoryOrders:
    """The fake ``Orders``: what was sent, deduplicated by attempt id as the stream does."""

    def __init__(self) -> None:
        #: Every order sent, in order, each attempt once.
        self.sent: list[ExecutionOrder] = []
        #: Every request to stop: (capability, intent id, attempt id).
        self.interrupted: list[tuple[str, str, str]] = []

    async def send(self, order: ExecutionOrder) -> None:
        """Keep ``order`` unless its attempt's order was sent already."""
        if all(o.attempt_id != order.attempt_id for o in self.sent):
            self.sent.append(order)

    async def interrupt(self, capability: str, intent_id: str, attempt_id: str) -> None:
        """Keep the request to stop."""
        self.interrupted.append((capability, intent_id, attempt_id))
