"""The words of an intent's lifecycle: one ``StrEnum`` per vocabulary.

Wire messages, events, the aggregate and the services name stages, outcomes, findings
and resolutions with these members, never with string literals. A ``StrEnum`` member
is its value (``AttemptStage.SENT == "sent"``), and msgspec encodes it as that string,
so stored events and messages read exactly as before the enums existed.

Two vocabularies are spoken by adapters, which Lockgate does not trust: a report's stage
and a query's finding. Their readers are lenient (``_missing_``): any string this code
does not know decodes as ``ReportStage.OTHER`` or ``QueryFinding.UNKNOWN``, so a hostile
or newer adapter is answered as today (a refused or ignored report, a query asked
again), never with a decoding error. Every other vocabulary is strict: the record and
the services write only the members, and a value outside them is a bad event or a
refused command.
"""

from __future__ import annotations

from enum import StrEnum


class AttemptStage(StrEnum):
    """How far one attempt got, as the record knows it (``Attempt.stage``)."""

    AUTHORIZED = "authorized"
    SENT = "sent"
    ACKNOWLEDGED = "acknowledged"
    OBSERVED = "observed"
    COMPLETED = "completed"
    REJECTED = "rejected"
    INTERRUPTED = "interrupted"
    FAILED_BEFORE_SEND = "failed_before_send"
    UNKNOWN = "unknown"
    #: Reconciled as absent: proven not to have happened.
    ABSENT = "absent"


class ReportStage(StrEnum):
    """The transition an adapter reports about an attempt (``AttemptReport.stage``).

    ``other`` is never sent by the SDK: it is how any stage this code does not know
    reads, and how a refused report's stage is recorded when it named none of the others.
    """

    SENT = "sent"
    ACKNOWLEDGED = "acknowledged"
    OBSERVED = "observed"
    COMPLETED = "completed"
    REJECTED = "rejected"
    INTERRUPTED = "interrupted"
    FAILED_BEFORE_SEND = "failed_before_send"
    REFUSED_ORDER = "refused_order"
    WITHDRAWN = "withdrawn"
    OTHER = "other"

    @classmethod
    def _missing_(cls, value: object) -> ReportStage | None:
        # An adapter's word: an unknown stage is a report of nothing we know, not an error.
        return cls.OTHER if isinstance(value, str) else None


class DecisionOutcome(StrEnum):
    """Policy's answer about an intent (``Decision.outcome``, ``PolicyDecided.outcome``)."""

    ALLOW = "allow"
    REQUIRE_APPROVAL = "require_approval"
    DENY = "deny"
    #: Evidence is missing (facts, budgets): asked again until the pause times out.
    PAUSE = "pause"


class QueryFinding(StrEnum):
    """An adapter's answer to "did the effect with this identity happen?" (``QueryResult``)."""

    FOUND = "found"
    ABSENT = "absent"
    #: The query itself failed: evidence of nothing, so it is asked again.
    UNKNOWN = "unknown"

    @classmethod
    def _missing_(cls, value: object) -> QueryFinding | None:
        # An adapter's word: an answer we cannot read is no evidence either way.
        return cls.UNKNOWN if isinstance(value, str) else None


class Finding(StrEnum):
    """What a reconciliation established about an unknown outcome (``Reconciled.finding``)."""

    CONFIRMED = "confirmed"
    ABSENT = "absent"


class Resolution(StrEnum):
    """What follows a reconciliation (``Reconciled.resolution``)."""

    #: The effect is there.
    COMPLETED = "completed"
    #: Proven absent, and the contract allows the same intent again with the same key.
    RETRY = "retry"
    #: Absent, but only a person may decide.
    OPERATOR = "operator"
    #: An operator established that it never happened.
    NOT_EXECUTED = "not_executed"
    #: Proven absent after it was asked to stop: it stays undone.
    WITHDRAWN = "withdrawn"


class Settles(StrEnum):
    """What policy has to settle when an event ends an intent (the event's route).

    ``budget``: the intent holds budget, or its effect is counted as a prior effect;
    ``_``: it holds nothing of policy's, and policy is not handed its end.
    """

    BUDGET = "budget"
    NOTHING = "_"


class ClaimVerdict(StrEnum):
    """The executor's answer to a worker's claim of an attempt's send boundary."""

    CROSSED = "crossed"
    """Recorded as sent: the worker may write, before the answer's ``not_after``."""
    REFUSED = "refused"
    """Must not be sent; the record already says what that means (withdrawn, failed
    before its boundary, or claimed by another delivery)."""
    UNCHECKED = "unchecked"
    """Not decided now (the record was not readable): the order comes again later."""
