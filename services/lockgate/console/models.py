"""The console API's shapes at the HTTP edge (pydantic): what goes in, what comes out.

Text that came from a model or an adapter (arguments, notes, results, summaries that
quote them) is data, never markup: every field that may hold it is named in
``UNTRUSTED`` and the page inserts it as text.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

ID = r"^[A-Za-z0-9_-]{1,64}$"
DIGEST = r"^sha256:[0-9a-f]{64}$"
#: Where model or adapter text can appear in an answer (the page labels each "untrusted").
UNTRUSTED = ("summary", "action", "shown", "data", "proposed_arguments", "arguments", "result", "reason")

ReviewStatus = Literal["waiting", "approved", "denied", "edited", "expired", "superseded", "closed"]


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True)


class ErrorBody(_Out):
    """Every refusal: a stable code and one line."""

    error: str = Field(description="A stable dotted code (auth.token-expired, review.digest-mismatch, …).")
    detail: str = ""


class Label(_Out):
    """What an intent's state honestly means."""

    code: str = Field(description="stopped, interruption_requested, outcome_unknown, executed, …")
    text: str


class Me(_Out):
    """The person the token is."""

    user: str = Field(description="Their own NATS user.")
    name: str
    role: Literal["reviewer", "operator"]
    tenants: list[str] = Field(description="The tenants they act in; empty: every tenant.")
    expires_at: datetime


class ViewsState(_Out):
    """How current the views are."""

    position: int = Field(description="The last stream position the views hold.")
    lag: int | None = Field(description="Events stored but not yet in the views (null: the projector did not say).")


class Intent(_Out):
    """One intent as the views hold it."""

    intent_id: str
    tenant: str
    run_id: str
    actor: str
    call_id: str
    tool: str
    effect_class: str
    destination: str
    state: str
    reason: str | None
    model_status: str
    attempts: int
    attempt_stage: str | None
    review_id: str | None
    created_at: str
    updated_at: str
    position: int = Field(description="Its last event's stream sequence: page with before=<position>.")
    label: Label
    follows: str | None = Field(default=None, description="The intent this candidate corrects or follows.")
    lineage: str | None = Field(
        default=None, description="equivalent, narrowing, branch or repair, against the one it follows.")


class IntentPage(_Out):
    """Intents, newest change first."""

    items: list[Intent]
    next_before: int | None = Field(description="Pass as before= for the next page; null: no more.")


class TimelineEvent(_Out):
    """One event of an intent's record."""

    sequence: int
    version: int
    type: str
    words: str = Field(description="What the event means, in plain words.")
    recorded_at: str
    data: dict[str, Any] = Field(description="The event as recorded. Untrusted: it holds model and adapter text.")


class Review(_Out):
    """One review: what a person is asked to approve, and what became of it."""

    review_id: str
    intent_id: str
    tenant: str
    status: str
    tool: str
    summary: str = Field(description="The consequence in one line; quoted values are the model's (untrusted).")
    digest: str
    policy_revision: str
    contract_revision: str
    requested_at: str
    expires_at: str
    decided_by: str | None
    decided_at: str | None
    reason: str | None
    action: str = Field(default="", description="What will happen, to what (quoted values untrusted).")
    visible_to: str = Field(default="", description="Who will see it.")
    shown: dict[str, str] = Field(default_factory=dict,
                                  description="The model's arguments to read verbatim. Untrusted.")
    preconditions: list[str] = Field(default_factory=list, description="The facts the approval rests on.")
    recovery: list[str] = Field(default_factory=list, description="What can be done if it goes wrong.")
    edited_into: str | None = Field(default=None, description="The candidate a reviewer's edit made instead.")


class ReviewDetail(_Out):
    """A review with the technical detail a reviewer may open."""

    review: Review
    intent: Intent
    decidable: bool = Field(description="Waiting, not expired, and the intent still awaits it.")
    arguments: dict[str, Any] = Field(description="The normalized arguments the digest covers. Untrusted.")
    proposed_arguments: dict[str, Any] = Field(description="The arguments as the model proposed them. Untrusted.")
    resource: dict[str, str]
    destination: str
    effect_class: str
    policy_reasons: list[str]


