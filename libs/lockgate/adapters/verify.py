"""An execution order checked against the intent's record, and the claim of its send boundary.

A worker executes an order only when the intent's stored events hold an
``ExecutionAuthorized`` at the order's version with the same attempt, key and digest, on
an intent whose current attempt it still is, with no withdrawal requested
(``verify_order``). It checks again right before the send boundary, and then also that
the attempt's deadline is not (nearly) reached (``verify_crossing``); a check on receipt
younger than the worker's ``RECHECK_AFTER_S`` stands for that one, the deadline judged
again at the boundary.

The send boundary is *claimed*: ``sent`` and every report that says the attempt was not
sent (``failed_before_send``, ``refused_order``, ``withdrawn``) share the message id
``boundary_msg_id(attempt_id)``, so whichever ``LG_REPORTS`` stores first wins and the
stream drops the others as duplicates (JetStream deduplicates by ``Nats-Msg-Id`` within
the stream's duplicate window, and says so in the publish ack). A worker writes only
after its ``sent`` claim was stored as the first; so once a *not sent* claim is stored no
delivery of that attempt, however delayed or concurrent, can cross, and the executor may
record ``Withdrawn``. A worker that took longer than ``BOUNDARY_CLAIM_MAX_S`` from its
check to its claim, or reached the attempt's deadline, or finds the attempt no longer
open (``attempt_open``) when it reads the record after its claim, does not write at all.

Everything here is a pure function of the events and the time it is handed; the worker
(``lockgate.adapters.worker``) loads the record and publishes the claims.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from lockgate.adapters.api import bounded
from lockgate.contracts.messages import ExecutionOrder
from lockgate.contracts.vocabulary import ReportStage
from lockgate.eventstore import RecordedEvent
from lockgate.intent import EffectIntent, State, decode_event, fold
from lockgate.intent.codec import EventDecodeError

#: Longest time from a worker's last check of the record to its stored claim of the send
#: boundary. Claims are deduplicated only within ``LG_REPORTS``' duplicate window
#: (120 s): a worker stalled longer than that could have a claim stored after a rival's
#: without being refused, so past this bound it does not write.
BOUNDARY_CLAIM_MAX_S = 30.0
#: A worker does not cross within this margin of the attempt's deadline (which the
#: executor's clock set): the executor turns an open attempt into OutcomeUnknown there.
DEADLINE_MARGIN_S = 1.0


class OrderRefused(Exception):
    """The order does not match the record (``order.mismatch``) or is no longer current."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = bounded(detail)


class AuthorizationNotVisible(Exception):
    """The store does not (yet) hold the order's authorization version."""


def verify_order(
    order: ExecutionOrder, capability: str, events: Sequence[RecordedEvent]
) -> EffectIntent:
    """Check an order against the intent's stored events; return the folded intent.

    Raises:
        AuthorizationNotVisible: the history ends before ``order.authorized_version``.
        OrderRefused: ``order.mismatch`` when the order is not what was authorized,
            ``order.stale`` when it was but the intent has moved on, ``order.withdrawn``
            when a withdrawal was requested before it was sent.
    """

    def mismatch(why: str) -> OrderRefused:
        return OrderRefused("order.mismatch", why)

    if order.capability != capability:
        raise mismatch(f"order for {order.capability!r} arrived at {capability!r}")
    if not events:
        raise mismatch("no such intent")
    if events[-1].version < order.authorized_version:
        raise AuthorizationNotVisible(f"history ends at version {events[-1].version}")
    try:
        decoded = [decode_event(e) for e in events]
    except EventDecodeError as exc:
        raise mismatch(f"history cannot be read: {exc}") from exc
    at_version = [
        d for d, e in zip(decoded, events, strict=True) if e.version == order.authorized_version
    ]
    auth = at_version[0] if at_version else None
    if not isinstance(auth, EffectIntent.ExecutionAuthorized):
        raise mismatch(f"no authorization at version {order.authorized_version}")
    if (auth.attempt_id, auth.intent_key, auth.digest) != (
        order.attempt_id,
        order.intent_key,
        order.digest,
    ):
        raise mismatch("attempt, intent key or digest differ from the authorization")
    agg = fold(decoded)
    if agg is None:  # pragma: no cover - events is not empty
        raise mismatch("no such intent")
    if (agg.tenant, agg.intent_id) != (order.tenant, order.intent_id):
        raise mismatch("tenant or intent differ from the record")
    if agg.digest != order.digest:
        raise mismatch("digest differs from the normalized request")
    if agg.actor != order.actor:
        raise mismatch("actor differs from the record")
    if dict(agg.normalized_arguments) != dict(order.arguments) or dict(agg.resource) != dict(
        order.resource
    ):
        raise mismatch("arguments or resource differ from the normalized request")
    # Preconditions are the gate's facts: any the gate recorded must be the same (the
    # wire may carry a version token as a string or a number).
    for key, value in order.preconditions.items():
        if key in auth.gate_facts and str(auth.gate_facts[key]) != str(value):
            raise mismatch(f"precondition {key!r} differs from the gate's facts")
    current = agg.current_attempt
    if current is None or current.attempt_id != order.attempt_id:
        raise OrderRefused("order.stale", "a later attempt was authorized")
    if agg.state is State.WITHDRAWN or (agg.withdrawal_requested and not current.crossed):
        raise OrderRefused("order.withdrawn", "a withdrawal was requested before the order was sent")
    # SENT: a redelivery after a crash past the boundary; only a capability whose remote
    # system deduplicates by the intent key may execute it again (the worker checks).
    if agg.state not in (State.AUTHORIZED, State.SENT):
        raise OrderRefused("order.stale", f"intent is {agg.state.value}")
    return agg


