"""The gate's, the adapters' and reconciliation's events: an attempt, from its order to its end."""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from lockgate.contracts.vocabulary import Finding, Resolution, Settles
from lockgate.intent.events.base import Event


class ExecutionAuthorized(Event, frozen=True, kw_only=True):
    """The final gate passed; this attempt may be dispatched, and only this one."""

    attempt_id: str
    intent_key: str
    digest: str
    policy_revision: str
    contract_revision: str
    gate_facts: dict[str, str | int | bool]
    deadline_at: datetime


class GateRefused(Event, frozen=True, kw_only=True):
    """The final gate found something no longer true; nothing was dispatched."""

    routed_by: ClassVar[str] = "settles"
    reason: str
    gate_facts: dict[str, str | int | bool]

    #: What policy has to settle when this ends the intent (its route); set by
    #: ``next`` from the intent. Events recorded before it existed read as ``budget``.
    settles: Settles = Settles.BUDGET


class AttemptSent(Event, frozen=True, kw_only=True):
    """The adapter crossed the send boundary: from here the effect may have happened.

    ``claimant`` names the worker's try that claimed it (``lockgate.adapters.claims``);
    empty on events recorded before claims were asked of the executor.
    """

    attempt_id: str
    claimant: str = ""


class AttemptAcknowledged(Event, frozen=True, kw_only=True):
    """The remote system accepted the request (it may still be working on it)."""

    attempt_id: str
    remote_ref: str


class ResultObserved(Event, frozen=True, kw_only=True):
    """The adapter saw the remote system's result; the receipt is being checked."""

    attempt_id: str


class AttemptInterrupted(Event, frozen=True, kw_only=True):
    """An interruptible attempt was stopped before its effect completed."""

    routed_by: ClassVar[str] = "settles"
    attempt_id: str
    detail: str

    #: What policy has to settle when this ends the intent (its route); set by
    #: ``next`` from the intent. Events recorded before it existed read as ``budget``.
    settles: Settles = Settles.BUDGET


class EffectCompleted(Event, frozen=True, kw_only=True):
    """The effect happened; the receipt is its evidence.

    ``result`` is what the adapter returned, bounded and checked against the
    contract's result schema; ``provenance`` says who reported it and when. It is
    data from outside: the model sees it labelled as untrusted.
    """

    routed_by: ClassVar[str] = "settles"
    version: ClassVar[int] = 2
    attempt_id: str
    receipt: dict[str, str]
    result: dict[str, Any]
    provenance: dict[str, str]

    #: What policy has to settle when this ends the intent (its route); set by
    #: ``next`` from the intent. Events recorded before it existed read as ``budget``.
    settles: Settles = Settles.BUDGET


class AttemptRejected(Event, frozen=True, kw_only=True):
    """The remote system refused the request: the effect did not happen."""

    routed_by: ClassVar[str] = "settles"
    attempt_id: str
    reason: str
    detail: str

    #: What policy has to settle when this ends the intent (its route); set by
    #: ``next`` from the intent. Events recorded before it existed read as ``budget``.
    settles: Settles = Settles.BUDGET


class AttemptFailedBeforeSend(Event, frozen=True, kw_only=True):
    """The attempt never crossed its send boundary; the same intent may try again."""

    attempt_id: str
    reason: str
    detail: str


class OutcomeUnknown(Event, frozen=True, kw_only=True):
    """The attempt may have happened; nothing repeats it until reconciled."""

    attempt_id: str
    evidence: str


class Reconciled(Event, frozen=True, kw_only=True):
    """What a query by identity (or an operator) established about an unknown outcome.

    ``resolution`` is what follows: ``completed`` (the effect is there),
    ``retry`` (proven absent and the contract allows the same intent again, with
    the same key), ``operator`` (absent, but only a person may decide),
    ``not_executed`` (an operator established that it never happened), or
    ``withdrawn`` (proven absent after it was asked to stop: it stays undone).
    """

    version: ClassVar[int] = 2
    routed_by: ClassVar[str] = "resolution"
    attempt_id: str
    finding: Finding
    receipt: dict[str, str]
    by: str
    why: str
    resolution: Resolution


class WithdrawalRequested(Event, frozen=True, kw_only=True):
    """Asked to stop while the attempt's order may already be with an adapter.

    Not yet a withdrawal: the intent stays authorized until the adapter side shows
    the order was not and will not be sent (``Withdrawn``), or that it crossed the
    send boundary first (then ``InterruptionRequested``).
    """

    attempt_id: str
    by: str
    why: str


class Withdrawn(Event, frozen=True, kw_only=True):
    """Stopped before execution: nothing was or will be sent."""

    routed_by: ClassVar[str] = "settles"
    by: str
    why: str

    #: What policy has to settle when this ends the intent (its route); set by
    #: ``next`` from the intent. Events recorded before it existed read as ``budget``.
    settles: Settles = Settles.BUDGET


class InterruptionRequested(Event, frozen=True, kw_only=True):
    """Asked to stop after the send boundary; the outcome is settled by reconciliation."""

    attempt_id: str
    by: str
    why: str
