"""What the executor and the adapters share about an order: its proof, its deadline's margin,
its reports' message ids.

The executor signs every order it sends (``report_token``) and checks the token each report
and claim echoes; a worker crosses a send boundary only before ``write_by``. Both sides
compute these from the same inputs, so they live here, under both.
"""

from __future__ import annotations

import hashlib
import hmac
from datetime import datetime, timedelta

from lockgate.contracts.vocabulary import ReportStage

#: A worker does not cross within this margin of the attempt's deadline (which the
#: executor's clock set): the executor turns an open attempt into OutcomeUnknown there.
DEADLINE_MARGIN_S = 1.0


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
