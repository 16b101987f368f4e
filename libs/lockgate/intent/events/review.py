"""Policy's and review's events: the decision on current facts, and a person's answer."""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

import msgspec

from lockgate.contracts.vocabulary import DecisionOutcome, Settles
from lockgate.intent.events.base import Event


class ShadowDecision(msgspec.Struct, frozen=True, kw_only=True):
    """What a shadow bundle decided on the same request: recorded, never enforced, never
    shown to the model."""

    revision: str
    outcome: DecisionOutcome
    reasons: list[str]
    determining: list[str]


class PolicyDecided(Event, frozen=True, kw_only=True, omit_defaults=True):
    """Policy's answer on current facts: allow, deny, require_approval or pause.

    ``reservations`` names the budget counters and history documents holding this
    intent's share; its outcome later consumes or releases them. ``history`` is the run's
    history the decision read (``context.history``; empty when its policies read none),
    ``shadow`` the decision of the shadow bundle running beside the active one, if any.
    """

    version: ClassVar[int] = 2
    routed_by: ClassVar[str] = "outcome"
    outcome: DecisionOutcome
    policy_revision: str
    reasons: list[str]
    determining: list[str]
    facts: dict[str, str | int | bool]
    digest: str
    reservations: list[str]
    # Added later, with defaults, and stored only when set: a decision without either is
    # stored as before.
    history: dict[str, Any] = msgspec.field(default_factory=dict)
    shadow: ShadowDecision | None = None


class ReviewRequested(Event, frozen=True, kw_only=True):
    """A human must approve this exact consequence before it may happen.

    The event is the review object as the reviewer is shown it: what will happen
    (``action``), who will see it (``visible_to``), the model's arguments to read
    verbatim (``shown``, untrusted text), the facts the approval rests on
    (``preconditions``), what can be done if it goes wrong (``recovery``), the
    expiry, the digest and the revisions it binds.
    """

    review_id: str
    digest: str
    policy_revision: str
    contract_revision: str
    summary: str
    expires_at: datetime
    # Added later, with defaults: reviews recorded before them read as the summary alone.
    action: str = ""
    visible_to: str = ""
    shown: dict[str, str] = msgspec.field(default_factory=dict)
    preconditions: tuple[str, ...] = ()
    recovery: tuple[str, ...] = ()


class ReviewApproved(Event, frozen=True, kw_only=True):
    """A reviewer approved; the approval is bound to digest and revisions."""

    review_id: str
    reviewer: str
    digest: str
    policy_revision: str
    contract_revision: str


class ReviewDenied(Event, frozen=True, kw_only=True):
    """A reviewer refused; or changed the call, ``edited_into`` naming the new candidate.

    An edit is a refusal of these bytes: what the reviewer proposed instead is a new
    candidate (``edited_call_id`` in the same run), which crosses every gate again.
    """

    routed_by: ClassVar[str] = "settles"
    review_id: str
    reviewer: str
    reason: str
    # Added later, with defaults: decisions recorded before edits existed.
    edited_into: str = ""
    edited_call_id: str = ""

    #: What policy has to settle when this ends the intent (its route); set by
    #: ``next`` from the intent. Events recorded before it existed read as ``budget``.
    settles: Settles = Settles.BUDGET


class ApprovalRefused(Event, frozen=True, kw_only=True):
    """A reviewer asked to approve and policy said no (their own request, say).

    On the record for the audit; the review stays open for another reviewer.
    """

    review_id: str
    reviewer: str
    reason: str
    policy_revision: str
    determining: list[str]


class ReviewExpired(Event, frozen=True, kw_only=True):
    """Nobody decided before the review expired."""

    routed_by: ClassVar[str] = "settles"
    review_id: str

    #: What policy has to settle when this ends the intent (its route); set by
    #: ``next`` from the intent. Events recorded before it existed read as ``budget``.
    settles: Settles = Settles.BUDGET
