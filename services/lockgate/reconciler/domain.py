"""The reconciler's pure decisions."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from lockgate.contracts.messages import QueryResult
from lockgate.core.ids import derived_id
from lockgate.intent.aggregate import EffectIntent, Event, State


def reconcile(
    intent: EffectIntent, attempt_id: str, found: QueryResult, *, cause: str, now: datetime
) -> list[Event]:
    """Record what a query by the intent's identity established.

    Found → confirmed (completed with the receipt). Absent → an operator decides:
    a second attempt needs the contract's permission to retry, which comes with the
    recovery work, and a second approval never cures uncertainty.
    """
    if intent.state is not State.UNKNOWN:
        return []
    current = intent.current_attempt
    if current is None or current.attempt_id != attempt_id:
        return []
    ids: dict[str, Any] = dict(now=now, event_id=derived_id("reconcile", cause), causation_id=cause)
    if found.finding == "found":
        return [
            EffectIntent.Reconciled.next(
                intent, attempt_id=attempt_id, finding="confirmed", receipt=dict(found.receipt),
                by="reconciler", why="a query by the intent's identity found the effect",
                **ids,
            )
        ]
    if found.finding == "absent":
        return [
            EffectIntent.Reconciled.next(
                intent, attempt_id=attempt_id, finding="absent", receipt={},
                by="reconciler", why="a query by the intent's identity found no effect",
                **ids,
            )
        ]
    return []
