"""The executor's pure decisions: the final gate, attempt reports, deadlines."""

from __future__ import annotations

import hmac
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import msgspec

from lockgate.authz import Decision
from lockgate.authz.engine import PolicyBundle
from lockgate.authz.intents import keeps_history
from lockgate.contracts.capability import CapabilityContract
from lockgate.contracts.messages import AttemptReport, ExecutionOrder, Facts
from lockgate.contracts.proofs import report_token
from lockgate.contracts.vocabulary import (
    AttemptStage,
    DecisionOutcome,
    Finding,
    ReportStage,
    Resolution,
    Settles,
)
from lockgate.core.ids import derived_id
from lockgate.core.validation import validator
from lockgate.intent.aggregate import Attempt, EffectIntent, Event, Stamp, State
from lockgate.intent.events import (
    AttemptAcknowledged,
    AttemptFailedBeforeSend,
    AttemptInterrupted,
    AttemptRejected,
    EffectCompleted,
    ExecutionAuthorized,
    GateRefused,
    InterruptionRequested,
    OutcomeUnknown,
    Reconciled,
    ReportRefused,
    ResultObserved,
    WithdrawalRequested,
    Withdrawn,
)

#: Attempts that failed before their send boundary are retried at most this often.
MAX_ATTEMPTS = 3
DETAIL_MAX_CHARS = 300
#: Stages after which the effect may exist (or was refused by the world): no new
#: attempt may start. An attempt reconciled as ``absent`` with the contract's leave to
#: retry, or one that failed before its send boundary, does not block.
_MAY_HAVE_HAPPENED = frozenset({
    AttemptStage.SENT, AttemptStage.ACKNOWLEDGED, AttemptStage.OBSERVED, AttemptStage.COMPLETED,
    AttemptStage.UNKNOWN, AttemptStage.REJECTED, AttemptStage.INTERRUPTED,
})
#: Stages of an attempt that is in flight past its send boundary.
_IN_FLIGHT = frozenset({AttemptStage.SENT, AttemptStage.ACKNOWLEDGED, AttemptStage.OBSERVED})
#: Stages of an attempt whose order is out and not settled: authorized, or in flight.
_OPEN = _IN_FLIGHT | {AttemptStage.AUTHORIZED}


def _refuse(
    intent: EffectIntent, reason: str, facts: dict[str, str | int | bool], stamp: Stamp
) -> list[Event]:
    return [GateRefused.next(intent, stamp, reason=reason, gate_facts=facts)]


def decided_before(bundle: PolicyBundle, intent: EffectIntent, facts: Facts) -> Decision | None:
    """Policy's own decision, when the gate would ask Cedar exactly what policy asked.

    A Cedar decision is a function of the bundle and the request alone. The request is
    built from the intent (fixed since normalization), its run (never changes once
    opened), its contract (the gate refuses a changed one before it gets here), the
    resource's facts and three pieces of evidence that change over time: prior effects,
    budgets left and the run's history. So when the bundle is the revision policy
    decided with, uses none of those for this intent, and the fresh facts are the ones policy recorded, asking again
    would return what policy returned: that answer is the gate's, with no evaluation.
    Anything else (``None``) is evaluated anew.
    """
    if (bundle.revision != intent.policy_revision or bundle.uses_prior_effects
            or keeps_history(bundle, intent)[0] or bundle.config.budgets or intent.decision is None):
        return None
    if intent.decision not in (DecisionOutcome.ALLOW, DecisionOutcome.REQUIRE_APPROVAL):
        return None  # a denial or a pause came from more than Cedar
    if dict(facts.facts) != intent.facts:
        return None
    return Decision(intent.decision, bundle.revision, (), ())


