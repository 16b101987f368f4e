"""Wire messages between agent runtimes, services and adapters (not events)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from lockgate.contracts.capability import CapabilityContract
from lockgate.contracts.vocabulary import ClaimVerdict, QueryFinding, ReportStage


class OpenRun(msgspec.Struct, frozen=True, kw_only=True):
    """The trusted host opens a run with authoritative context."""

    tenant: str
    actor: str
    context: dict[str, str] = msgspec.field(default_factory=dict)
    delegation: str | None = None
    stage: str = "default"
    roles: tuple[str, ...] = ()
    run_id: str | None = None
    #: The data classes the run may touch (``None``: any); a capability touching others
    #: is not offered in its turns.
    data_classes: tuple[str, ...] | None = None
    #: The capabilities the run's agent uses (``None``: every one the deployment has); the
    #: others are not offered in its turns, whatever else allows them.
    capabilities: tuple[str, ...] | None = None
    #: Seconds the run may stay idle (no turn opened, no call proposed) before it ends, as
    #: a close would end it (``None``: it ends only when closed).
    lease_s: float | None = None


class CloseRun(msgspec.Struct, frozen=True, kw_only=True):
    """The trusted host ends a run: no turn or call after it, and what it left waiting is withdrawn."""

    run_id: str
    why: str = ""


class RunClosed(msgspec.Struct, frozen=True, kw_only=True):
    """Reply to ``CloseRun``: the candidates that were waiting, and what each became."""

    run_id: str
    withdrawn: dict[str, str] = msgspec.field(default_factory=dict)


class RunOpened(msgspec.Struct, frozen=True, kw_only=True):
    """Reply to ``OpenRun``."""

    run_id: str
    tenant: str
    actor: str


class RunContext(msgspec.Struct, frozen=True, kw_only=True):
    """A run as intake keeps it in the runs bucket."""

    run_id: str
    tenant: str
    actor: str
    context: dict[str, str]
    delegation: str | None
    stage: str
    opened_at: datetime
    roles: tuple[str, ...] = ()
    data_classes: tuple[str, ...] | None = None
    capabilities: tuple[str, ...] | None = None
    lease_s: float | None = None


class OpenTurn(msgspec.Struct, frozen=True, kw_only=True):
    """An agent runtime asks for the catalogue of a new turn."""

    turn_id: str | None = None


class Tool(msgspec.Struct, frozen=True):
    """One tool offered to the model."""

    name: str
    description: str
    parameters: dict[str, Any]


class TurnOpened(msgspec.Struct, frozen=True, kw_only=True):
    """Reply to ``OpenTurn``: the snapshot of the catalogue offered in this turn."""

    turn_id: str
    catalogue_digest: str
    tools: tuple[Tool, ...]


class Catalogue(msgspec.Struct, frozen=True, kw_only=True):
    """The capabilities offered in a turn, with the contract revision of each.

    Snapshotted by digest when the turn opens: what the model was offered, the schema
    revision and effect class of each tool, and the capabilities that exist but were
    withheld from this turn, with why (``lockgate.contracts.offer``).
    """

    tools: tuple[Tool, ...]
    revisions: dict[str, str]
    schema_revisions: dict[str, int] = msgspec.field(default_factory=dict)
    effects: dict[str, str] = msgspec.field(default_factory=dict)
    withheld: dict[str, str] = msgspec.field(default_factory=dict)


class Candidate(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One complete tool call the model emitted, as the agent runtime saw it.

    ``arguments`` is the raw text the model produced, untouched: duplicate keys and
    all, it is parsed by intake and nowhere else.
    """

    run_id: str
    turn_id: str
    call_id: str
    tool: str
    arguments: str
    provider_item: dict[str, Any] | None = None
    """The provider's own item the call came in (its ``tool_calls`` entry, ``function_call``
    item, ``tool_use`` block or ``functionCall`` part), kept on the record, bounded."""
    provider: str = ""
    """Which format the call came in: ``openai.chat``, ``openai.responses``,
    ``anthropic.messages``, ``gemini`` (``lockgate.client.providers``); empty when the
    runtime extracted the call itself."""
    model: str = ""
    """The model the runtime says produced the call (evidence, never trusted for a decision)."""
    follows: str | None = None
    """The call id of the candidate of the same run this one corrects or follows."""
    assembly_failure: str | None = None
    """Set when the runtime could not assemble the call from its stream: a ``stream.*``
    reason code. ``arguments`` then holds what arrived (bounded); intake records the call
    as rejected with that cause, and nothing is normalized or sent."""


class Refusal(msgspec.Struct, frozen=True):
    """A request/reply answer that says no, with a stable code."""

    error: str
    detail: str = ""


# --- adapters -------------------------------------------------------------------


