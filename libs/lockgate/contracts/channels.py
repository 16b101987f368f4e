"""Every subject family on the broker, as a value: its address, its wildcards, what travels on it.

A process's spec (``lockgate.runtime.specs``) names the channels it answers, asks, publishes
and consumes; its broker permissions, its subscriptions and the AsyncAPI document
(``lockgate.cli.schemas``) are derived from those names. The subjects themselves
come from ``lockgate.contracts.subjects``. The events stream (``lg.evt.>``) is not a
channel here: a spec names the event classes it appends and consumes.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from lockgate.contracts import messages as m
from lockgate.contracts import subjects
from lockgate.contracts.responses import ModelResponse
from lockgate.contracts.status import ProcessStatus


@dataclass(frozen=True)
class Channel:
    """A family of subjects and what travels on it.

    ``address`` is the AsyncAPI form (``lg.run.{tenant}.open``); ``subjects`` are the
    wildcards that match every subject of the family (what a subscription or a grant
    names). ``message`` is the body sent (``None``: empty, or not a wire type),
    ``replies`` what a request may be answered with. ``sent_by`` and ``received_by``
    name the parties outside the specs that send on it or read it (people and programs
    at the edge); the processes that do are read off their specs.
    """

    address: str
    subjects: tuple[str, ...]
    message: type[msgspec.Struct] | None
    description: str
    replies: tuple[type[msgspec.Struct], ...] = ()
    sent_by: tuple[str, ...] = ()
    received_by: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.subjects:
            raise ValueError(f"channel {self.address} matches no subject")


RUN_OPEN = Channel(
    subjects.RUN_OPEN.address(), (subjects.RUN_OPEN_ALL,), m.OpenRun,
    "Open a run with authoritative context.",
    replies=(m.RunOpened, m.Refusal), sent_by=("trusted host",),
)
RUN_CLOSE = Channel(
    subjects.RUN_CLOSE.address(), (subjects.RUN_CLOSE_ALL,), m.CloseRun,
    "End a run: what it left waiting is withdrawn, and it takes no more turns or calls.",
    replies=(m.RunClosed, m.Refusal), sent_by=("trusted host",),
)
LEASE = Channel(
    subjects.LEASE.address(), (subjects.LEASE_ALL,), None,
    "A run's lease (stream LG_LEASES, per-message TTL): renewed while the run is used; a close, "
    "or the server's delete marker when it ran out, ends the run.",
)
TURN = Channel(
    subjects.TURN.address(), (subjects.TURN_ALL,), m.OpenTurn,
    "Open a turn; the reply is the catalogue snapshot offered in it.",
    replies=(m.TurnOpened, m.Refusal), sent_by=("agent runtime",),
)
PROPOSE = Channel(
    subjects.PROPOSE.address(), (subjects.PROPOSE_ALL,), m.Candidate,
    "One tool call exactly as the model emitted it (stream LG_CANDIDATES).",
    sent_by=("agent runtime",),
)
RESPONSE = Channel(
    subjects.RESPONSE.address(), (subjects.RESPONSES_ALL,), ModelResponse,
    "What the model sees (stream LG_RESPONSES).",
    received_by=("agent runtime",),
)
REVIEW_SHOW = Channel(
    subjects.REVIEW.address(verb="show"), (subjects.review_all("show"),), None,
    "Show the open review (the request body is empty).",
    replies=(m.ReviewView, m.Refusal), sent_by=("reviewer",),
)
REVIEW_DECIDE = Channel(
    subjects.REVIEW.address(verb="decide"), (subjects.review_all("decide"),),
    m.DecideReview,
    "A reviewer's decision, recorded under the authenticated reviewer.",
    replies=(m.Recorded, m.Refusal), sent_by=("reviewer",),
)
REVIEW_EDIT = Channel(
    subjects.REVIEW.address(verb="edit"), (subjects.review_all("edit"),),
    m.EditReview,
    "A reviewer's narrower arguments: a new candidate of the same run, every gate again.",
    replies=(m.Edited, m.Refusal), sent_by=("reviewer",),
)
WITHDRAW = Channel(
    subjects.WITHDRAW.address(), (subjects.WITHDRAW_ALL,), m.Withdraw,
    "Stop a candidate by its state; the reply says where it stands.",
    replies=(ModelResponse, m.Refusal), sent_by=("agent runtime", "operator"),
)
RESOLVE = Channel(
    subjects.RESOLVE.address(), (subjects.RESOLVE_ALL,),
    m.ResolveOutcome,
    "Settle an unknown outcome, recorded under the authenticated operator.",
    replies=(m.Recorded, m.NotResolved, m.Refusal), sent_by=("operator",),
)
POLICY = Channel(
    subjects.POLICY.address(), (subjects.POLICY_ALL,), m.PolicyCommand,
    "Manage the policy bundles: where they stand, a shadow bundle started or stopped, the "
    "shadow promoted; recorded under the authenticated operator.",
    replies=(m.PolicyStatus, m.Refusal), sent_by=("operator",),
)
EXEC = Channel(
    subjects.EXEC.address(), (subjects.EXEC_ALL,), m.ExecutionOrder,
    "An authorized attempt (stream LG_EXEC).",
)
INTERRUPT = Channel(
    subjects.INTERRUPT.address(), (subjects.INTERRUPT_ALL,), None,
    "Stop a running attempt of an interruptible capability ({intent_id, attempt_id}); "
    "best effort, the attempt's report says how it ended.",
)
CLAIM = Channel(
    subjects.CLAIM.address(), (subjects.CLAIM_ALL,), m.Claim,
    "Cross the send boundary of an order of this capability: decided on the intent's record, "
    "where the executor records what the answer means before it answers.",
    replies=(m.ClaimAnswer, m.Refusal),
)
REPORT = Channel(
    subjects.REPORT.address(), (subjects.REPORT_ALL,), m.AttemptReport,
    "An attempt transition (stream LG_REPORTS).",
)
ADAPTER_DESCRIBE = Channel(
    subjects.ADAPTER.address(verb="describe"), subjects.adapter_all("describe"), None,
    "The contract the adapter serves.",
    replies=(m.Describe, m.Refusal),
)
ADAPTER_NORMALIZE = Channel(
    subjects.ADAPTER.address(verb="normalize"), subjects.adapter_all("normalize"), m.NormalizeRequest,
    "Canonicalise arguments with run context.",
    replies=(m.NormalizeResult, m.Refusal),
)
ADAPTER_FACTS = Channel(
    subjects.ADAPTER.address(verb="facts"), subjects.adapter_all("facts"), m.FactsRequest,
    "Fresh facts about a resource, for an actor.",
    replies=(m.Facts, m.Refusal),
)
ADAPTER_QUERY = Channel(
    subjects.ADAPTER.address(verb="query"), subjects.adapter_all("query"), m.QueryRequest,
    "Did the effect with this identity happen?",
    replies=(m.QueryResult, m.Refusal),
)
STATUS = Channel(
    subjects.STATUS.address(), (subjects.STATUS_ALL,), None,
    "Is the process alive, and do its durables make progress (the request body is empty).",
    replies=(ProcessStatus,), sent_by=("operator", "supervisor"),
)

