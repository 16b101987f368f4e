"""DESIGN's invariants, checked over stored events, a world's ledger and the locks bucket."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from eventsourcing.domain import EventSourcingError

from lockgate.contracts.disclosure import model_view
from lockgate.contracts.vocabulary import DecisionOutcome, Resolution
from lockgate.eventstore.base import RecordedEvent
from lockgate.intent.aggregate import MAY_HAVE_BEEN_SENT, EffectIntent, Event, State
from lockgate.intent.codec import decode_event
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
    """Every way the histories (and the world's ledger, the locks) break DESIGN's invariants.

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
        versions = [e.originator_version for e in events]
        if versions != list(range(1, len(events) + 1)):
            problems.append(f"{intent_id}: versions not gap-free: {versions}")
        normalized: EffectIntent.CandidateNormalized | None = None
        allowed_digests: set[str] = set()
        uncertain = False
        completed = 0
        terminal_refusal = False
        intent_keys: set[str] = set()
        folded: EffectIntent | None = None
        foldable = True
        for e in events:
            before = folded.state if folded is not None else None
            if folded is not None and folded.state.terminal and not e.neutral:
                problems.append(f"{intent_id}: {type(e).__name__} after the terminal state "
                                f"{folded.state.value} (invariant 6)")
            if foldable:
                try:
                    folded = e.mutate(folded)
                except (EventSourcingError, AssertionError):
                    foldable = False  # out of sequence: reported above as not gap-free
            if foldable and folded is not None:
                view = model_view(folded, None)
                if view is not None and view.status == "withdrawn":
                    withdrawn.add(intent_id)
            if isinstance(e, EffectIntent.ProcessingAbandoned) and before is not None and not (
                before.terminal or before in MAY_HAVE_BEEN_SENT or before is State.NEEDS_OPERATOR
            ):
                terminal_refusal = True  # given up before any order could be out
            if isinstance(e, EffectIntent.CandidateNormalized):
                normalized = e
            elif isinstance(e, EffectIntent.PolicyDecided) and e.outcome == DecisionOutcome.ALLOW or isinstance(e, EffectIntent.ReviewApproved):
                allowed_digests.add(e.digest)
            elif isinstance(e, (EffectIntent.CandidateRejected, EffectIntent.NormalizationFailed,
                                EffectIntent.ReviewDenied, EffectIntent.ReviewExpired,
                                EffectIntent.GateRefused)) or isinstance(e, EffectIntent.PolicyDecided) and e.outcome == DecisionOutcome.DENY:
                terminal_refusal = True
            elif isinstance(e, EffectIntent.ExecutionAuthorized):
                if normalized is None:
                    problems.append(f"{intent_id}: authorized without normalization (invariant 1)")
                elif e.digest != normalized.digest or e.digest not in allowed_digests:
                    problems.append(f"{intent_id}: authorized digest not allowed/approved (invariant 1)")
                elif e.contract_revision != normalized.contract_revision:
                    problems.append(f"{intent_id}: authorized under another mapping revision")
                if uncertain:
                    problems.append(f"{intent_id}: new attempt after an unknown outcome (invariant 4)")
                if terminal_refusal:
                    problems.append(f"{intent_id}: authorized after a refusal (invariant 5)")
                intent_keys.add(e.intent_key)
            elif isinstance(e, EffectIntent.OutcomeUnknown):
                uncertain = True
            elif isinstance(e, EffectIntent.Reconciled) and e.resolution == Resolution.RETRY:
                uncertain = False  # proven absent, and the contract allows the same intent again
            elif isinstance(e, EffectIntent.EffectCompleted) or (
                isinstance(e, EffectIntent.Reconciled) and e.resolution == Resolution.COMPLETED
            ):
                completed += 1
        if foldable and folded is not None:
            finals[intent_id] = folded
        if intent_id in withdrawn and completed:
            problems.append(f"{intent_id}: told withdrawn, yet the record has its effect (invariant 6)")
        if completed > 1:
            problems.append(f"{intent_id}: {completed} completions (invariant 3)")
        if len(intent_keys) > 1:
            problems.append(f"{intent_id}: attempts used {len(intent_keys)} keys (invariant 3)")
        keys[intent_id] = intent_keys
    writes: dict[str, int] = defaultdict(int)
    for entry in ledger:
        intent_id = str(entry.get("intent_id", ""))
        writes[intent_id] += 1
        if str(entry.get("idempotency_key", "")) not in keys.get(intent_id, set()):
            problems.append(f"{intent_id}: world write without ExecutionAuthorized (invariant 2)")
    for intent_id, n in writes.items():
        if n > 1:
            problems.append(f"{intent_id}: {n} writes in the world for one intent")
    for intent_id, statuses in (told or {}).items():
        if "withdrawn" in statuses:
            withdrawn.add(intent_id)
    for intent_id in sorted(withdrawn & set(writes)):
        problems.append(f"{intent_id}: told withdrawn, yet the world has its effect (invariant 6)")
    if locks is not None:
        problems += _stranded(locks, finals)
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
