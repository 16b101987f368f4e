"""The responses port: what the model is answered, stored; a candidate's last stored response
is its answer.

``ResponseStore`` keeps them in the ``LG_RESPONSES`` stream, one subject per candidate;
``MemoryResponses`` is the fake.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Protocol

from nats.js import JetStreamContext
from nats.js.errors import APIError, NotFoundError

from lockgate.contracts.subjects import response_subject
from lockgate.core.bounded import KeyedLocks, keep
from lockgate.core.errors import TransientError
from lockgate.eventstore.jetstream import CONFLICT_CODES
from lockgate.intent.aggregate import EffectIntent
from lockgate.runtime.streams import RESPONSES

__all__ = ["MemoryResponses", "ResponseStore", "Responses"]

#: Response subjects an intake process remembers the last stored response of.
_ANSWERED_KEPT = 65_536
#: Tries to store a response while other responses of its candidate are being stored.
RESPONSE_TRIES = 10
#: The header naming the intent version a stored response was computed from.
RESPONSE_VERSION = "Lockgate-Intent-Version"


class Responses(Protocol):
    """Each candidate's responses, the one from the latest intent version standing.

    Responses that kept conflicting raise ``TransientError`` (``response.contention``); a
    broker that does not answer raises ``nats.errors.Error``.
    """

    async def store(self, intent: EffectIntent, data: bytes, msg_id: str) -> None:
        """Store the response computed from ``intent`` unless one from a later (or the same)
        version of it is stored already."""
        ...


class ResponseStore:
    """Stores each intent's responses in the ``LG_RESPONSES`` stream, newest version last."""

    def __init__(self, js: JetStreamContext) -> None:
        self._js = js
        #: Response subject → the sequence and intent version of the response this process
        #: last stored or read there (``store``).
        self._answered: OrderedDict[str, tuple[int, int]] = OrderedDict()
        #: One response of an intent at a time in this process.
        self._answering = KeyedLocks(_ANSWERED_KEPT)

    async def store(self, intent: EffectIntent, data: bytes, msg_id: str) -> None:
        """Store the response computed from ``intent`` unless a later one is stored already.

        The model reads a candidate's last stored response as its answer, and responses to
        consecutive events of one intent are computed concurrently (by the workers of a
        process and by its replicas): one computed from an earlier version could be stored
        after a later one and stand as the answer. So each names its version, and is
        stored only after the response it follows (``Nats-Expected-Last-Subject-Sequence``);
        when another was stored in between, the newer of the two stands.
        """
        subject = response_subject(intent.tenant, intent.run_id, intent.intent_id)
        async with self._answering(intent.intent_id):
            last = self._answered.get(subject)
            for attempt in range(RESPONSE_TRIES):
                if last is not None and last[1] >= intent.version:
                    return  # a response from this version or a later one stands
                try:
                    ack = await self._js.publish(subject, data, headers={
                        "Nats-Msg-Id": msg_id, RESPONSE_VERSION: str(intent.version),
                        "Nats-Expected-Last-Subject-Sequence": str(last[0] if last else 0)})
                except APIError as exc:
                    if exc.err_code not in CONFLICT_CODES:
                        raise
                    if attempt:
                        await asyncio.sleep(0.01 * attempt)  # a replica may not show it yet
                    last = await self._last(subject)
                    continue
                keep(self._answered, subject, (int(ack.seq), intent.version), _ANSWERED_KEPT)
                return
        raise TransientError(f"responses to {intent.intent_id} kept changing",
                             code="response.contention")

    async def _last(self, subject: str) -> tuple[int, int] | None:
        """The stored response on ``subject``: its sequence, and the version it was computed from."""
        try:
            msg = await self._js.get_last_msg(RESPONSES, subject, direct=True)
        except NotFoundError:
            return None
        return int(msg.seq or 0), int((msg.headers or {}).get(RESPONSE_VERSION, "0") or 0)


class MemoryResponses:
    """The fake ``Responses``: the standing response per candidate."""

    def __init__(self) -> None:
        #: Response subject → (intent version, response).
        self.standing: dict[str, tuple[int, bytes]] = {}

    async def store(self, intent: EffectIntent, data: bytes, msg_id: str) -> None:
        """Keep the response unless one from a later (or the same) version stands."""
        subject = response_subject(intent.tenant, intent.run_id, intent.intent_id)
        last = self.standing.get(subject)
        if last is None or last[0] < intent.version:
            self.standing[subject] = (intent.version, data)

    def answer(self, intent: EffectIntent) -> bytes | None:
        """The response the model reads for ``intent`` (``None``: none yet)."""
        found = self.standing.get(response_subject(intent.tenant, intent.run_id, intent.intent_id))
        return found[1] if found is not None else None
