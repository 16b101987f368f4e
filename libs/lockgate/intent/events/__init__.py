"""Every ``EffectIntent`` event, by the stage of an intent's journey that records it.

A new event type is defined in the stage module it belongs to (``intake``, ``review``,
``execution``, ``upkeep``) and named below, which is how the codec and the deciders know
it; the intent moves by its function in ``lockgate.intent.evolve``.
"""

from __future__ import annotations

from lockgate.intent.events.base import INTENT_TOPIC, Created, Event, Stamp
from lockgate.intent.events.execution import (
    AttemptAcknowledged,
    AttemptFailedBeforeSend,
    AttemptInterrupted,
    AttemptRejected,
    AttemptSent,
    EffectCompleted,
    ExecutionAuthorized,
    GateRefused,
    InterruptionRequested,
    OutcomeUnknown,
    Reconciled,
    ResultObserved,
    WithdrawalRequested,
    Withdrawn,
)
from lockgate.intent.events.intake import (
    CandidateNormalized,
    CandidateReceived,
    CandidateRejected,
    NormalizationFailed,
)
from lockgate.intent.events.review import (
    ApprovalRefused,
    PolicyDecided,
    ReviewApproved,
    ReviewDenied,
    ReviewExpired,
    ReviewRequested,
    ShadowDecision,
)
from lockgate.intent.events.upkeep import (
    IntentArchived,
    ProcessingAbandoned,
    ReportRefused,
)

#: Each event type by the name it is stored under (its subject's last token).
EVENT_TYPES: dict[str, type[Event]] = {cls.__name__: cls for cls in (
    CandidateReceived,
    CandidateRejected,
    CandidateNormalized,
    NormalizationFailed,
    PolicyDecided,
    ReviewRequested,
    ReviewApproved,
    ReviewDenied,
    ApprovalRefused,
    ReviewExpired,
    ExecutionAuthorized,
    GateRefused,
    AttemptSent,
    AttemptAcknowledged,
    ResultObserved,
    AttemptInterrupted,
    EffectCompleted,
    AttemptRejected,
    AttemptFailedBeforeSend,
    OutcomeUnknown,
    Reconciled,
    WithdrawalRequested,
    Withdrawn,
    InterruptionRequested,
    ReportRefused,
    ProcessingAbandoned,
    IntentArchived,
)}

__all__ = ["EVENT_TYPES", "INTENT_TOPIC", "Created", "Event", "Stamp", "ApprovalRefused", "AttemptAcknowledged", "AttemptFailedBeforeSend", "AttemptInterrupted", "AttemptRejected", "AttemptSent", "CandidateNormalized", "CandidateReceived", "CandidateRejected", "EffectCompleted", "ExecutionAuthorized", "GateRefused", "IntentArchived", "InterruptionRequested", "NormalizationFailed", "OutcomeUnknown", "PolicyDecided", "ProcessingAbandoned", "Reconciled", "ReportRefused", "ResultObserved", "ReviewApproved", "ReviewDenied", "ReviewExpired", "ReviewRequested", "ShadowDecision", "WithdrawalRequested", "Withdrawn"]