class Describe(msgspec.Struct, frozen=True):
    """Reply of an adapter's ``describe``: the contract it serves.

    Also its registration in ``LG_CAPABILITIES``, renewed every few seconds:
    ``alive_at`` is the adapter's last heartbeat, so a turn's catalogue offers only
    capabilities whose adapter is alive without asking each one.
    """

    contract: CapabilityContract
    adapter: str
    alive_at: datetime | None = None


class Facts(msgspec.Struct, frozen=True, kw_only=True):
    """Current facts about a resource, bounded; ``revision`` names the state observed."""

    facts: dict[str, str | int | bool]
    revision: str = ""


class NormalizeRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Ask an adapter to canonicalise model arguments with run context.

    ``with_facts``: answer the facts about the normalized resource too (policy's
    evidence, in the same round trip; ``NormalizeResult.facts``).
    """

    tenant: str
    actor: str
    arguments: dict[str, Any]
    context: dict[str, str]
    with_facts: bool = False


class NormalizeResult(msgspec.Struct, frozen=True, kw_only=True):
    """Canonical arguments and the exact resource they address, or a reason."""

    arguments: dict[str, Any] = msgspec.field(default_factory=dict)
    resource: dict[str, str] = msgspec.field(default_factory=dict)
    destination: str = ""
    reason: str | None = None
    field: str | None = None
    #: The facts about ``resource`` right after normalizing, when the request asked for
    #: them and the adapter had them (``None``: ask ``facts`` separately).
    facts: Facts | None = None


class FactsRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Ask an adapter for current facts about a resource, for an actor."""

    tenant: str
    actor: str
    resource: dict[str, str]


class QueryRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Ask an adapter whether the effect with this identity happened."""

    tenant: str
    intent_id: str
    intent_key: str
    arguments: dict[str, Any]


class QueryResult(msgspec.Struct, frozen=True, kw_only=True):
    """``found`` with its receipt, ``absent``, or ``unknown`` (the query itself failed).

    Any other finding reads as ``unknown``: it is no evidence either way.
    """

    finding: QueryFinding
    receipt: dict[str, str] = msgspec.field(default_factory=dict)


class ExecutionOrder(msgspec.Struct, frozen=True, kw_only=True):
    """What the executor sends an adapter after ``ExecutionAuthorized`` is recorded."""

    tenant: str
    intent_id: str
    attempt_id: str
    intent_key: str
    capability: str
    digest: str
    arguments: dict[str, Any]
    resource: dict[str, str]
    actor: str
    preconditions: dict[str, str | int | bool]
    authorized_version: int
    """Aggregate version of the ``ExecutionAuthorized`` event the order was sent for (a claim
    of its boundary is decided on a record at least that long)."""
    report_token: str = ""
    """The executor's proof that it sent this order (an HMAC over tenant, intent, attempt
    and capability, with a key only the executor has): every report about the attempt
    echoes it. It is in no event and no log line."""


class AttemptReport(msgspec.Struct, frozen=True, kw_only=True):
    """An adapter's report of one attempt transition.

    ``stage``: ``acknowledged`` and ``observed`` (how far the remote system got, after
    the boundary), ``completed`` (with receipt and result), ``rejected`` (the remote system
    refused; nothing happened), ``interrupted``, ``failed_before_send``. Crossing the send
    boundary is not reported but claimed (``Claim``); a ``sent`` report records nothing,
    and ``refused_order`` and ``withdrawn`` (what workers reported before claims were asked
    of the executor) read as not sent. Any other stage reads as ``other``: the report is
    hostile input, refused or ignored, never a decoding error.
    """

    tenant: str
    intent_id: str
    attempt_id: str
    stage: ReportStage
    reason: str | None = None
    detail: str = ""
    receipt: dict[str, str] = msgspec.field(default_factory=dict)
    result: dict[str, Any] = msgspec.field(default_factory=dict)
    adapter: str = ""
    """The adapter process that reported (provenance of the result)."""
    reported_at: datetime | None = None
    token: str = ""
    """The order's ``report_token``, echoed: proof the reporter received the order."""


# --- reviews ----------------------------------------------------------------------


class EditReview(msgspec.Struct, frozen=True, kw_only=True):
    """A reviewer's narrower version of the call under review (the original is not run).

    ``arguments`` is the raw argument text the reviewer proposes instead, as a model
    would write it; it becomes a *new* candidate of the same run and turn, which crosses
    every gate again (and gets its own digest, and its own review if policy asks).
    ``digest`` is that of the review the reviewer saw. Who edits is the subject's last
    token (``lg.review.<tenant>.<intent>.edit.<reviewer>``), never the payload.
    """

    review_id: str
    digest: str
    arguments: str
    reason: str = ""


class Edited(msgspec.Struct, frozen=True, kw_only=True):
    """Reply to an edit: the original's review is closed; the new candidate's identity."""

    candidate_id: str
    call_id: str


