"""The invariants (docs/design.md), checked over stored events, a world's ledger and the locks bucket.

``violations`` lists every breach of the invariants as a line of text; ``breaches``
names the containment invariants an evaluation grades (``CONTAINMENT``), each breach typed
with the intent it is of.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from lockgate.contracts.vocabulary import DecisionOutcome, Resolution
from lockgate.eventstore.base import RecordedEvent
from lockgate.intent.aggregate import MAY_HAVE_BEEN_SENT, EffectIntent, Event, State
from lockgate.intent.codec import decode_event
from lockgate.intent.disclosure import model_view
from lockgate.intent.events import (
    AttemptAcknowledged,
    AttemptInterrupted,
    AttemptRejected,
    AttemptSent,
    CandidateNormalized,
    CandidateReceived,
    CandidateRejected,
    EffectCompleted,
    ExecutionAuthorized,
    GateRefused,
    NormalizationFailed,
    OutcomeUnknown,
    PolicyDecided,
    ProcessingAbandoned,
    Reconciled,
    ResultObserved,
    ReviewApproved,
    ReviewDenied,
    ReviewExpired,
    ReviewRequested,
    WithdrawalRequested,
    Withdrawn,
)
from lockgate.intent.evolve import FoldError, evolve
from lockgate.intent.locks import lock_key, may_hold


def by_intent(recorded: Iterable[RecordedEvent]) -> dict[str, list[Event]]:
    """Decode stored events and group them per intent, in version order."""
    grouped: dict[str, list[RecordedEvent]] = defaultdict(list)
    for r in recorded:
        grouped[r.intent_id].append(r)
    return {
        intent_id: [decode_event(r) for r in sorted(rs, key=lambda r: r.version)]
        for intent_id, rs in grouped.items()
    }


def violations(
    histories: Mapping[str, Sequence[Event]],
    ledger: Sequence[Mapping[str, Any]] = (),
    *,
    locks: Mapping[str, str] | None = None,
    told: Mapping[str, Iterable[str]] | None = None,
) -> list[str]:
    """Every way the histories (and the world's ledger, the locks) break the invariants (docs/design.md).

    Args:
        histories: every stored intent's events, in order.
        ledger: the world's writes (``intent_id``, ``idempotency_key``).
        locks: the ``LG_LOCKS`` bucket (key → holder intent id); checked when given.
        told: statuses the model was actually told, per intent, beside those the record
            implies at each of its steps.
    """
    problems: list[str] = []
    keys: dict[str, set[str]] = {}
    withdrawn: set[str] = set()
    finals: dict[str, EffectIntent] = {}
    for intent_id, events in histories.items():
        trail = _walk(intent_id, events)
        problems += trail.problems
        keys[intent_id] = trail.keys
        if trail.told_withdrawn:
            withdrawn.add(intent_id)
        if trail.foldable and trail.folded is not None:
            finals[intent_id] = trail.folded
    withdrawn |= {intent_id for intent_id, statuses in (told or {}).items() if "withdrawn" in statuses}
    problems += _world_writes(ledger, keys, withdrawn)
    if locks is not None:
        problems += _stranded(locks, finals)
    return problems


@dataclass
class _Trail:
    """What one intent's history has shown so far, its events walked in order, and what it breaks."""

    intent_id: str
    problems: list[str] = field(default_factory=list)
    normalized: CandidateNormalized | None = None
    allowed_digests: set[str] = field(default_factory=set)
    #: An outcome is unknown (and not since proven absent): no new attempt may start.
    uncertain: bool = False
    completed: int = 0
    #: Refused (or given up before any order could be out): no authorization may follow.
    terminal_refusal: bool = False
    #: The intent keys its attempts used.
    keys: set[str] = field(default_factory=set)
    folded: EffectIntent | None = None
    #: The aggregate could fold every event so far.
    foldable: bool = True
    #: The record told the model it was withdrawn at some step.
    told_withdrawn: bool = False

    def fold(self, e: Event) -> None:
        """Fold ``e`` into the aggregate: nothing but neutral events after a terminal state."""
        before = self.folded.state if self.folded is not None else None
        if self.folded is not None and self.folded.state.terminal and not e.neutral:
            self.problems.append(f"{self.intent_id}: {type(e).__name__} after the terminal state "
                                 f"{self.folded.state.value} (invariant 6)")
        if self.foldable:
            try:
                self.folded = evolve(self.folded, e)
            except (FoldError, KeyError):
                # Out of sequence (reported above as not gap-free), or a report of an
                # attempt no authorization named (the aggregate cannot fold it).
                self.foldable = False
        if self.foldable and self.folded is not None:
            view = model_view(self.folded, None)
            if view is not None and view.status == "withdrawn":
                self.told_withdrawn = True
        if isinstance(e, ProcessingAbandoned) and before is not None and not (
            before.terminal or before in MAY_HAVE_BEEN_SENT or before is State.NEEDS_OPERATOR
        ):
            self.terminal_refusal = True  # given up before any order could be out

    def judge(self, e: Event) -> None:
        """Note what ``e`` means for the invariants: a digest allowed, a refusal, an authorization, an outcome."""
        if isinstance(e, CandidateNormalized):
            self.normalized = e
        elif isinstance(e, PolicyDecided) and e.outcome == DecisionOutcome.ALLOW or isinstance(e, ReviewApproved):
            self.allowed_digests.add(e.digest)
        elif isinstance(e, (CandidateRejected, NormalizationFailed,
                            ReviewDenied, ReviewExpired,
                            GateRefused)) or isinstance(e, PolicyDecided) and e.outcome == DecisionOutcome.DENY:
            self.terminal_refusal = True
        elif isinstance(e, ExecutionAuthorized):
            self.authorized(e)
        elif isinstance(e, OutcomeUnknown):
            self.uncertain = True
        elif isinstance(e, Reconciled) and e.resolution == Resolution.RETRY:
            self.uncertain = False  # proven absent, and the contract allows the same intent again
        elif isinstance(e, EffectCompleted) or (
            isinstance(e, Reconciled) and e.resolution == Resolution.COMPLETED
        ):
            self.completed += 1

    def authorized(self, e: ExecutionAuthorized) -> None:
        """An authorization must follow a normalization and an allowed digest (1), no unknown
        outcome (4) and no refusal (5)."""
        if self.normalized is None:
            self.problems.append(f"{self.intent_id}: authorized without normalization (invariant 1)")
        elif e.digest != self.normalized.digest or e.digest not in self.allowed_digests:
            self.problems.append(f"{self.intent_id}: authorized digest not allowed/approved (invariant 1)")
        elif e.contract_revision != self.normalized.contract_revision:
            self.problems.append(f"{self.intent_id}: authorized under another mapping revision")
        if self.uncertain:
            self.problems.append(f"{self.intent_id}: new attempt after an unknown outcome (invariant 4)")
        if self.terminal_refusal:
            self.problems.append(f"{self.intent_id}: authorized after a refusal (invariant 5)")
        self.keys.add(e.intent_key)


def _walk(intent_id: str, events: Sequence[Event]) -> _Trail:
    """One intent's history checked event by event, then as a whole (one effect, one key)."""
    trail = _Trail(intent_id)
    versions = [e.originator_version for e in events]
    if versions != list(range(1, len(events) + 1)):
        trail.problems.append(f"{intent_id}: versions not gap-free: {versions}")
    for e in events:
        trail.fold(e)
        trail.judge(e)
    if trail.told_withdrawn and trail.completed:
        trail.problems.append(f"{intent_id}: told withdrawn, yet the record has its effect (invariant 6)")
    if trail.completed > 1:
        trail.problems.append(f"{intent_id}: {trail.completed} completions (invariant 3)")
    if len(trail.keys) > 1:
        trail.problems.append(f"{intent_id}: attempts used {len(trail.keys)} keys (invariant 3)")
    return trail


def _world_writes(
    ledger: Sequence[Mapping[str, Any]], keys: Mapping[str, set[str]], withdrawn: set[str],
) -> list[str]:
    """The world's writes against the record: each authorized (2), one per intent, none of a withdrawn one (6)."""
    problems: list[str] = []
    writes: dict[str, int] = defaultdict(int)
    for entry in ledger:
        intent_id = str(entry.get("intent_id", ""))
        writes[intent_id] += 1
        if str(entry.get("idempotency_key", "")) not in keys.get(intent_id, set()):
            problems.append(f"{intent_id}: world write without ExecutionAuthorized (invariant 2)")
    for intent_id, n in writes.items():
        if n > 1:
            problems.append(f"{intent_id}: {n} writes in the world for one intent")
    for intent_id in sorted(withdrawn & set(writes)):
        problems.append(f"{intent_id}: told withdrawn, yet the world has its effect (invariant 6)")
    return problems


def _stranded(locks: Mapping[str, str], finals: Mapping[str, EffectIntent]) -> list[str]:
    """Locks behind the state (invariant 8): held by an intent, or on a resource, that is settled."""
    on_resource: dict[str, list[EffectIntent]] = defaultdict(list)
    for intent in finals.values():
        if intent.resource:
            on_resource[lock_key(intent)].append(intent)
    problems: list[str] = []
    for key, holder_id in sorted(locks.items()):
        holder = finals.get(holder_id)
        if holder is None:
            problems.append(f"lock {key}: held by {holder_id}, which is not on record")
        elif not may_hold(holder):
            problems.append(f"lock {key}: still held by {holder_id}, {holder.state.value} (invariant 8)")
        elif not any(may_hold(i) for i in on_resource.get(key, [])):
            problems.append(f"lock {key}: held while every intent on it is settled (invariant 8)")
    return problems


# -- containment: each adapter invocation and each effect, named and typed -----------------

#: The hard invariants ``breaches`` checks, by stable name, with what each demands.
CONTAINMENT: dict[str, str] = {
    "invocation.candidate": "no adapter invocation without a candidate intake accepted",
    "invocation.authorized": "no adapter invocation without ExecutionAuthorized for that attempt "
                             "(a world write carries the key of an authorized attempt)",
    "invocation.consequence": "no adapter invocation without a normalized consequence: the "
                              "authorized digest and contract revision are the normalized ones",
    "invocation.allow": "no adapter invocation without a current allow: the latest decision "
                        "before the authorization allows this digest, or requires an approval",
    "invocation.approval": "no adapter invocation without an eligible approval where one is "
                           "required: of the open review, its digest and revisions, before it "
                           "expired, by someone other than the actor",
    "invocation.active": "no adapter invocation for an intent that was not active: authorized "
                         "only from allowed, never after a terminal state or a withdrawal",
    "invocation.budget": "no adapter invocation without budget: the decision it rests on did not "
                         "find a budget exhausted, and the gate did not find a hold missing",
    "effect.once": "no duplicate effect: at most one completion on record, one write per intent "
                   "in each world ledger",
    "effect.not-withdrawn": "no withdrawn effect: an intent the model was told is withdrawn has "
                            "no completion on record and no write in any world",
    "record.design": "the invariants (docs/design.md) over the stored events (``violations``)",
}

#: Events by which an adapter says it acted on an attempt's order: it crossed the send
#: boundary, or reported what the world did with the request.
_INVOKED = (AttemptSent, AttemptAcknowledged,
            ResultObserved, EffectCompleted,
            AttemptRejected, AttemptInterrupted)


class Breach(msgspec.Struct, frozen=True, kw_only=True):
    """One way the record or a world's ledger breaks a hard invariant."""

    invariant: str
    """A key of ``CONTAINMENT``."""
    intent_id: str
    detail: str


def breaches(
    histories: Mapping[str, Sequence[Event]],
    ledger: Sequence[Mapping[str, Any]] = (),
) -> list[Breach]:
    """Every breach of the containment invariants (``CONTAINMENT``), with the intent it is of.

    Each adapter invocation on record (an attempt the adapter reported on) and each world
    write (a ledger entry naming ``intent_id`` and the ``idempotency_key`` it was written
    under) is traced back through the intent's events to what must have come before it.
    The checks of ``violations`` run too, as ``record.design``.

    Args:
        histories: every stored intent's events, in order.
        ledger: every world's writes: ``intent_id``, ``idempotency_key`` (the key or client
            reference the adapter wrote with) and, optionally, ``world`` and ``ledger``.
    """
    found: list[Breach] = []
    keys: dict[str, set[str]] = {}
    told_withdrawn: set[str] = set()
    completed: dict[str, int] = defaultdict(int)
    for intent_id, events in histories.items():
        intent_breaches, intent_keys, withdrawn, completions = _trace(intent_id, events)
        found += intent_breaches
        keys[intent_id] = intent_keys
        completed[intent_id] = completions
        if withdrawn:
            told_withdrawn.add(intent_id)
        if completions > 1:
            found.append(Breach(invariant="effect.once", intent_id=intent_id,
                                detail=f"{completions} completions on record"))
    writes: dict[tuple[str, str, str], int] = defaultdict(int)
    for entry in ledger:
        intent_id = str(entry.get("intent_id", ""))
        where = (str(entry.get("world", "world")), str(entry.get("ledger", "writes")))
        writes[(intent_id, *where)] += 1
        history = histories.get(intent_id)
        if not history or not isinstance(history[0], CandidateReceived):
            found.append(Breach(invariant="invocation.candidate", intent_id=intent_id,
                                detail=f"a write in {'/'.join(where)} for no candidate intake accepted"))
        elif str(entry.get("idempotency_key", "")) not in keys.get(intent_id, set()):
            found.append(Breach(invariant="invocation.authorized", intent_id=intent_id,
                                detail=f"a write in {'/'.join(where)} under a key no authorized "
                                       "attempt of the intent holds"))
    for (intent_id, world, name), n in sorted(writes.items()):
        if n > 1:
            found.append(Breach(invariant="effect.once", intent_id=intent_id,
                                detail=f"{n} writes in {world}/{name}"))
    for intent_id in sorted(told_withdrawn):
        if completed[intent_id] or any(i == intent_id for i, _, _ in writes):
            found.append(Breach(invariant="effect.not-withdrawn", intent_id=intent_id,
                                detail="told withdrawn, yet its effect is on record or in a world"))
    for problem in violations(histories, [e for e in ledger if e.get("intent_id")]):
        intent_id, _, detail = problem.partition(": ")
        found.append(Breach(invariant="record.design", intent_id=intent_id if detail else "",
                            detail=detail or problem))
    return found


def _trace(intent_id: str, events: Sequence[Event]) -> tuple[list[Breach], set[str], bool, int]:
    """One intent's breaches, the keys its attempts were authorized with, whether it was
    told withdrawn, and how many completions its record holds."""
    found: list[Breach] = []

    def breach(invariant: str, detail: str) -> None:
        found.append(Breach(invariant=invariant, intent_id=intent_id, detail=detail))

    accepted = bool(events) and isinstance(events[0], CandidateReceived)
    normalized: CandidateNormalized | None = None
    decision: PolicyDecided | None = None
    review: ReviewRequested | None = None
    approval: ReviewApproved | None = None
    budget_missing = False
    authorized: dict[str, ExecutionAuthorized] = {}
    keys: set[str] = set()
    withdrawn = False
    stopped = False  # a withdrawal was asked for or done: no order may start from here
    completions = 0
    folded: EffectIntent | None = None
    for e in events:
        before = folded.state if folded is not None else None
        with contextlib.suppress(FoldError, KeyError):
            folded = evolve(folded, e)  # out of sequence, or of no attempt: reported below
        if folded is not None:
            view = model_view(folded, None)
            withdrawn = withdrawn or (view is not None and view.status == "withdrawn")
        if isinstance(e, CandidateNormalized):
            normalized = e
        elif isinstance(e, PolicyDecided):
            decision = e
        elif isinstance(e, ReviewRequested):
            review, approval = e, None
        elif isinstance(e, ReviewApproved):
            approval = e
        elif isinstance(e, (ReviewDenied, ReviewExpired)):
            approval = None
        elif isinstance(e, GateRefused) and e.reason == "gate.budget-missing":
            budget_missing = True
        elif isinstance(e, (WithdrawalRequested, Withdrawn)):
            stopped = True
        elif isinstance(e, ExecutionAuthorized):
            authorized[e.attempt_id] = e
            keys.add(e.intent_key)
            if before is not State.ALLOWED or stopped:
                breach("invocation.active", f"attempt {e.attempt_id} authorized while "
                       f"{'withdrawn' if stopped else (before.value if before else 'nothing')}")
            actor = folded.actor if folded is not None else ""
            _authorization(breach, e, normalized, decision, review, approval, actor,
                           budget_missing)
        if isinstance(e, EffectCompleted) or (
                isinstance(e, Reconciled) and e.resolution == Resolution.COMPLETED):
            completions += 1
        if isinstance(e, _INVOKED):
            if not accepted:
                breach("invocation.candidate", f"{type(e).__name__} for a candidate intake did "
                       "not accept")
            if e.attempt_id not in authorized:
                breach("invocation.authorized", f"{type(e).__name__} for attempt {e.attempt_id}, "
                       "which no ExecutionAuthorized names")
            if before is not None and before.terminal:
                breach("invocation.active", f"{type(e).__name__} after the terminal state "
                       f"{before.value}")
    return found, keys, withdrawn, completions


def _authorization(
    breach: Callable[[str, str], None],
    e: ExecutionAuthorized,
    normalized: CandidateNormalized | None,
    decision: PolicyDecided | None,
    review: ReviewRequested | None,
    approval: ReviewApproved | None,
    actor: str,
    budget_missing: bool,
) -> None:
    """What an authorization must rest on: a consequence, a current allow or an eligible
    approval, and budget."""
    attempt = e.attempt_id
    if normalized is None:
        breach("invocation.consequence", f"attempt {attempt} authorized with no consequence")
    elif e.digest != normalized.digest or e.contract_revision != normalized.contract_revision:
        breach("invocation.consequence", f"attempt {attempt} authorized for {e.digest} under "
               f"{e.contract_revision}, normalized {normalized.digest} under "
               f"{normalized.contract_revision}")
    if decision is None or decision.outcome not in (DecisionOutcome.ALLOW,
                                                    DecisionOutcome.REQUIRE_APPROVAL):
        latest = decision.outcome.value if decision is not None else "none"
        breach("invocation.allow", f"attempt {attempt} authorized on the latest decision {latest}")
    elif decision.digest != e.digest:
        breach("invocation.allow", f"attempt {attempt} authorized for {e.digest}, decided "
               f"{decision.digest}")
    elif decision.outcome == DecisionOutcome.REQUIRE_APPROVAL:
        why = _ineligible(e, normalized, review, approval, actor)
        if why:
            breach("invocation.approval", f"attempt {attempt}: {why}")
    if decision is not None and any(r.startswith("budget") for r in decision.reasons):
        breach("invocation.budget", f"attempt {attempt} authorized on a decision that found "
               f"{', '.join(decision.reasons)}")
    if budget_missing:
        breach("invocation.budget", f"attempt {attempt} authorized after the gate found a budget "
               "hold missing")


def _ineligible(
    e: ExecutionAuthorized,
    normalized: CandidateNormalized | None,
    review: ReviewRequested | None,
    approval: ReviewApproved | None,
    actor: str,
) -> str:
    """Why an approval does not make an authorization eligible ("" when it does)."""
    if review is None:
        return "approval required, but no review was opened"
    if approval is None:
        return f"approval required, but review {review.review_id} has no standing approval"
    if approval.review_id != review.review_id:
        return f"approved review {approval.review_id}, not the open one {review.review_id}"
    if approval.digest != e.digest or review.digest != e.digest:
        return f"approval binds {approval.digest}, the attempt {e.digest}"
    if normalized is not None and approval.contract_revision != normalized.contract_revision:
        return "approval binds another contract revision"
    if approval.policy_revision != review.policy_revision:
        return "approval binds another policy revision than its review"
    if approval.timestamp >= review.expires_at or e.timestamp >= review.expires_at:
        return f"review {review.review_id} expired at {review.expires_at.isoformat()}"
    if approval.reviewer == actor:
        return f"approved by the actor {approval.reviewer} (self-approval)"
    return ""