def gate(
    intent: EffectIntent,
    contract: CapabilityContract | None,
    facts: Facts,
    decision: Decision,
    *,
    cause: str,
    now: datetime,
    budget_held: bool = True,
) -> list[Event]:
    """The final gate, immediately before dispatch.

    ``budget_held``: every budget hold the decision took is still in place (a hold can
    expire with its window's counter, or be given back by an operator).

    Passes only when the mapping revision is unchanged, the approval (if any) is bound
    to this digest and unexpired, no earlier attempt may have produced the effect, and
    current policy on fresh facts still permits it. Anything else → ``GateRefused``.
    """
    if intent.state is not State.ALLOWED:
        return []
    stamp = Stamp(now=now, event_id=derived_id("gate", cause), causation_id=cause)
    used = dict(facts.facts)
    if contract is None or contract.revision != intent.contract_revision:
        return _refuse(intent, "gate.mapping-changed", used, stamp)
    reviewed = intent.review_id is not None
    if reviewed:
        if intent.approval_digest != intent.digest:
            return _refuse(intent, "gate.approval-mismatch", used, stamp)
        if intent.review_expires_at is None or now >= intent.review_expires_at:
            return _refuse(intent, "gate.review-expired", used, stamp)
    elif intent.decision != DecisionOutcome.ALLOW:
        return _refuse(intent, "gate.no-decision", used, stamp)
    if any(a.stage in _MAY_HAVE_HAPPENED for a in intent.attempts):
        return _refuse(intent, "gate.prior-attempt", used, stamp)
    if len(intent.attempts) >= MAX_ATTEMPTS:
        return _refuse(intent, "gate.attempts-exhausted", used, stamp)
    if not budget_held:
        return _refuse(intent, "gate.budget-missing", used, stamp)
    acceptable = (
        (DecisionOutcome.ALLOW, DecisionOutcome.REQUIRE_APPROVAL) if reviewed
        else (DecisionOutcome.ALLOW,)
    )
    if decision.outcome not in acceptable:
        reason = decision.reasons[0] if decision.reasons else "gate.policy-changed"
        return _refuse(intent, reason, used, stamp)
    return [
        ExecutionAuthorized.next(
            intent, stamp,
            attempt_id=derived_id("attempt", intent.intent_id, str(len(intent.attempts) + 1)),
            intent_key=derived_id("intent-key", intent.intent_id, intent.digest or ""),
            digest=intent.digest or "",
            policy_revision=decision.revision,
            contract_revision=contract.revision,
            gate_facts=used,
            deadline_at=now + timedelta(seconds=contract.outcome_deadline_s),
        )
    ]


def check_report(
    intent: EffectIntent, report: AttemptReport, *, capability: str, subject_intent_id: str,
    key: bytes,
) -> str | None:
    """Why ``report`` (published on ``lg.report.<capability>.<subject_intent_id>``) is not
    to be believed, or None when it proves it answers an order the executor sent."""
    if subject_intent_id != report.intent_id:
        return "report.intent-mismatch"
    if capability != intent.tool:
        return "report.capability-mismatch"
    if not report.token:
        return "report.token-missing"
    expected = report_token(key, intent.tenant, intent.intent_id, report.attempt_id, intent.tool)
    if not hmac.compare_digest(report.token.encode(), expected.encode()):
        return "report.token-mismatch"
    return None


def refuse_report(
    intent: EffectIntent, report: AttemptReport, reason: str, *, cause: str, now: datetime
) -> list[Event]:
    """Put a refused report on the record, once per attempt, stage and reason.

    The attempt and stage are the record's own (empty, ``other``) when the report names
    ones it does not know, so a flood of forgeries adds a bounded number of events.
    """
    attempts = {a.attempt_id for a in intent.attempts}
    attempt_id = report.attempt_id if report.attempt_id in attempts else ""
    # Decoded reports hold a member already (any unknown stage reads as OTHER); one built
    # in this process may hold any string, and reads the same way.
    stage = ReportStage(report.stage)
    if (attempt_id, stage, reason) in intent.refused_reports:
        return []
    event_id = derived_id("report-refused", intent.intent_id, attempt_id, stage, reason)
    return [ReportRefused.next(
        intent, Stamp(now=now, event_id=event_id, causation_id=cause),
        attempt_id=attempt_id, stage=stage, reason=reason,
        adapter=report.adapter[:64],
    )]