def verify_crossing(
    order: ExecutionOrder, capability: str, events: Sequence[RecordedEvent], *, now: datetime
) -> EffectIntent:
    """The check right before the send boundary: ``verify_order``, and time left to cross.

    Raises:
        AuthorizationNotVisible: as ``verify_order``.
        OrderRefused: as ``verify_order``; ``order.expired`` when the attempt's deadline
            is (nearly) reached at ``now``.
    """
    return time_left(verify_order(order, capability, events), now=now)


def time_left(agg: EffectIntent, *, now: datetime) -> EffectIntent:
    """``agg``, if its current attempt's deadline is not (nearly) reached at ``now``.

    Raises:
        OrderRefused: ``order.expired``.
    """
    attempt = agg.current_attempt
    if too_late(attempt.deadline_at if attempt is not None else None, now):
        raise OrderRefused("order.expired", "the attempt's deadline passed before its send boundary")
    return agg


def too_late(deadline_at: datetime | None, now: datetime) -> bool:
    """True when the attempt's deadline is (nearly) reached at ``now`` (the worker's clock)."""
    if deadline_at is None:
        return False
    return now >= deadline_at - timedelta(seconds=DEADLINE_MARGIN_S)


def write_by(deadline_at: datetime | None) -> datetime | None:
    """The latest moment a write crossing now may take effect: where ``too_late`` begins."""
    return None if deadline_at is None else deadline_at - timedelta(seconds=DEADLINE_MARGIN_S)


def claimed_in_time(
    checked_s: float, claimed_s: float, deadline_at: datetime | None, now: datetime
) -> bool:
    """True when a claim stored at ``claimed_s`` after its check at ``checked_s`` (monotonic
    seconds) is still to be acted on: within ``BOUNDARY_CLAIM_MAX_S``, short of the deadline."""
    return claimed_s - checked_s <= BOUNDARY_CLAIM_MAX_S and not too_late(deadline_at, now)


def attempt_open(events: Sequence[RecordedEvent], attempt_id: str) -> bool:
    """True when the record still has ``attempt_id`` as its open attempt (authorized or sent).

    A history this code cannot read is no leave to write: False.
    """
    try:
        agg = fold(decode_event(e) for e in events)
    except EventDecodeError:
        return False
    current = agg.current_attempt if agg is not None else None
    return (
        agg is not None and current is not None and current.attempt_id == attempt_id
        and agg.state in (State.AUTHORIZED, State.SENT)
    )


def boundary_msg_id(attempt_id: str) -> str:
    """The message id every claim of an attempt's send boundary shares."""
    return f"{attempt_id}:boundary"


def report_msg_id(attempt_id: str, stage: ReportStage) -> str:
    """The message id of an attempt's report that claims nothing (one per stage)."""
    return f"{attempt_id}:{stage}"


def not_sent_stage(reason: str) -> ReportStage:
    """The stage of a claim that the boundary was not crossed, for a refusal's ``reason``."""
    return ReportStage.WITHDRAWN if reason == "order.withdrawn" else ReportStage.REFUSED_ORDER
