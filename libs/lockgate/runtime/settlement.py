"""Settling a JetStream message: the three verbs, which failures are "not now", how long to wait.

Every consumer ends a message one of three ways: ``ack`` (done with it), ``nak`` with a
delay (deliver it again later) or ``term`` (never deliver it again). The service kit
(``lockgate.runtime.service``) and the adapter worker (``lockgate.adapters.worker``)
decide differently *which* verb a message gets, but they tell a transient failure from a
permanent one, compute a redelivery delay and apply a verb with what is here.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from nats.errors import (
    ConnectionClosedError,
    ConnectionDrainingError,
    ConnectionReconnectingError,
    NoRespondersError,
    NoServersError,
    OutboundBufferLimitError,
    StaleConnectionError,
)
from nats.errors import Error as NatsError
from nats.js.errors import APIError, KeyWrongLastSequenceError, NoStreamResponseError

from lockgate.core.errors import LockgateError


class Settlement(StrEnum):
    """How a consumer ends one delivery of a message."""

    ACK = "ack"
    """Done with: the server forgets it."""
    NAK = "nak"
    """Not done: the server delivers it again after a delay."""
    TERM = "term"
    """Never to be done: the server does not deliver it again."""


class Settleable(Protocol):
    """A delivered message, as a consumer settles it (``lockgate.runtime.consumer.Delivery``)."""

    async def ack(self) -> None:
        """Done with."""
        ...

    async def nack(self, delay: float | None = None) -> None:
        """Deliver again, after ``delay`` seconds."""
        ...

    async def reject(self) -> None:
        """Never deliver again."""
        ...


async def settle_as(msg: Settleable, how: Settlement, *, delay_s: float | None = None) -> None:
    """Settle ``msg`` the way ``how`` says (``delay_s``: the redelivery delay of a ``nak``).

    Raises:
        nats.errors.Error: the acknowledgement could not be sent (the message is then
            redelivered after its ack wait).
    """
    if how is Settlement.ACK:
        await msg.ack()
    elif how is Settlement.TERM:
        await msg.reject()
    else:
        await msg.nack(delay=delay_s)


_TRANSIENT = (
    TimeoutError,  # nats.errors.TimeoutError is an asyncio.TimeoutError too
    NoRespondersError, ConnectionClosedError, ConnectionReconnectingError, ConnectionDrainingError,
    StaleConnectionError, OutboundBufferLimitError, NoServersError, NoStreamResponseError,
    KeyWrongLastSequenceError,  # a compare-and-set that lost a race: try again
)


def is_transient(exc: BaseException) -> bool:
    """True for an error that says "not now" rather than "never"."""
    if isinstance(exc, LockgateError):
        return exc.retryable
    if isinstance(exc, _TRANSIENT):
        return True
    if isinstance(exc, APIError):
        return exc.code is not None and exc.code >= 500  # the server's trouble, not ours
    return isinstance(exc, (ConnectionError, OSError)) and not isinstance(exc, NatsError)


def backoff_s(deliveries: int, *, base_s: float = 0.2, cap_s: float = 15.0) -> float:
    """Exponential redelivery delay for the ``deliveries``-th delivery."""
    # The exponent is capped: 2 ** 1024 is past a float, and a timer consumer's messages
    # may be delivered thousands of times (``runtime.specs``).
    return float(min(cap_s, base_s * 2 ** min(max(0, deliveries - 1), 64)))


@dataclass(frozen=True)
class Abandonment:
    """Why a consumer gave up a message: for the record, for operators."""

    durable: str
    cause: str
    deliveries: int