def order_for(
    intent: EffectIntent, authorized: ExecutionAuthorized, *, key: bytes
) -> ExecutionOrder | None:
    """The execution order for an authorization, if it is still the current attempt.

    None once a withdrawal was requested: an order not yet published stays unpublished.
    """
    current = intent.current_attempt
    if intent.state is not State.AUTHORIZED or current is None or intent.withdrawal_requested:
        return None
    if current.attempt_id != authorized.attempt_id:
        return None
    return ExecutionOrder(
        tenant=intent.tenant,
        intent_id=intent.intent_id,
        attempt_id=authorized.attempt_id,
        intent_key=authorized.intent_key,
        capability=intent.tool,
        digest=authorized.digest,
        arguments=intent.normalized_arguments,
        resource=intent.resource,
        actor=intent.actor,
        preconditions=authorized.gate_facts,
        authorized_version=current.authorized_version,
        report_token=report_token(
            key, intent.tenant, intent.intent_id, authorized.attempt_id, intent.tool),
    )


def checked_result(result: dict[str, Any], contract: CapabilityContract | None) -> dict[str, Any]:
    """The result as stored: whole when within the contract's size limit and schema.

    Anything else is replaced by a marker: an oversized or malformed result is never
    stored in part, so nothing half-read can reach the model.
    """
    limit = contract.result_max_bytes if contract else 4096
    size = len(msgspec.json.encode(result))
    if size > limit:
        return {"withheld": "too-large", "size_bytes": size}
    schema = contract.result_schema if contract else None
    if schema is not None:
        problem = next(iter(validator(schema).iter_errors(result)), None)
        if problem is not None:
            return {"withheld": "schema-mismatch", "at": "/".join(map(str, problem.path))[:100]}
    return result


#: Reports with which an adapter says an attempt's send boundary was *not crossed*. A
#: crossing is recorded only on a claim the executor decided (``lockgate.adapters.claims``),
#: so one of these on an attempt not recorded as sent proves that no worker crossed it,
#: and none will: a claim after it finds the attempt settled. (The SDK reports only
#: ``failed_before_send``; a refused claim is recorded by the executor itself.)
NOT_SENT = frozenset({
    ReportStage.FAILED_BEFORE_SEND, ReportStage.REFUSED_ORDER, ReportStage.WITHDRAWN,
})


def on_report(
    intent: EffectIntent,
    report: AttemptReport,
    contract: CapabilityContract | None,
    *,
    cause: str,
    now: datetime,
    counts_effects: bool = False,
) -> list[Event]:
    """Record what an adapter reported about an attempt, if it still matters.

    ``counts_effects``: the bundle counts prior effects, so a completed effect is handed
    to policy (``EffectCompleted.settles``) whether or not the intent holds budget.

    Nothing is recorded for an intent in a terminal state (invariant 6): a late or
    repeated report cannot revive it. While a withdrawal is requested, the adapter's
    claim of the send boundary decides how it ends: not sent → ``Withdrawn``; sent →
    ``InterruptionRequested``, and the outcome is settled like any other.
    """
    if intent.state.terminal:
        return []
    try:
        attempt = intent.attempt(report.attempt_id)
    except KeyError:
        return []
    stamp = Stamp(now=now, event_id=derived_id("report", cause), causation_id=cause)
    reported = ReportStage(report.stage)
    withdrawal = intent.withdrawal
    if withdrawal is not None and withdrawal.attempt_id != attempt.attempt_id:
        withdrawal = None  # pragma: no cover - a withdrawal is requested for the current attempt
    crossing = _crossing(intent, attempt, report, reported, stamp)
    if crossing is not None:
        if withdrawal is None or attempt.crossed or intent.interruption_requested:
            return [crossing]
        # Progress on an attempt never claimed (an adapter that wrote without crossing):
        # too late to withdraw, so ask it to stop instead.
        return [crossing, InterruptionRequested.next(
            intent, replace(stamp, event_id=derived_id("report", cause, "interrupt"), offset=2),
            attempt_id=attempt.attempt_id, by=withdrawal.by, why=withdrawal.why,
        )]
    if reported in NOT_SENT and withdrawal is not None and not attempt.crossed and attempt.stage in (
        AttemptStage.AUTHORIZED, AttemptStage.UNKNOWN
    ):
        # The boundary was claimed as not crossed after the withdrawal was on record:
        # no worker can send this attempt any more (from the deadline's OutcomeUnknown
        # too: the claim is the evidence the record was waiting for).
        return [Withdrawn.next(intent, stamp, by=withdrawal.by, why=withdrawal.why)]
    if reported is ReportStage.COMPLETED:
        return _completed(intent, attempt, report, contract, stamp, counts_effects=counts_effects)
    return _ended(intent, attempt, report, reported, stamp)


