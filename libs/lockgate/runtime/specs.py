"""Every Lockgate process's spec: what it consumes and by which reaction, appends, answers, touches.

This is the one place the wiring is written (``lockgate.runtime.spec`` for the shape).
Each service's spec is of its own class, whose fields are its consumers and requests named
after their reactions: an app binds ``EXECUTOR.ready`` to its entry, by reference.
The durables, the broker permissions, what ``make run`` supervises, each app's
subscriptions and the AsyncAPI channels are derived from it, and a unit test checks
that every event has a producer and a consumer, or a reason in ``UNCONSUMED`` why none.

Which event types reach which reaction is declared here and nowhere else; a reaction
that acts on only some outcomes of an event it is handed (a ``PolicyDecided`` that
allows) says so at its top.
"""

from __future__ import annotations

from dataclasses import dataclass

from lockgate.contracts import channels
from lockgate.contracts.vocabulary import DecisionOutcome, Resolution, Settles
from lockgate.intent.aggregate import Event
from lockgate.intent.events import (
    ApprovalRefused,
    AttemptAcknowledged,
    AttemptFailedBeforeSend,
    AttemptInterrupted,
    AttemptRejected,
    AttemptSent,
    CandidateNormalized,
    CandidateReceived,
    CandidateRejected,
    EffectCompleted,
    ExecutionAuthorized,
    GateRefused,
    IntentArchived,
    InterruptionRequested,
    NormalizationFailed,
    OutcomeUnknown,
    PolicyDecided,
    ProcessingAbandoned,
    Reconciled,
    ReportRefused,
    ResultObserved,
    ReviewApproved,
    ReviewDenied,
    ReviewExpired,
    ReviewRequested,
    WithdrawalRequested,
    Withdrawn,
)
from lockgate.runtime.spec import TIMERS, AdapterSpec, Answer, Consumer, ServiceSpec
from lockgate.runtime.streams import (
    BUDGETS_BUCKET,
    CANDIDATES,
    CAPABILITIES_BUCKET,
    CATALOGUES_BUCKET,
    LEASES,
    LOCKS_BUCKET,
    POLICY_BUCKET,
    PROGRESS_BUCKET,
    REPORTS,
    RUNS_BUCKET,
)

#: Events the model learns of: intake answers the agent runtime when one is recorded.
MODEL_VISIBLE: tuple[type[Event], ...] = (
    CandidateRejected,
    NormalizationFailed,
    PolicyDecided,
    ReviewRequested,
    ReviewDenied,
    ReviewExpired,
    GateRefused,
    EffectCompleted,
    AttemptRejected,
    OutcomeUnknown,
    Reconciled,
    Withdrawn,
    WithdrawalRequested,
    InterruptionRequested,
    AttemptInterrupted,
    ProcessingAbandoned,
)

#: Events after which an intent may no longer hold its resource lock
#: (``lockgate.intent.locks``): the executor releases the lock on each of them, from the
#: record, whatever happened to the process that appended it. A unit test derives this
#: list from the aggregate, so an event that can end a hold cannot be left out.
ENDS_HOLD: tuple[type[Event], ...] = (
    GateRefused,
    EffectCompleted,
    AttemptRejected,
    AttemptInterrupted,
    Withdrawn,
    Reconciled,
    ProcessingAbandoned,
)

#: Of those, the ones only the executor's own consumers append, the gate (``GateRefused``)
#: and the reports (the attempt's end): the handler that appends one frees the lock before
#: its trigger is acknowledged, and one that dies in between is handed the same trigger
#: again, finds the hold ended on the record and frees it then. So the lock durable is not
#: handed them; a unit test checks each is appended by no other reaction.
ENDS_HOLD_BY_TRIGGER: tuple[type[Event], ...] = (
    GateRefused,
    EffectCompleted,
    AttemptRejected,
    AttemptInterrupted,
)

#: The events that end a hold elsewhere (a withdrawal answered on request, the reconciler,
#: any consumer giving a message up): these are what the lock durable is handed.
ENDS_HOLD_ELSEWHERE: tuple[type[Event], ...] = tuple(
    e for e in ENDS_HOLD if e not in ENDS_HOLD_BY_TRIGGER)