class DecideReview(msgspec.Struct, frozen=True, kw_only=True):
    """A reviewer's decision on one review; ``digest`` is what the reviewer saw.

    Who decides is not in the payload: it is the authenticated user the request's
    subject names (``lg.review.<tenant>.<intent>.decide.<reviewer>``).
    """

    review_id: str
    digest: str
    approve: bool
    reason: str = ""


class ReviewView(msgspec.Struct, frozen=True, kw_only=True):
    """What a reviewer is shown of an open review (reply to ``show``)."""

    review_id: str
    candidate_id: str
    tenant: str
    actor: str
    tool: str
    summary: str
    digest: str
    resource: dict[str, str]
    destination: str
    expires_at: datetime
    state: str
    #: The review object: what will happen, who sees it, the model's arguments to read
    #: verbatim (untrusted text), the facts it rests on, what can be done if it goes wrong.
    action: str = ""
    visible_to: str = ""
    shown: dict[str, str] = msgspec.field(default_factory=dict)
    preconditions: tuple[str, ...] = ()
    recovery: tuple[str, ...] = ()
    policy_revision: str = ""
    contract_revision: str = ""


class Recorded(msgspec.Struct, frozen=True):
    """Reply to a command that was recorded: the event type it became."""

    event: str


# --- operators and runtimes acting on intents -------------------------------------------


class PolicyCommand(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """An operator manages the policy bundles (the verb is the subject's; who, the
    authenticated operator the subject names).

    ``shadow``: ``files`` is the bundle to run beside the active one, by relative path
    (``*.cedar``, ``*.cedarschema``, ``bundle.yaml``). ``promote``: ``revision`` is the
    shadow's the operator saw, and ``flips`` the allow-to-deny flips they confirmed.
    """

    files: dict[str, str] = msgspec.field(default_factory=dict)
    revision: str = ""
    flips: int = 0


class PolicyChange(msgspec.Struct, frozen=True, kw_only=True):
    """One change of the bundles: ``shadow`` (started), ``shadow-off`` or ``promote``, as the
    log keeps it and an operator is shown it.

    ``revision`` is the shadow's, ``active_revision`` the bundle active when it was made
    (for a promotion: the one replaced); ``flips`` the allow-to-deny flips of the shadow's
    recent decisions the operator confirmed.
    """

    action: str
    revision: str
    active_revision: str
    by: str
    at: datetime
    flips: int = 0


class PolicyStatus(msgspec.Struct, frozen=True, kw_only=True):
    """Where the bundles stand: the active one, the shadow beside it, the recent changes."""

    active_revision: str
    shadow_revision: str | None = None
    shadow_by: str | None = None
    shadow_since: datetime | None = None
    changes: tuple[PolicyChange, ...] = ()


class ResolveOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """An operator settles an unknown outcome: ``confirmed`` or ``absent``, and why.

    Who is the authenticated operator the subject names, never the payload. ``finding``
    is a ``Finding`` value, read as text here: the reconciler refuses any other one with
    ``reconcile.bad-finding`` (a reason code), not as a malformed message.
    """

    finding: str
    why: str
    receipt: dict[str, str] = msgspec.field(default_factory=dict)


class NotResolved(msgspec.Struct, frozen=True, kw_only=True):
    """Reply to a ``ResolveOutcome`` that was not recorded: why, and what settled the intent.

    ``error`` and ``detail`` make it readable as a ``Refusal``. For
    ``reconcile.already-settled`` the other fields name the event that settled the
    outcome first (the reconciler's query, a late adapter report, another operator).
    """

    error: str
    detail: str = ""
    state: str = ""
    settled_by: str = ""
    """``Reconciled`` or ``EffectCompleted``."""
    finding: str = ""
    """The settling ``Finding`` (empty when nothing settled the outcome)."""
    resolution: str = ""
    """The settling ``Resolution`` (empty when nothing settled the outcome)."""
    by: str = ""
    receipt: dict[str, str] = msgspec.field(default_factory=dict)
    settled_at: datetime | None = None


class Withdraw(msgspec.Struct, frozen=True, kw_only=True):
    """Stop a candidate by its state; who asks is the user the subject names."""

    why: str = ""


# --- the send boundary, claimed by asking the executor ----------------------------------


class Claim(msgspec.Struct, frozen=True, kw_only=True):
    """A worker about to write asks to cross its order's send boundary (``lg.claim.<capability>``).

    ``claimant`` names this try of the order (a claim asked again after its answer was
    lost is answered the same). ``written``: the adapter wrote without crossing (it forgot
    to): the effect may exist, and the executor records the attempt as sent.
    """

    order: ExecutionOrder
    claimant: str
    written: bool = False


class ClaimAnswer(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Reply to ``Claim``: crossed (write before ``not_after``), refused, or unchecked."""

    verdict: ClaimVerdict
    reason: str = ""
    detail: str = ""
    not_after: datetime | None = None
    """The latest moment the write may take effect (``SendBoundary.not_after``)."""
