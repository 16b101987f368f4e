"""Normalization's pure decisions."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from lockgate.contracts.capability import CapabilityContract
from lockgate.contracts.messages import NormalizeResult
from lockgate.core.canonical import SERIALIZER_ID, digest
from lockgate.core.ids import derived_id
from lockgate.intent.aggregate import EffectIntent, Event, Stamp, State
from lockgate.intent.events import CandidateNormalized, NormalizationFailed
from lockgate.intent.lineage import Place


def consequence(intent: EffectIntent, contract: CapabilityContract, result: NormalizeResult) -> dict[str, Any]:
    """The normalized request whose digest approvals, idempotency and audit all share."""
    return {
        "tenant": intent.tenant,
        "actor": intent.actor,
        "capability": contract.name,
        "contract_revision": contract.revision,
        "effect_class": contract.effect_class.value,
        "arguments": result.arguments,
        "resource": result.resource,
        "destination": result.destination,
    }


def decide(
    intent: EffectIntent,
    contract: CapabilityContract | None,
    result: NormalizeResult | None,
    *,
    cause: str,
    now: datetime,
) -> list[Event]:
    """Turn an adapter's normalization into ``CandidateNormalized`` or ``NormalizationFailed``.

    ``result`` is ``None`` when the adapter never answered and the service gave up.
    """
    if intent.state is not State.PROPOSED:
        return []
    stamp = Stamp(now=now, event_id=derived_id("normalization", cause), causation_id=cause)
    if contract is None or contract.revision != intent.contract_revision:
        return [
            NormalizationFailed.next(
                intent, stamp, reason="capability.changed", field=None, detail=""
            )
        ]
    if result is None:
        return [
            NormalizationFailed.next(
                intent, stamp, reason="capability.unavailable", field=None, detail=""
            )
        ]
    if result.reason is not None:
        return [
            NormalizationFailed.next(
                intent, stamp, reason=result.reason, field=result.field, detail=""
            )
        ]
    return [
        CandidateNormalized.next(
            intent, stamp,
            arguments=result.arguments,
            resource=result.resource,
            destination=result.destination,
            effect_class=contract.effect_class.value,
            digest=digest(consequence(intent, contract, result)),
            serializer=SERIALIZER_ID,
            contract_revision=contract.revision,
            facts=dict(result.facts.facts) if result.facts is not None else None,
            data_classes=tuple(contract.data_classes),
        )
    ]


def placed(events: list[Event], place: Place | None) -> list[Event]:
    """The events with the candidate's place in its lineage on its ``CandidateNormalized``."""
    if place is None:
        return events
    return [
        msgspec.structs.replace(
            e, lineage=place.kind.value, lineage_root=place.root, lineage_denials=place.denials,
            predecessor_denied=place.predecessor_denied)
        if isinstance(e, CandidateNormalized) else e
        for e in events
    ]