#: Every event that can end an intent (a ``PolicyDecided`` only when it denies): budget
#: holds are settled from the record.
ENDS_INTENT: tuple[type[Event], ...] = (
    EffectCompleted,
    Reconciled,
    AttemptRejected,
    GateRefused,
    Withdrawn,
    ReviewDenied,
    ReviewExpired,
    AttemptInterrupted,
    ProcessingAbandoned,
    NormalizationFailed,
    PolicyDecided,
)

# How many deliveries each consumer with timers may take for one message: its longest
# legitimate wait, with room for a few failures (the process gives the message up on the
# record from there, and the server stops a few deliveries later: invariant 7 of docs/design.md).
# A nak with a delay is a delivery to the server, so every timer that comes due counts.

#: ``policy-pauses``: a pause is asked again every ``recheck_s`` until ``timeout_s``, so
#: timeout / recheck + 1 deliveries: 61 at the defaults (120 s, 2 s). A bundle may ask for
#: up to ``MAX_PAUSE_RECHECKS`` (900: half an hour at 2 s); the rest is room for failures.
PAUSE_DELIVERIES = 1_000
#: How long an open review's timer waits at most before it looks again.
EXPIRY_RECHECK_S = 3600.0
#: ``approval-expiry``: a review comes back every ``EXPIRY_RECHECK_S`` at most until it
#: expires, so ceil(ttl / 3,600 s) + 1 deliveries: 2 at the default hour, 337 at the
#: longest ``review_ttl_s`` (``MAX_REVIEW_TTL_S``, 14 days).
EXPIRY_DELIVERIES = 400
#: ``executor-gate``: a gate waiting for its resource's lock asks again every 0.25 s; a
#: lock is held for an attempt's outcome deadline (30 s by default: 120 deliveries), or
#: for the lock's time to live (300 s: 1,200) when its holder died; missing facts are
#: asked for every second; an authorized trigger comes back once at its attempt's deadline.
#: About 20 minutes of waiting behind other effects on one resource.
GATE_DELIVERIES = 5_000
#: ``reconciler``: an unanswered or inconclusive query is asked again after 1, 2, 4 …
#: seconds, capped at 60: a minute apart from the 7th delivery on, so about 25 hours of
#: asking before the outcome is handed to an operator.
RECONCILE_DELIVERIES = 1_500

@dataclass(frozen=True, kw_only=True)
class IntakeSpec(ServiceSpec):
    """Intake's consumers and requests, each named after its reaction."""

    candidate: Consumer
    respond: Consumer
    lease: Consumer
    open_run: Answer
    close_run: Answer
    open_turn: Answer


INTAKE = IntakeSpec(
    "intake",
    candidate=Consumer("intake", "candidate", channel=channels.PROPOSE, stream=CANDIDATES),
    # A decision to allow or to ask a reviewer is not news to the model: what follows is.
    respond=Consumer("intake-responses", "respond", MODEL_VISIBLE,
                     routes=((PolicyDecided, (DecisionOutcome.DENY, DecisionOutcome.PAUSE)),)),
    # Runs' leases: a close, or the server's marker on a lease that ran out, ends a run
    # (lockgate.intake.leases); what it left waiting is withdrawn.
    lease=Consumer("intake-run-ends", "lease", channel=channels.LEASE, stream=LEASES),
    open_run=Answer(channels.RUN_OPEN, "open_run"),
    close_run=Answer(channels.RUN_CLOSE, "close_run"),
    open_turn=Answer(channels.TURN, "open_turn"),
    appends=(CandidateReceived, CandidateRejected),
    # LG_BUDGETS: the flood limits (rates, in-flight caps) intake admits by.
    reads=(CAPABILITIES_BUCKET, RUNS_BUCKET, CATALOGUES_BUCKET, BUDGETS_BUCKET),
    lists=(CAPABILITIES_BUCKET,),
    writes=(RUNS_BUCKET, CATALOGUES_BUCKET, BUDGETS_BUCKET),
    # A run's end withdraws what it left waiting: intake asks the executor, as ``intake``.
    asks=(channels.ADAPTER_DESCRIBE, channels.WITHDRAW),
    publishes=(channels.RESPONSE, channels.LEASE),
)

@dataclass(frozen=True, kw_only=True)
class NormalizationSpec(ServiceSpec):
    """Normalization's consumer, named after its reaction."""

    received: Consumer


