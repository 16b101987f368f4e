"""The intent's state: an immutable value that ``lockgate.intent.evolve`` folds events into.

``EffectIntent`` is what deciders read (``intent.state``, ``intent.attempt(id)``, ...);
nothing changes one in place: each event folds into a new value (``msgspec.structs.replace``),
which shares what the event did not touch. Its collections are tuples and frozensets; its
dictionaries are the events' own or fresh copies, never written after the fold made them.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any
from uuid import UUID

import msgspec

from lockgate.contracts.vocabulary import (
    AttemptStage,
    DecisionOutcome,
    Finding,
    ReportStage,
    Resolution,
)
from lockgate.intent.events.review import ReviewRequested


class State(StrEnum):
    """Where an intent is. Terminal states never change again."""

    PROPOSED = "proposed"
    REJECTED = "rejected"
    NORMALIZED = "normalized"
    DENIED = "denied"
    PAUSED = "paused"
    AWAITING_APPROVAL = "awaiting_approval"
    ALLOWED = "allowed"
    AUTHORIZED = "authorized"
    SENT = "sent"
    COMPLETED = "completed"
    FAILED = "failed"
    REFUSED = "refused"
    UNKNOWN = "unknown"
    NEEDS_OPERATOR = "needs_operator"
    WITHDRAWN = "withdrawn"
    INTERRUPTED = "interrupted"

    @property
    def terminal(self) -> bool:
        """True when nothing more will happen to the intent."""
        return self in TERMINAL


#: States nothing moves an intent out of (invariant 6).
TERMINAL = frozenset(
    {
        State.REJECTED, State.DENIED, State.COMPLETED, State.FAILED, State.REFUSED,
        State.WITHDRAWN, State.INTERRUPTED,
    }
)
#: States in which an order may already be out: an attempt was authorized and not
#: settled. Giving up on such an intent is a question for an operator, never "failed".
MAY_HAVE_BEEN_SENT = frozenset({State.AUTHORIZED, State.SENT, State.UNKNOWN})


class Attempt(msgspec.Struct, frozen=True, kw_only=True):
    """One try to execute the intent, as far as the record knows."""

    attempt_id: str
    authorized_version: int
    deadline_at: datetime | None = None
    #: The event the gate authorized this attempt on (its trigger's id).
    authorized_by: str = ""
    #: What the gate authorized: the order of this attempt must say the same.
    intent_key: str = ""
    digest: str = ""
    preconditions: dict[str, str | int | bool] = {}
    stage: AttemptStage = AttemptStage.AUTHORIZED
    reason: str | None = None
    #: An adapter crossed the send boundary (the effect may exist).
    crossed: bool = False
    #: Who claimed the boundary (``AttemptSent.claimant``; empty before it, or unnamed).
    claimant: str = ""


class Settlement(msgspec.Struct, frozen=True):
    """What last settled an attempt's outcome: a reconciliation, or the adapter's report."""

    event: str
    attempt_id: str
    finding: Finding
    resolution: Resolution
    by: str
    receipt: dict[str, str]
    at: datetime
    event_id: str


class Withdrawal(msgspec.Struct, frozen=True):
    """A withdrawal asked for while an attempt's order may be out: who asked, and why."""

    attempt_id: str
    by: str
    why: str


class EffectIntent(msgspec.Struct, frozen=True, kw_only=True):
    """One candidate's journey from proposal to effect (or to a recorded refusal).

    Its first event (received, or rejected by intake) states who, which call and which
    bytes; what later events fill in starts empty. The events are ``lockgate.intent.events``.
    """

    id: UUID
    version: int
    created_on: datetime
    modified_on: datetime
    tenant: str
    run_id: str
    turn_id: str
    call_id: str
    actor: str
    tool: str
    raw_digest: str
    raw_size_bytes: int
    catalogue_digest: str
    arguments: dict[str, Any] = {}
    contract_revision: str = ""
    provider: str = ""
    model: str = ""
    #: The intent this candidate corrects or follows, and how the link was made.
    follows: str = ""
    follows_how: str = ""
    state: State = State.PROPOSED
    reason: str | None = None
    field: str | None = None
    candidate_digest: str = ""
    #: In-flight keys intake holds for this intent (``LG_BUDGETS``).
    intake_holds: tuple[str, ...] = ()
    retry_after_s: float | None = None

    # -- what normalization, policy and review fill in --------------------------------
    #: Its place in the lineage, once normalization compared it with its predecessor.
    lineage: str = ""
    lineage_root: str = ""
    lineage_denials: int = 0
    predecessor_denied: bool = False
    normalized_arguments: dict[str, Any] = {}
    #: The facts answered with the normalization, and when it was recorded.
    normalized_facts: dict[str, str | int | bool] | None = None
    normalized_at: datetime | None = None
    resource: dict[str, str] = {}
    destination: str = ""
    effect_class: str = ""
    digest: str | None = None
    decision: DecisionOutcome | None = None
    policy_revision: str | None = None
    facts: dict[str, str | int | bool] = {}
    review_id: str | None = None
    review_expires_at: datetime | None = None
    #: The review last opened, as the reviewer is shown it.
    review: ReviewRequested | None = None
    #: The candidate a reviewer's edit made of this one, instead of running it.
    edited_into: str | None = None
    approval_digest: str | None = None
    #: Reviewers whose approval policy refused, with the reason (this review).
    refused_approvals: dict[str, str] = {}

    # -- what the gate, the adapters' reports, withdrawal and reconciliation fill in ---
    intent_key: str | None = None
    attempts: tuple[Attempt, ...] = ()
    receipt: dict[str, str] = {}
    result: dict[str, Any] = {}
    interruption_requested: bool = False
    withdrawal: Withdrawal | None = None
    #: The last report or reconciliation that settled an attempt's outcome.
    settlement: Settlement | None = None
    #: (attempt id, stage, reason) of every refused report on record.
    refused_reports: frozenset[tuple[str, ReportStage, str]] = frozenset()
    paused_at: datetime | None = None
    reservations: tuple[str, ...] = ()

    # -- what the record's upkeep notes ------------------------------------------------
    #: Events stored after the intent became terminal, which changed nothing.
    ignored: tuple[str, ...] = ()
    #: ``durable:trigger`` of every message a consumer gave up on.
    abandoned: tuple[str, ...] = ()
    #: Its events before ``IntentArchived`` left the hot store (the views keep them).
    archived: bool = False

    @property
    def intent_id(self) -> str:
        """The id as it appears in subjects."""
        return self.id.hex

    def attempt(self, attempt_id: str) -> Attempt:
        """Return the attempt with this id.

        Raises:
            KeyError: no such attempt was authorized.
        """
        for attempt in self.attempts:
            if attempt.attempt_id == attempt_id:
                return attempt
        raise KeyError(attempt_id)

    @property
    def withdrawal_requested(self) -> bool:
        """True once a withdrawal was asked for while an order may have been out."""
        return self.withdrawal is not None

    @property
    def current_attempt(self) -> Attempt | None:
        """The latest attempt, if any."""
        return self.attempts[-1] if self.attempts else None


def intent_uuid(intent_id: str) -> UUID:
    """Return the UUID of an intent id as it appears in subjects."""
    return UUID(hex=intent_id)
