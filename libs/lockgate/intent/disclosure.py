"""The model-facing projection of an intent: what the model is told of it in each state.

The rules of what a reason may disclose are the contract's
(``lockgate.contracts.disclosure``); which of them applies follows from the intent's state,
so the projection is built here, beside the aggregate it reads.
"""

from __future__ import annotations

from lockgate.contracts.capability import CapabilityContract, Disclosure
from lockgate.contracts.disclosure import (
    INVALID,
    RATE_LIMITED,
    RESULT_LABEL,
    UNAVAILABLE,
    bounded_result,
    disclose,
)
from lockgate.contracts.responses import ModelResponse
from lockgate.intent.aggregate import EffectIntent, State


def model_view(intent: EffectIntent, contract: CapabilityContract | None) -> ModelResponse | None:
    """Return what the model should learn of ``intent`` now (``None``: nothing yet)."""
    state = intent.state
    d: Disclosure
    result = None
    successor = None
    if state is State.DENIED and intent.edited_into:
        # A reviewer's edit: not a refusal of the model's purpose but a change of its
        # call, which runs (or not) under the successor's own id, through every gate.
        d = Disclosure("replaced", "review.edited")
        successor = intent.edited_into
    elif state is State.REJECTED:
        d = disclose(intent.reason, intent.field, contract, INVALID)
    elif state is State.DENIED:
        # A policy's refusal on current facts persists until the facts change: say so,
        # and offer the capability's safe alternatives, without saying which fact.
        d = disclose(intent.reason, intent.field, contract, Disclosure(
            "unavailable", "operation.unavailable", persistent=True,
            alternatives=contract.alternatives if contract else ("stop",)))
    elif state in (State.REFUSED, State.FAILED):
        d = disclose(intent.reason, intent.field, contract, UNAVAILABLE)
    elif state is State.AWAITING_APPROVAL:
        d = Disclosure("pending_approval", "approval.pending")
    elif state is State.PAUSED:
        d = Disclosure("paused", "policy.paused")
    elif state is State.WITHDRAWN:
        d = Disclosure("withdrawn", "proposal.withdrawn")
    elif state is State.INTERRUPTED:
        d = Disclosure("withdrawn", "operation.interrupted")
    elif state is State.SENT and intent.interruption_requested:
        d = Disclosure("interruption_requested", "operation.interruption-requested")
    elif state is State.AUTHORIZED and intent.withdrawal_requested:
        # Not "withdrawn" yet: the order may be with an adapter, which has not said it
        # will not send it. The model learns the outcome when one is on record.
        d = Disclosure("withdrawal_requested", "operation.withdrawal-requested")
    elif state in (State.UNKNOWN, State.NEEDS_OPERATOR):
        d = Disclosure("outcome_unknown", "operation.outcome-unknown")
    elif state is State.COMPLETED:
        d = Disclosure("executed", "operation.executed")
        limit = contract.result_max_bytes if contract else 1024
        result = bounded_result(intent.result, limit)
    else:
        return None
    return ModelResponse(
        candidate_id=intent.intent_id,
        call_id=intent.call_id,
        status=d.status,
        code=d.code,
        field=d.field,
        persistent=d.persistent,
        alternatives=d.alternatives or None,
        result=result,
        result_label=RESULT_LABEL if result is not None else None,
        retry_after_s=intent.retry_after_s if d is RATE_LIMITED else None,
        candidate_digest=intent.candidate_digest or None,
        successor=successor,
    )