class IntentDetail(_Out):
    """An intent with its timeline, its reviews and its lineage.

    The candidate's raw argument text and provider item are an operator's to read: a
    reviewer's timeline has them withheld."""

    intent: Intent
    timeline: list[TimelineEvent]
    reviews: list[Review]
    lineage: list[Intent] = Field(default_factory=list,
                                  description="Its lineage from the first candidate (itself included).")


class ReviewList(_Out):
    """Reviews, oldest request first."""

    items: list[Review]


class Outcomes(_Out):
    """Intents whose outcome is unknown, or that wait for an operator."""

    items: list[Intent]


class Decision(BaseModel):
    """Approve or deny exactly the review shown: its id and the digest of its bytes."""

    model_config = ConfigDict(extra="forbid")

    review_id: str = Field(pattern=ID)
    digest: str = Field(pattern=DIGEST, description="The digest shown; refused if the review is of other bytes.")
    reason: str = Field(default="", max_length=300)


class Edit(BaseModel):
    """Narrower arguments instead of the ones under review: a new candidate, every gate again."""

    model_config = ConfigDict(extra="forbid")

    review_id: str = Field(pattern=ID)
    digest: str = Field(pattern=DIGEST, description="The digest shown; refused if the review is of other bytes.")
    arguments: str = Field(min_length=1, max_length=65536,
                           description="The raw argument text proposed instead, as a model would write it.")
    reason: str = Field(default="", max_length=300)


class EditedInto(_Out):
    """The new candidate an edit made (the original will not run)."""

    candidate_id: str
    call_id: str
    by: str


class Resolution(BaseModel):
    """An operator's finding about an unknown outcome."""

    model_config = ConfigDict(extra="forbid")

    finding: Literal["confirmed", "absent"]
    why: str = Field(min_length=1, max_length=500, description="The evidence, recorded with who decided.")


class Withdrawal(BaseModel):
    """Stop a candidate by its state."""

    model_config = ConfigDict(extra="forbid")

    why: str = Field(default="", max_length=300)


class Recorded(_Out):
    """What the record now says, and under whose name."""

    recorded: str = Field(description="The event appended (ReviewApproved, Reconciled, …).")
    by: str


class Withdrawn(_Out):
    """What the model is now told about the candidate."""

    candidate_id: str
    status: str = Field(description="withdrawn, withdrawal_requested, interruption_requested, …")
    code: str


class ShadowSide(_Out):
    """One bundle's decision on the request: the active one's (enforced) or the shadow's (recorded only)."""

    revision: str
    outcome: str
    reasons: list[str]
    determining: list[str] = Field(description="The policies that determined it.")


class ShadowDecision(_Out):
    """An intent's latest decision beside the shadow bundle's on the same request and evidence."""

    intent_id: str
    tenant: str
    run_id: str
    tool: str
    decided_at: str
    active: ShadowSide
    shadow: ShadowSide
    flip: str = Field(description='"" when both agree, else <active>-><shadow> (allow->deny, ...).')
    policy: str = Field(description="The policies that determined the shadow's decision and not the "
                                    "active one's, joined by ','; for a flip to deny, the forbids that denied.")
    link: str = Field(description="The intent's page.")


class ShadowFlip(_Out):
    """How many intents the shadow bundle flips one way, on one capability, by one policy."""

    tool: str
    flip: str
    policy: str
    count: int


class ShadowReport(_Out):
    """What the shadow bundle would change: its flips counted, and the latest flipped decisions."""

    revision: str | None = Field(description="The shadow bundle's revision read (null: no shadow decision yet).")
    flips: list[ShadowFlip]
    flipped: list[ShadowDecision] = Field(description="The latest flipped decisions, newest first.")