NORMALIZATION = NormalizationSpec(
    "normalization",
    received=Consumer("normalization", "received", (CandidateReceived,)),
    appends=(CandidateNormalized, NormalizationFailed),
    reads=(CAPABILITIES_BUCKET, RUNS_BUCKET),
    asks=(channels.ADAPTER_NORMALIZE,),
)

@dataclass(frozen=True, kw_only=True)
class PolicySpec(ServiceSpec):
    """Policy's consumers, each named after its reaction."""

    normalized: Consumer
    paused: Consumer
    settled: Consumer
    commands: Answer


POLICY = PolicySpec(
    "policy",
    normalized=Consumer("policy", "normalized", (CandidateNormalized,)),
    paused=Consumer("policy-pauses", "paused", (PolicyDecided,),
                    routes=((PolicyDecided, (DecisionOutcome.PAUSE,)),),
                    max_ack_pending=TIMERS, timers=True, deliveries=PAUSE_DELIVERIES),
    # Handed an intent's end only when it holds something of policy's (its route).
    settled=Consumer("policy-budgets", "settled", ENDS_INTENT,
                     routes=((PolicyDecided, (DecisionOutcome.DENY,)),
                             *((e, (Settles.BUDGET,)) for e in ENDS_INTENT if e.routed_by == "settles"))),
    commands=Answer(channels.POLICY, "commands"),
    appends=(PolicyDecided,),
    reads=(PROGRESS_BUCKET, BUDGETS_BUCKET, CAPABILITIES_BUCKET, RUNS_BUCKET, POLICY_BUCKET),
    writes=(PROGRESS_BUCKET, BUDGETS_BUCKET, POLICY_BUCKET),
    asks=(channels.ADAPTER_FACTS,),
)

@dataclass(frozen=True, kw_only=True)
class ApprovalSpec(ServiceSpec):
    """Approval's consumers and requests, each named after its reaction."""

    decided: Consumer
    review_opened: Consumer
    show: Answer
    decide: Answer
    edit: Answer


APPROVAL = ApprovalSpec(
    "approval",
    decided=Consumer("approval", "decided", (PolicyDecided,),
                     routes=((PolicyDecided, (DecisionOutcome.REQUIRE_APPROVAL,)),)),
    review_opened=Consumer("approval-expiry", "review_opened", (ReviewRequested,),
                           max_ack_pending=TIMERS, timers=True, deliveries=EXPIRY_DELIVERIES),
    show=Answer(channels.REVIEW_SHOW, "show"),
    decide=Answer(channels.REVIEW_DECIDE, "decide"),
    edit=Answer(channels.REVIEW_EDIT, "edit"),
    appends=(
        ReviewRequested,
        ReviewApproved,
        ReviewDenied,
        ReviewExpired,
        ApprovalRefused,
    ),
    # Runs for the reviewer's scope; capabilities for how a consequence reads.
    reads=(RUNS_BUCKET, CAPABILITIES_BUCKET),
    # A reviewer's edit becomes a new candidate of the run it came from.
    publishes=(channels.PROPOSE,),
)

@dataclass(frozen=True, kw_only=True)
class ExecutorSpec(ServiceSpec):
    """The executor's consumers and requests, each named after its reaction."""

    ready: Consumer
    report: Consumer
    settled: Consumer
    withdraw: Answer
    claim: Answer


