"""Every ``EffectIntent`` event, by the stage of an intent's journey that records it.

A new event type is defined in the stage module it belongs to (``intake``, ``review``,
``execution``, ``upkeep``), named in ``Events`` below (which is how the codec and the
intent's state know it), and folded by its function in ``lockgate.intent.evolve``.
"""

from __future__ import annotations

from typing import TypeAlias

from lockgate.intent.events import execution, intake, review, upkeep
from lockgate.intent.events.base import INTENT_TOPIC, Created, Event, Stamp


class Events:
    """Every event type by its stored name, reachable as ``EffectIntent.<Name>`` too.

    The intent's state class takes these as class attributes, so deciders write
    ``EffectIntent.PolicyDecided.next(...)`` and ``isinstance(e, EffectIntent.PolicyDecided)``.
    """

    __slots__ = ()

    Event: TypeAlias = Event
    CandidateReceived: TypeAlias = intake.CandidateReceived
    CandidateRejected: TypeAlias = intake.CandidateRejected
    CandidateNormalized: TypeAlias = intake.CandidateNormalized
    NormalizationFailed: TypeAlias = intake.NormalizationFailed
    PolicyDecided: TypeAlias = review.PolicyDecided
    ReviewRequested: TypeAlias = review.ReviewRequested
    ReviewApproved: TypeAlias = review.ReviewApproved
    ReviewDenied: TypeAlias = review.ReviewDenied
    ApprovalRefused: TypeAlias = review.ApprovalRefused
    ReviewExpired: TypeAlias = review.ReviewExpired
    ExecutionAuthorized: TypeAlias = execution.ExecutionAuthorized
    GateRefused: TypeAlias = execution.GateRefused
    AttemptSent: TypeAlias = execution.AttemptSent
    AttemptAcknowledged: TypeAlias = execution.AttemptAcknowledged
    ResultObserved: TypeAlias = execution.ResultObserved
    AttemptInterrupted: TypeAlias = execution.AttemptInterrupted
    EffectCompleted: TypeAlias = execution.EffectCompleted
    AttemptRejected: TypeAlias = execution.AttemptRejected
    AttemptFailedBeforeSend: TypeAlias = execution.AttemptFailedBeforeSend
    OutcomeUnknown: TypeAlias = execution.OutcomeUnknown
    Reconciled: TypeAlias = execution.Reconciled
    WithdrawalRequested: TypeAlias = execution.WithdrawalRequested
    Withdrawn: TypeAlias = execution.Withdrawn
    InterruptionRequested: TypeAlias = execution.InterruptionRequested
    ReportRefused: TypeAlias = upkeep.ReportRefused
    ProcessingAbandoned: TypeAlias = upkeep.ProcessingAbandoned
    IntentArchived: TypeAlias = upkeep.IntentArchived


#: Each event type by the name it is stored under (its subject's last token).
EVENT_TYPES: dict[str, type[Event]] = {
    name: cls for name, cls in vars(Events).items()
    if isinstance(cls, type) and issubclass(cls, Event) and cls is not Event
}

__all__ = ["EVENT_TYPES", "INTENT_TOPIC", "Created", "Event", "Events", "Stamp"]
