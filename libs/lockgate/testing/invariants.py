"""DESIGN's invariants, checked over stored events and a world's ledger."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from lockgate.eventstore.base import RecordedEvent
from lockgate.intent.aggregate import MAY_HAVE_BEEN_SENT, EffectIntent, Event, State
from lockgate.intent.codec import decode_event


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
    histories: Mapping[str, Sequence[Event]], ledger: Sequence[Mapping[str, Any]] = ()
) -> list[str]:
    """Every way the histories (and the world's ledger) break DESIGN's invariants."""
    problems: list[str] = []
    keys: dict[str, set[str]] = {}
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
        state: EffectIntent | None = None
        for e in events:
            before = state.state if state is not None else None
            try:
                state = e.mutate(state)
            except Exception as exc:  # noqa: BLE001 - reported, and checked no further
                problems.append(f"{intent_id}: v{e.originator_version} does not apply: {exc!r}")
                break
            if isinstance(e, EffectIntent.ProcessingAbandoned) and before is not None and not (
                before.terminal or before in MAY_HAVE_BEEN_SENT or before is State.NEEDS_OPERATOR
            ):
                terminal_refusal = True  # given up before any order could be out
            if isinstance(e, EffectIntent.CandidateNormalized):
                normalized = e
            elif isinstance(e, EffectIntent.PolicyDecided) and e.outcome == "allow" or isinstance(e, EffectIntent.ReviewApproved):
                allowed_digests.add(e.digest)
            elif isinstance(e, (EffectIntent.CandidateRejected, EffectIntent.NormalizationFailed,
                                EffectIntent.ReviewDenied, EffectIntent.ReviewExpired,
                                EffectIntent.GateRefused)) or isinstance(e, EffectIntent.PolicyDecided) and e.outcome == "deny":
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
            elif isinstance(e, EffectIntent.Reconciled) and e.resolution == "retry":
                uncertain = False  # proven absent, and the contract allows the same intent again
            elif isinstance(e, EffectIntent.EffectCompleted) or (
                isinstance(e, EffectIntent.Reconciled) and e.resolution == "completed"
            ):
                completed += 1
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
    return problems
