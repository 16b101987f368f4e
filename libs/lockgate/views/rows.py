"""What the views hold, as rows, and how each is derived from the record (pure).

A view row is a function of an intent's events, never of anything else: the projector
folds the events into the aggregate (the same ``EffectIntent`` the services decide
on) and reads the rows off it, so a view can always be rebuilt from the record and
says exactly what the record says.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime

import msgspec

from lockgate.eventstore.base import RecordedEvent
from lockgate.intent.aggregate import EffectIntent, Event, State
from lockgate.intent.disclosure import model_view
from lockgate.intent.events import (
    ApprovalRefused,
    PolicyDecided,
    ReviewApproved,
    ReviewDenied,
    ReviewExpired,
    ReviewRequested,
)

#: The model-facing status of an intent the model has not been told about yet.
IN_PROGRESS = "in_progress"


class EventRow(msgspec.Struct, frozen=True, kw_only=True):
    """One event of the permanent record, in the store's order."""

    sequence: int
    tenant: str
    intent_id: str
    version: int
    event_type: str
    event_id: str
    recorded_at: str
    data: str
    """The event as JSON, in its class's current version."""


def recorded(row: EventRow) -> RecordedEvent:
    """The stored form of an event row (what ``decode_event`` reads)."""
    return RecordedEvent(tenant=row.tenant, intent_id=row.intent_id, version=row.version,
                         event_type=row.event_type, event_id=row.event_id,
                         data=row.data.encode(), sequence=row.sequence)


class TimelineRow(msgspec.Struct, frozen=True, kw_only=True):
    """One event of an intent's timeline, with its fields read out of the stored JSON."""

    sequence: int
    version: int
    event_type: str
    recorded_at: str
    data: dict[str, object]
    """The event's own fields as recorded (model and adapter text among them: untrusted);
    empty when the stored text is not a JSON object."""


def timeline_row(row: EventRow) -> TimelineRow:
    """The timeline's entry for an event row: its fields, out of their versioned envelope."""
    return TimelineRow(sequence=row.sequence, version=row.version, event_type=row.event_type,
                       recorded_at=row.recorded_at, data=_fields_of(row.data))


def _fields_of(text: str) -> dict[str, object]:
    # json, not msgspec: the record is shown exactly as stored, whatever its numbers.
    try:
        envelope = json.loads(text)
    except ValueError:
        return {}
    inner = envelope.get("data", envelope) if isinstance(envelope, dict) else {}
    return inner if isinstance(inner, dict) else {}


class IntentRow(msgspec.Struct, frozen=True, kw_only=True):
    """One intent as a person looks for it."""

    tenant: str
    intent_id: str
    run_id: str
    actor: str
    call_id: str
    tool: str
    effect_class: str
    destination: str
    state: str
    reason: str | None
    model_status: str
    """What the model was (or will be) told: ``executed``, ``denied``, ... or ``in_progress``."""
    attempts: int
    attempt_stage: str | None
    review_id: str | None
    version: int
    created_at: str
    updated_at: str
    last_sequence: int
    archived: bool = False
    """Its events before ``IntentArchived`` left the hot store (the views keep them all)."""
    turn_id: str = ""
    follows: str = ""
    """The intent this candidate corrects or follows (``lockgate.intent.lineage``)."""
    follows_how: str = ""
    lineage: str = ""
    """``equivalent``, ``narrowing``, ``branch`` or ``repair`` against the one it follows."""
    lineage_root: str = ""
    provider: str = ""
    model: str = ""


class ReviewRow(msgspec.Struct, frozen=True, kw_only=True):
    """One review: what a person is asked to approve, and what became of it."""

    review_id: str
    tenant: str
    intent_id: str
    status: str
    """``waiting``, ``approved``, ``denied``, ``edited``, ``expired``, ``superseded`` or ``closed``."""
    tool: str
    summary: str
    digest: str
    policy_revision: str
    contract_revision: str
    requested_at: str
    expires_at: str
    decided_by: str | None = None
    decided_at: str | None = None
    reason: str | None = None
    #: The review object (``ReviewRequested``): what will happen, who sees it, the
    #: model's arguments to read verbatim (untrusted text), the facts it rests on,
    #: what can be done if it goes wrong.
    action: str = ""
    visible_to: str = ""
    shown: dict[str, str] = msgspec.field(default_factory=dict)
    preconditions: tuple[str, ...] = ()
    recovery: tuple[str, ...] = ()
    #: The candidate a reviewer's edit made instead (status ``edited``).
    edited_into: str | None = None