EXECUTOR = ExecutorSpec(
    "executor",
    # The gate waits (Retry) for a resource lock and for facts. The trigger of an
    # attempt it authorized is its timer too: asked for again at the attempt's
    # deadline (so it holds a message per open attempt), when silence becomes
    # OutcomeUnknown; handed again after a crash, it sends an order left unsent.
    ready=Consumer(
        "executor-gate", "ready",
        (PolicyDecided, ReviewApproved,
         AttemptFailedBeforeSend, Reconciled),
        routes=((PolicyDecided, (DecisionOutcome.ALLOW,)),
                (Reconciled, (Resolution.RETRY,))),
        max_ack_pending=TIMERS, timers=True, deliveries=GATE_DELIVERIES,
    ),
    report=Consumer("executor-reports", "report", channel=channels.REPORT, stream=REPORTS),
    # What makes release survive a crash right after an append that ended a hold, for
    # the events no trigger of the executor's own is handed again for.
    settled=Consumer("executor-locks", "settled", ENDS_HOLD_ELSEWHERE),
    withdraw=Answer(channels.WITHDRAW, "withdraw"),
    claim=Answer(channels.CLAIM, "claim"),
    appends=(
        ExecutionAuthorized,
        GateRefused,
        AttemptSent,
        EffectCompleted,
        AttemptRejected,
        AttemptFailedBeforeSend,
        OutcomeUnknown,
        Reconciled,
        Withdrawn,
        InterruptionRequested,
        AttemptAcknowledged,
        ResultObserved,
        AttemptInterrupted,
        WithdrawalRequested,
        ReportRefused,
    ),
    reads=(CAPABILITIES_BUCKET, LOCKS_BUCKET, BUDGETS_BUCKET, PROGRESS_BUCKET, RUNS_BUCKET),
    # The run's history (``LG_PROGRESS``): what an authorized attempt may bring into the run.
    writes=(LOCKS_BUCKET, PROGRESS_BUCKET),
    asks=(channels.ADAPTER_FACTS,),
    publishes=(channels.EXEC, channels.INTERRUPT),
)

@dataclass(frozen=True, kw_only=True)
class ReconcilerSpec(ServiceSpec):
    """The reconciler's consumer and request, each named after its reaction."""

    unknown: Consumer
    resolve: Answer


RECONCILER = ReconcilerSpec(
    "reconciler",
    # It asks again (Retry) while no adapter answers its query.
    unknown=Consumer("reconciler", "unknown", (OutcomeUnknown,), timers=True,
                     deliveries=RECONCILE_DELIVERIES),
    resolve=Answer(channels.RESOLVE, "resolve"),
    appends=(Reconciled,),
    reads=(CAPABILITIES_BUCKET,),
    asks=(channels.ADAPTER_QUERY,),
)

#: The services, in the order ``make run`` starts them.
SERVICES: tuple[ServiceSpec, ...] = (INTAKE, NORMALIZATION, POLICY, APPROVAL, EXECUTOR, RECONCILER)

#: The demo deployment's adapter processes.
CASENOTES = AdapterSpec("casenotes", "lockgate.worlds.casenotes", ("case.add_note",))
ITEMS = AdapterSpec("items", "lockgate.worlds.items", ("draft.prepare_private", "item.publish"))
REPO = AdapterSpec("repo", "lockgate.worlds.repo", (
    "repo.read_file", "review.prepare_summary", "repo.prepare_patch", "repo.run_tests",
    "review.publish_summary",
))
#: The MCP adapter: the product capabilities ``deploy/mcp/servers.yaml`` declares (a unit
#: test keeps the two equal); a deployment with other servers lists its own in
#: ``LOCKGATE_ADAPTERS``. Never a remote server's names.
MCP = AdapterSpec("mcp", "lockgate.mcp", ("board.draft_private", "board.publish"))
ADAPTERS: tuple[AdapterSpec, ...] = (CASENOTES, ITEMS, REPO, MCP)

#: Events appended by the read side's processes (``status.READ_SIDE``), not a service.
READ_SIDE_APPENDS: dict[str, tuple[type[Event], ...]] = {
    "archiver": (IntentArchived,),
}

#: Events no durable is handed, and why that is right.
UNCONSUMED: dict[type[Event], str] = {
    ExecutionAuthorized: (
        "the gate that appends it publishes the attempt's order at once, and holds the "
        "trigger it authorized on as the attempt's timer (handed again at the deadline, "
        "and after a crash before the order went out); adapters are handed the order"),
    IntentArchived: (
        "the archiver's mark after an ended intent, kept as its identity; the projector "
        "folds it with every other event, and a service that loads the intent reads it"),
    ApprovalRefused: (
        "on the record for the audit; the review stays open, and another reviewer's "
        "decision is what moves the intent on"),
    AttemptSent: (
        "progress of an attempt, on the record; the attempt's deadline (from "
        "ExecutionAuthorized) turns the silence after it into OutcomeUnknown"),
    AttemptAcknowledged: (
        "progress of an attempt, on the record; its end (EffectCompleted, AttemptRejected, "
        "OutcomeUnknown) is what others react to"),
    ResultObserved: (
        "progress of an attempt, on the record; the receipt's check that follows it ends "
        "the attempt"),
    ReportRefused: (
        "a report that proved nothing, kept for the audit; it changes no state"),
}