def _crossing(
    intent: EffectIntent, attempt: Attempt, report: AttemptReport, reported: ReportStage, stamp: Stamp,
) -> Event | None:
    """The progress an acknowledged or observed report records on an attempt still open, if any.

    A ``sent`` report records nothing: a crossing is a claim the executor decides on the
    record (``lockgate.adapters.claims``), never an adapter's say-so after the fact.
    """
    if reported is ReportStage.ACKNOWLEDGED and attempt.stage in (AttemptStage.AUTHORIZED, AttemptStage.SENT):
        return AttemptAcknowledged.next(
            intent, stamp, attempt_id=attempt.attempt_id,
            remote_ref=report.receipt.get("remote_ref", "")[:256])
    if reported is ReportStage.OBSERVED and attempt.stage in _OPEN:
        return ResultObserved.next(intent, stamp, attempt_id=attempt.attempt_id)
    return None


def _completed(
    intent: EffectIntent, attempt: Attempt, report: AttemptReport, contract: CapabilityContract | None,
    stamp: Stamp, *, counts_effects: bool,
) -> list[Event]:
    """A completion: the effect, for an open attempt; the unknown outcome settled, for a late one."""
    receipt = {k[:64]: v[:256] for k, v in list(report.receipt.items())[:16]}
    if attempt.stage in _OPEN:
        provenance = {
            "adapter": report.adapter[:64],
            "capability": intent.tool,
            "attempt_id": attempt.attempt_id,
            "reported_at": report.reported_at.isoformat() if report.reported_at else "",
        }
        settles = Settles.BUDGET if counts_effects or intent.reservations else Settles.NOTHING
        return [
            EffectCompleted.next(
                intent, stamp, attempt_id=attempt.attempt_id, receipt=receipt,
                result=checked_result(report.result, contract), provenance=provenance,
                settles=settles,
            )
        ]
    if attempt.stage is AttemptStage.UNKNOWN:
        # A late report is evidence: it settles the unknown outcome.
        return [
            Reconciled.next(
                intent, stamp, attempt_id=attempt.attempt_id, finding=Finding.CONFIRMED,
                receipt=receipt, by="adapter-report",
                why="the adapter reported completion after the deadline",
                resolution=Resolution.COMPLETED,
            )
        ]
    return []


def _ended(
    intent: EffectIntent, attempt: Attempt, report: AttemptReport, reported: ReportStage, stamp: Stamp,
) -> list[Event]:
    """An attempt that ended without its effect: interrupted on request, rejected, or failed before send."""
    detail = report.detail[:DETAIL_MAX_CHARS]
    stage = attempt.stage
    if reported is ReportStage.INTERRUPTED and stage in _IN_FLIGHT and intent.interruption_requested:
        return [AttemptInterrupted.next(
            intent, stamp, attempt_id=attempt.attempt_id, detail=detail)]
    if reported is ReportStage.REJECTED and stage in _OPEN:
        return [
            AttemptRejected.next(
                intent, stamp, attempt_id=attempt.attempt_id,
                reason=report.reason or "remote.rejected", detail=detail,
            )
        ]
    if reported in (ReportStage.FAILED_BEFORE_SEND, ReportStage.REFUSED_ORDER) and (
        stage is AttemptStage.AUTHORIZED
    ):
        return [
            AttemptFailedBeforeSend.next(
                intent, stamp, attempt_id=attempt.attempt_id,
                reason=report.reason or f"adapter.{reported}", detail=detail,
            )
        ]
    return []