class ReviewEvidence(msgspec.Struct, frozen=True, kw_only=True):
    """What a reviewer may open behind a review: the arguments as the model proposed them and
    as normalized (the digest covers those), the resource, and policy's reasons."""

    arguments: dict[str, object]
    proposed_arguments: dict[str, object]
    resource: dict[str, str]
    destination: str
    effect_class: str
    policy_reasons: tuple[str, ...]


def review_evidence(timeline: Sequence[TimelineRow], intent: IntentRow) -> ReviewEvidence:
    """The evidence behind ``intent``'s review, from its timeline (each event type's latest).

    Before a normalization the intent's own destination and effect class stand in.
    """
    latest = {row.event_type: row.data for row in timeline}
    normalized = latest.get("CandidateNormalized", {})
    reasons = latest.get("PolicyDecided", {}).get("reasons")
    return ReviewEvidence(
        arguments=_mapping(normalized.get("arguments")),
        proposed_arguments=_mapping(latest.get("CandidateReceived", {}).get("arguments")),
        resource={str(k): str(v) for k, v in _mapping(normalized.get("resource")).items()},
        destination=str(normalized.get("destination", intent.destination)),
        effect_class=str(normalized.get("effect_class", intent.effect_class)),
        policy_reasons=tuple(r for r in reasons if isinstance(r, str))
        if isinstance(reasons, list) else (),
    )


def _mapping(value: object) -> dict[str, object]:
    return value if isinstance(value, dict) else {}


class BudgetUse(msgspec.Struct, frozen=True, kw_only=True):
    """One intent's share of one budget counter."""

    tenant: str
    intent_id: str
    budget: str
    status: str
    """``reserved`` while the intent is live, then ``consumed`` or ``released``."""
    updated_at: str


class BudgetTotal(msgspec.Struct, frozen=True, kw_only=True):
    """A budget counter's shares by status."""

    tenant: str
    budget: str
    reserved: int
    consumed: int
    released: int


class DenialCount(msgspec.Struct, frozen=True, kw_only=True):
    """How many intents ended refused for one reason."""

    tenant: str
    state: str
    reason: str
    intents: int
    last_at: str


class RunRow(msgspec.Struct, frozen=True, kw_only=True):
    """One run and its candidates so far."""

    tenant: str
    run_id: str
    actor: str
    candidates: int
    executed: int
    first_at: str
    last_at: str


class ShadowRow(msgspec.Struct, frozen=True, kw_only=True):
    """An intent's latest decision beside the shadow bundle's on the same request."""

    intent_id: str
    tenant: str
    run_id: str
    tool: str
    decided_at: str
    active_revision: str
    active_outcome: str
    active_reasons: tuple[str, ...]
    active_determining: tuple[str, ...]
    shadow_revision: str
    shadow_outcome: str
    shadow_reasons: tuple[str, ...]
    shadow_determining: tuple[str, ...]
    flip: str
    """``""`` when both outcomes agree, else ``<active>-><shadow>`` (``allow->deny``)."""
    policy: str
    """The policies that determined the shadow's decision and not the active one's, joined
    by ``,`` (for a flip to deny: the forbids that denied)."""


class ShadowFlipCount(msgspec.Struct, frozen=True, kw_only=True):
    """How many intents' latest decisions the shadow bundle flips one way, by what."""

    tool: str
    flip: str
    policy: str
    count: int


def flip_of(active: str, shadow: str) -> str:
    """``""`` when the outcomes agree, else ``<active>-><shadow>``."""
    return "" if active == shadow else f"{active}->{shadow}"


