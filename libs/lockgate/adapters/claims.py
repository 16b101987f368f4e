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

This module is the worker's side and what both sides share: the client, the token every
order carries, the deadline's margin.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from datetime import datetime, timedelta

import msgspec
from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from lockgate.contracts import subjects
from lockgate.contracts.messages import Claim, ClaimAnswer
from lockgate.contracts.vocabulary import ReportStage

#: A worker does not cross within this margin of the attempt's deadline (which the
#: executor's clock set): the executor turns an open attempt into OutcomeUnknown there.
DEADLINE_MARGIN_S = 1.0
#: A claim whose answer does not come is asked again this often, under the same claimant
#: (the first may have been recorded), before the worker gives the order back.
CLAIM_TRIES = 3


class ClaimUnanswered(Exception):
    """Nobody answered a claim (the executor down or busy): it may or may not be recorded."""


def report_token(key: bytes, tenant: str, intent_id: str, attempt_id: str, capability: str) -> str:
    """The proof an order carries, and every report and claim about its attempt must echo.

    HMAC-SHA256 with the executor's key over tenant, intent, attempt and capability: an
    adapter can show it for the orders it received and forge it for no other. The same
    inputs give the same token, so redelivered orders and restarted executors agree.
    """
    message = "\x1f".join(("lockgate.report-token.v1", tenant, intent_id, attempt_id, capability))
    return hmac.new(key, message.encode(), hashlib.sha256).hexdigest()


def too_late(deadline_at: datetime | None, now: datetime) -> bool:
    """True when the attempt's deadline is (nearly) reached at ``now``."""
    if deadline_at is None:
        return False
    return now >= deadline_at - timedelta(seconds=DEADLINE_MARGIN_S)


def write_by(deadline_at: datetime | None) -> datetime | None:
    """The latest moment a write crossing now may take effect: where ``too_late`` begins."""
    return None if deadline_at is None else deadline_at - timedelta(seconds=DEADLINE_MARGIN_S)


def report_msg_id(attempt_id: str, stage: ReportStage, token: str) -> str:
    """The message id of an attempt's report: one per stage, and only its order's holder can name it.

    A redelivered order's report is dropped by the reports stream as a duplicate. The id
    ends in a digest of the order's report token: attempt ids are derived from intent
    ids, so without it anyone allowed to publish reports could store a forged report
    under the id the genuine one will carry, and the stream would drop the genuine one
    in its duplicate window (the executor refuses the forgery, but it took the place).
    """
    proof = hashlib.sha256(f"lockgate.report-msg-id.v1\x1f{token}".encode()).hexdigest()[:32]
    return f"{attempt_id}:{stage}:{proof}"


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
