"""The reconciler's pure decisions."""

from __future__ import annotations

from datetime import datetime

from lockgate.contracts.capability import CapabilityContract
from lockgate.contracts.messages import NotResolved, QueryResult
from lockgate.contracts.vocabulary import Finding, QueryFinding, Resolution
from lockgate.core.ids import derived_id
from lockgate.intent.aggregate import EffectIntent, Event, Stamp, State
from lockgate.intent.events import Reconciled

#: Recovery options under which an effect proven absent may be tried again, as the
#: same intent with the same idempotency key.
RETRY_OPTIONS = frozenset({"retry_same_intent", "retry_same_intent_if_absent"})
#: States an operator may resolve.
OPEN = frozenset({State.UNKNOWN, State.NEEDS_OPERATOR})


def may_retry(contract: CapabilityContract | None) -> bool:
    """True when the contract allows the same intent again once its effect is proven absent."""
    return contract is not None and contract.query_by_identity and bool(RETRY_OPTIONS & set(contract.recovery))


def reconcile(
    intent: EffectIntent,
    attempt_id: str,
    found: QueryResult,
    contract: CapabilityContract | None,
    *,
    cause: str,
    now: datetime,
) -> list[Event]:
    """Record what a query by the intent's identity established.

    Found → completed with the receipt. Absent → withdrawn when it was asked to stop
    (a withdrawal or an interruption requested: the intent stays undone), else the same intent again (same key) when the
    contract allows it, else an operator decides. A second approval never cures
    uncertainty; only evidence does.
    """
    if intent.state is not State.UNKNOWN:
        return []
    current = intent.current_attempt
    if current is None or current.attempt_id != attempt_id:
        return []
    stamp = Stamp(now=now, event_id=derived_id("reconcile", cause), causation_id=cause)
    finding = QueryFinding(found.finding)
    if finding is QueryFinding.FOUND:
        return [
            Reconciled.next(
                intent, stamp, attempt_id=attempt_id, finding=Finding.CONFIRMED, receipt=dict(found.receipt),
                by="reconciler", why="a query by the intent's identity found the effect",
                resolution=Resolution.COMPLETED,
            )
        ]
    if finding is QueryFinding.ABSENT:
        if intent.withdrawal_requested or intent.interruption_requested:
            why, resolution = "; it was asked to stop, so it stays undone", Resolution.WITHDRAWN
        elif may_retry(contract):
            why, resolution = "; the contract allows the same intent again", Resolution.RETRY
        else:
            why, resolution = "", Resolution.OPERATOR
        return [
            Reconciled.next(
                intent, stamp, attempt_id=attempt_id, finding=Finding.ABSENT, receipt={},
                by="reconciler", why="a query by the intent's identity found no effect" + why,
                resolution=resolution,
            )
        ]
    return []


class ResolutionRefused(Exception):
    """An operator's resolution that cannot be recorded, with its stable code.

    ``intent`` is the aggregate as the refusal found it, when there is one.
    """

    def __init__(self, code: str, intent: EffectIntent | None = None) -> None:
        super().__init__(code)
        self.code = code
        self.intent = intent


def resolution_id(cause: str) -> str:
    """The event id of the ``Reconciled`` an operator's command ``cause`` records."""
    return derived_id("resolve", cause)


def not_resolved(refused: ResolutionRefused) -> NotResolved:
    """The operator's answer to a refused resolution: the code, and what settled it instead."""
    intent = refused.intent
    if intent is None:
        return NotResolved(error=refused.code)
    settled = intent.settlement
    if refused.code != "reconcile.already-settled" or settled is None:
        return NotResolved(error=refused.code, state=intent.state.value,
                           detail=f"the intent is {intent.state.value}")
    return NotResolved(
        error=refused.code, state=intent.state.value, settled_by=settled.event,
        finding=settled.finding, resolution=settled.resolution, by=settled.by,
        receipt=dict(settled.receipt), settled_at=settled.at,
        detail=(f"{settled.by or 'the adapter'} recorded {settled.event}({settled.finding} → "
                f"{settled.resolution}) at {settled.at.isoformat()}"
                + (f" with receipt {settled.receipt}" if settled.receipt else "")),
    )


def resolve(
    intent: EffectIntent | None,
    *,
    finding: str,
    by: str,
    why: str,
    receipt: dict[str, str],
    contract: CapabilityContract | None,
    cause: str,
    now: datetime,
) -> list[Event]:
    """An operator settles an unknown outcome; who and why go on the record.

    ``finding`` is the operator's word as it came (``confirmed`` or ``absent``).

    Raises:
        ResolutionRefused: no such intent; ``reconcile.already-settled`` when a report,
            the reconciler or another operator settled the outcome first (racing this
            one, say); nothing open to resolve; a bad finding; no name or reason given.
    """
    if intent is None:
        raise ResolutionRefused("reconcile.unknown-intent")
    current = intent.current_attempt
    if intent.state not in OPEN or current is None:
        settled = intent.settlement is not None
        code = "reconcile.already-settled" if settled else "reconcile.nothing-open"
        raise ResolutionRefused(code, intent)
    try:
        established = Finding(finding)
    except ValueError:
        raise ResolutionRefused("reconcile.bad-finding") from None
    if not by.strip() or not why.strip():
        raise ResolutionRefused("reconcile.who-and-why-required")
    if established is Finding.CONFIRMED:
        resolution = Resolution.COMPLETED
    elif intent.withdrawal_requested or intent.interruption_requested:
        resolution = Resolution.WITHDRAWN
    else:
        resolution = Resolution.RETRY if may_retry(contract) else Resolution.NOT_EXECUTED
    return [
        Reconciled.next(
            intent, Stamp(now=now, event_id=resolution_id(cause), causation_id=cause),
            attempt_id=current.attempt_id, finding=established, receipt=dict(receipt),
            by=f"operator:{by[:64]}", why=why[:300], resolution=resolution,
        )
    ]