def timed_attempt(intent: EffectIntent, trigger_id: str) -> Attempt | None:
    """The attempt the gate authorized on the event ``trigger_id``, while it is open (its
    order out and nothing settled yet), or ``None``."""
    if intent.state not in (State.AUTHORIZED, State.SENT):
        return None
    attempt = next((a for a in intent.attempts if a.authorized_by == trigger_id), None)
    return attempt if attempt is not None and attempt.stage in _OPEN else None


def on_deadline(
    intent: EffectIntent, attempt_id: str, *, cause: str, now: datetime
) -> list[Event]:
    """An attempt still open at its deadline may have happened: ``OutcomeUnknown``."""
    try:
        attempt = intent.attempt(attempt_id)
    except KeyError:
        return []
    if attempt.stage not in _OPEN:
        return []
    if intent.state not in (State.AUTHORIZED, State.SENT):
        return []
    evidence = (
        "the adapter reported crossing the send boundary, then nothing before the deadline"
        if attempt.stage in _IN_FLIGHT
        else "no report from the adapter before the deadline; the order may have been executed"
        + ("; a withdrawal was requested but no adapter said the order was not sent"
           if intent.withdrawal_requested else "")
    )
    return [
        OutcomeUnknown.next(
            intent, Stamp(now=now, event_id=derived_id("deadline", cause), causation_id=cause),
            attempt_id=attempt_id, evidence=evidence,
        )
    ]


def withdraw(intent: EffectIntent, *, by: str, why: str, cause: str, now: datetime) -> list[Event]:
    """Stop an intent by its state, never with a blanket "cancelled".

    Before an order exists (queued, awaiting approval, paused, allowed) it is
    ``Withdrawn``: nothing was or will be sent. Once an attempt is authorized its order
    may be with an adapter, so only ``WithdrawalRequested`` is true: the adapter SDK
    checks the record right before the send boundary and refuses from then on, and
    its report makes it ``Withdrawn`` (or, if it crossed first, an interruption). The
    same request is recorded for an outcome nobody knows yet (unknown, or waiting for an
    operator): reconciliation then ends an absent effect withdrawn, never tried again.
    After the send boundary only ``InterruptionRequested`` can be recorded; the outcome
    is then settled like any other: by report, or by the deadline and reconciliation.
    """
    stamp = Stamp(now=now, event_id=derived_id("withdraw", cause), causation_id=cause)
    why = why[:DETAIL_MAX_CHARS]
    if intent.state in _WITHDRAWABLE:
        return [Withdrawn.next(intent, stamp, by=by, why=why)]
    current = intent.current_attempt
    if current is None:
        return []
    if intent.withdrawal_requested or intent.interruption_requested:
        return []
    if intent.state in _ORDER_MAY_BE_OUT:
        return [WithdrawalRequested.next(
            intent, stamp, attempt_id=current.attempt_id, by=by, why=why)]
    if intent.state is State.SENT:
        return [InterruptionRequested.next(
            intent, stamp, attempt_id=current.attempt_id, by=by, why=why)]
    return []


#: States in which no order exists: an authorized attempt's order may be out already.
_WITHDRAWABLE = frozenset({
    State.PROPOSED, State.NORMALIZED, State.PAUSED, State.AWAITING_APPROVAL, State.ALLOWED,
})
#: States in which an order may be with an adapter, or its outcome is not known.
_ORDER_MAY_BE_OUT = frozenset({State.AUTHORIZED, State.UNKNOWN, State.NEEDS_OPERATOR})
