"""Requests to Lockgate's services over NATS: the answer decoded, a refusal raised as ``Refused``."""

from __future__ import annotations

import asyncio
from typing import TypeVar

import msgspec
from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from lockgate.client.sdk.denials import unless_denied
from lockgate.client.sdk.errors import ClientError, Refused
from lockgate.contracts.messages import Refusal

T = TypeVar("T")


async def ask(nc: Client, subject: str, body: object, timeout_s: float) -> bytes:
    """The raw answer to ``body`` on ``subject``.

    Raises:
        PermissionDenied: the broker refused this user a publish to ``subject``.
        ClientError: nobody answered within ``timeout_s`` (``lockgate.unavailable``).
    """
    try:
        reply = await unless_denied(nc, subject, nc.request(subject, msgspec.json.encode(body),
                                                             timeout=timeout_s))
    except (NatsTimeout, NoRespondersError) as exc:
        raise ClientError(f"no answer on {subject}", code="lockgate.unavailable") from exc
    return bytes(reply.data)


async def request(nc: Client, subject: str, body: object, answer: type[T], timeout_s: float) -> T:
    """The answer to ``body`` on ``subject``, decoded as ``answer``.

    Raises:
        Refused: the service answered with a refusal instead.
        PermissionDenied: the broker refused this user a publish to ``subject``.
        ClientError: nobody answered within ``timeout_s`` (``lockgate.unavailable``).
    """
    data = await ask(nc, subject, body, timeout_s)
    try:
        return msgspec.json.decode(data, type=answer)
    except msgspec.ValidationError:
        refusal = msgspec.json.decode(data, type=Refusal)
        raise Refused(refusal.error, refusal.detail) from None


#: How long an idempotent open (a run or a turn under an id the client chose) is asked
#: again while nobody answers, or intake says it could not answer now: longer than a
#: cluster's leader election (a node holding the JetStream meta leadership stopping
#: left run opens unanswered for about 10 s).
OPEN_RETRY_S = 20.0


async def request_again(
    nc: Client, subject: str, body: object, answer: type[T], timeout_s: float,
) -> T:
    """``request``, asked again while unanswered or ``service.unavailable``, up to
    ``OPEN_RETRY_S``: only for requests that mean the same however often they arrive."""
    loop = asyncio.get_running_loop()
    deadline, pause = loop.time() + OPEN_RETRY_S, 0.1
    while True:
        try:
            return await request(nc, subject, body, answer, timeout_s)
        except Refused as exc:
            if exc.code != "service.unavailable" or loop.time() + pause > deadline:
                raise
        except ClientError as exc:
            if exc.code != "lockgate.unavailable" or loop.time() + pause > deadline:
                raise
        await asyncio.sleep(pause)
        pause = min(pause * 2, 2.0)

