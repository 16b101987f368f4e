"""An order's send boundary, claimed by asking the executor: one request, decided on the record.

A worker executes an order, and right before the adapter's remote write
(``SendBoundary.cross``) it asks ``lg.claim.<capability>`` with the order it holds and an id
of its own for this try (``Claim.claimant``). The executor decides on the intent's record and
appends what its answer means before it answers (``lockgate.executor.claims``):

- *crossed*: the order is the current attempt's, as authorized, no withdrawal was
  requested and the deadline is not (nearly) reached; ``AttemptSent`` names the claimant,
  and the answer says until when the write may land (``ClaimAnswer.not_after``). The same
  claim asked again (its answer lost on the way) is answered the same; another claimant of
  an attempt already crossed is refused, unless the capability's remote system
  deduplicates by the intent key;
- *refused*: withdrawn, superseded, out of time, claimed by another delivery, or not what
  was authorized; the record already says what that means;
- *unchecked*: the record could not be read, or does not hold the order's authorization
  yet; nothing was recorded, and the order comes again.

Claims of one attempt are serialized by the aggregate's optimistic concurrency, with each
other and with a withdrawal or a deadline: at most one claimant crosses an attempt's
boundary (more only where the remote deduplicates), and once anything else settled the
attempt no claim crosses it, however late it comes. The worker writes only after an answer
*crossed* and before its ``not_after``; an answer that does not come is no leave to write.

This module is the worker's side: the client. What both sides share (the token every order
carries, the deadline's margin, a report's message id) is ``lockgate.contracts.proofs``.
"""

from __future__ import annotations

import asyncio

import msgspec
from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from lockgate.contracts import subjects
from lockgate.contracts.messages import Claim, ClaimAnswer

#: A claim whose answer does not come is asked again this often, under the same claimant
#: (the first may have been recorded), before the worker gives the order back.
CLAIM_TRIES = 3


class ClaimUnanswered(Exception):
    """Nobody answered a claim (the executor down or busy): it may or may not be recorded."""


class _Refused(msgspec.Struct):
    error: str = ""


_refused = msgspec.json.Decoder(_Refused)
_answered = msgspec.json.Decoder(ClaimAnswer)


class ClaimClient:
    """A worker's claims of its capability's send boundaries, asked of the executor."""

    def __init__(self, nc: Client, capability: str, *, timeout_s: float = 5.0) -> None:
        self._nc = nc
        self._subject = subjects.claim(capability)
        self._timeout_s = timeout_s

    async def claim(self, claim: Claim) -> ClaimAnswer:
        """Ask to cross; the same claim again while no answer comes (``CLAIM_TRIES``).

        Raises:
            ClaimUnanswered: no answer, or the executor said it could not answer now.
        """
        body = msgspec.json.encode(claim)
        why = "no answer"
        for _ in range(CLAIM_TRIES):
            try:
                reply = await self._nc.request(self._subject, body, timeout=self._timeout_s)
                refused = _refused.decode(reply.data).error
                if not refused:
                    return _answered.decode(reply.data)
                why = f"answered {refused}"  # the executor could not answer now
            except (NatsTimeout, NoRespondersError):
                why = "no answer"
            except msgspec.MsgspecError as exc:
                raise ClaimUnanswered(f"unreadable answer on {self._subject}: {exc}") from exc
            await asyncio.sleep(0.1)
        raise ClaimUnanswered(f"{self._subject}: {why}")