def shadow_row(event: PolicyDecided, intent: EffectIntent) -> ShadowRow | None:
    """The shadow decisions view's row of a decision (``None``: no shadow bundle ran beside it)."""
    shadow = event.shadow
    if shadow is None:
        return None
    active_outcome, shadow_outcome = str(event.outcome), str(shadow.outcome)
    return ShadowRow(
        intent_id=intent.intent_id, tenant=intent.tenant, run_id=intent.run_id, tool=intent.tool,
        decided_at=iso(event.timestamp), active_revision=event.policy_revision,
        active_outcome=active_outcome, active_reasons=tuple(event.reasons),
        active_determining=tuple(event.determining), shadow_revision=shadow.revision,
        shadow_outcome=shadow_outcome, shadow_reasons=tuple(shadow.reasons),
        shadow_determining=tuple(shadow.determining), flip=flip_of(active_outcome, shadow_outcome),
        policy=",".join(p for p in shadow.determining if p not in event.determining),
    )


def iso(moment: datetime) -> str:
    """A UTC timestamp that sorts as text (the views' one time format)."""
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


#: States in which nothing will happen to an intent without a person.
NEEDS_A_PERSON = (State.UNKNOWN.value, State.NEEDS_OPERATOR.value)
#: States in which nothing more happens to an intent.
ENDED = tuple(s.value for s in State if s.terminal)
#: States that end an intent refused, by whom it does not matter.
REFUSALS = (State.REJECTED.value, State.DENIED.value, State.REFUSED.value, State.FAILED.value)


def intent_row(intent: EffectIntent, *, created_at: datetime, last_sequence: int) -> IntentRow:
    """The intents view's row of ``intent`` as folded so far."""
    view = model_view(intent, None)
    current = intent.current_attempt
    return IntentRow(
        tenant=intent.tenant, intent_id=intent.intent_id, run_id=intent.run_id,
        actor=intent.actor, call_id=intent.call_id, tool=intent.tool,
        effect_class=intent.effect_class, destination=intent.destination,
        state=intent.state.value, reason=intent.reason,
        model_status=view.status if view is not None else IN_PROGRESS,
        attempts=len(intent.attempts), attempt_stage=current.stage.value if current else None,
        review_id=intent.review_id, version=intent.version, created_at=iso(created_at),
        updated_at=iso(intent.modified_on), last_sequence=last_sequence,
        archived=intent.archived, turn_id=intent.turn_id, follows=intent.follows,
        follows_how=intent.follows_how, lineage=intent.lineage,
        lineage_root=intent.lineage_root,
        provider=intent.provider, model=intent.model,
    )


def review_change(event: Event, intent: EffectIntent) -> tuple[str, dict[str, str | None]] | None:
    """How ``event`` changes its review's row: ``(status, fields)``, or ``None``.

    ``ReviewRequested`` opens a review (status ``waiting``); a reviewer's decision or
    the expiry closes it. A refused approval leaves it waiting (the reason is kept).
    """
    at = iso(event.timestamp)
    if isinstance(event, ReviewApproved):
        return "approved", {"decided_by": event.reviewer, "decided_at": at, "reason": None}
    if isinstance(event, ReviewDenied):
        if event.edited_into:  # the reviewer changed the call: the new candidate is named
            return "edited", {"decided_by": event.reviewer, "decided_at": at,
                              "reason": event.reason, "edited_into": event.edited_into}
        return "denied", {"decided_by": event.reviewer, "decided_at": at, "reason": event.reason}
    if isinstance(event, ReviewExpired):
        return "expired", {"decided_by": None, "decided_at": at, "reason": "review.expired"}
    if isinstance(event, ApprovalRefused):
        return "waiting", {"decided_by": None, "decided_at": None, "reason": event.reason}
    return None


def opened_review(event: ReviewRequested, intent: EffectIntent) -> ReviewRow:
    """The row of the review ``event`` opens."""
    return ReviewRow(
        review_id=event.review_id, tenant=intent.tenant, intent_id=intent.intent_id,
        status="waiting", tool=intent.tool, summary=event.summary, digest=event.digest,
        policy_revision=event.policy_revision, contract_revision=event.contract_revision,
        requested_at=iso(event.timestamp), expires_at=iso(event.expires_at),
        action=event.action, visible_to=event.visible_to, shown=dict(event.shown),
        preconditions=tuple(event.preconditions), recovery=tuple(event.recovery),
    )


def budget_status(intent: EffectIntent) -> str:
    """What became of the intent's budget shares: still reserved, consumed or released."""
    if intent.state is State.COMPLETED:
        return "consumed"
    if intent.state.terminal:
        return "released"
    return "reserved"
