"""What the model may learn of a refusal, and nothing more: the rules of disclosure.

Internal reason codes stay in the event store. A code crosses only when the
capability's disclosure map lists it, or when it concerns an argument the model
controls (``argument.<field>.*``, missing required arguments and values the offered
schema refuses); everything else
collapses to ``proposal.invalid`` or ``operation.unavailable``. What the model is told
of an intent in each of its states is ``lockgate.intent.disclosure.model_view``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from lockgate.contracts.capability import CapabilityContract, Disclosure

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
