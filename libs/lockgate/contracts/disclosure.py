"""The model-facing projection of an intent: what the model may learn, and nothing more.

Internal reason codes stay in the event store. A code crosses only when the
capability's disclosure map lists it, or when it concerns an argument the model
controls (``argument.<field>.*``, missing required arguments and values the offered
schema refuses); everything else
collapses to ``proposal.invalid`` or ``operation.unavailable``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from lockgate.contracts.capability import CapabilityContract, Disclosure
from lockgate.contracts.responses import ModelResponse
from lockgate.intent.aggregate import EffectIntent, State

INVALID = Disclosure("rejected", "proposal.invalid")
UNAVAILABLE = Disclosure("unavailable", "operation.unavailable")

#: Intake's flood limits: too many candidates too fast, or too many still in flight.
#: The model may try again after the response's ``retry_after_s``.
RATE_LIMITED = Disclosure("denied", "rate.limited", persistent=False, alternatives=("wait", "stop"))

#: Denials every capability discloses the same way: about the run or its budgets, not
#: about any resource, so they can be said plainly and the model can act on them.
GENERIC: dict[str, Disclosure] = {
    "rate.limited": RATE_LIMITED,
    "rate.in-flight": RATE_LIMITED,
    "run.progress-stalled": Disclosure("denied", "run.progress-stalled", persistent=True,
                                       alternatives=("stop",)),
    "policy.pause-expired": Disclosure("unavailable", "operation.unavailable", persistent=False,
                                       alternatives=("wait", "stop")),
}
BUDGET = Disclosure("denied", "budget.exhausted", persistent=False, alternatives=("wait", "stop"))
RESULT_LABEL = "untrusted-data"


def _model_fields(contract: CapabilityContract | None) -> set[str]:
    if contract is None:
        return set()
    return set(contract.argument_schema.get("properties", {}))


def disclose(reason: str | None, field: str | None, contract: CapabilityContract | None,
             fallback: Disclosure) -> Disclosure:
    """Map an internal reason onto what the model sees."""
    if reason is None:
        return fallback
    if contract is not None and reason in contract.disclosure:
        return contract.disclosure[reason]
    if reason in GENERIC:
        return GENERIC[reason]
    if reason.startswith("budget."):
        return BUDGET
    controlled = _model_fields(contract)
    if field is not None and field in controlled:
        if reason == "tool.arguments.missing-required":
            return Disclosure("rejected", f"argument.{field}.missing", field)
        if reason == "tool.arguments.invalid":  # breaks the offered schema: the model can fix it
            return Disclosure("rejected", f"argument.{field}.invalid", field)
        if reason.startswith(f"argument.{field}."):
            return Disclosure("rejected", reason, field)
    return fallback


def bounded_result(result: dict[str, Any], limit_bytes: int) -> dict[str, Any] | None:
    """The result as the model may see it: whole if small enough, else withheld."""
    if not result:
        return None
    if len(msgspec.json.encode(result)) > limit_bytes:
        return {"truncated": True}
    return result


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
