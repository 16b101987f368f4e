"""Intake's pure decisions: is a candidate well-formed for the turn it claims?"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from jsonschema import Draft202012Validator

from lockgate.contracts.capability import CapabilityContract
from lockgate.contracts.messages import Candidate, Catalogue, RunContext
from lockgate.core.canonical import digest_bytes
from lockgate.core.ids import derived_id, intent_id_for, is_subject_token
from lockgate.intake.parsing import parse_arguments
from lockgate.intent.aggregate import INTENT_TOPIC, EffectIntent, Event


@dataclass(frozen=True)
class Inputs:
    """What intake knows when a candidate arrives."""

    tenant: str
    candidate: Candidate
    raw_size_bytes: int
    run: RunContext | None
    catalogue_digest: str | None
    catalogue: Catalogue | None
    contract: CapabilityContract | None
    max_candidate_bytes: int
    message_id: str
    malformed: bool = False


def _schema_problem(schema: dict[str, Any], value: dict[str, Any]) -> tuple[str, str | None] | None:
    """Return (reason, field) for the first way ``value`` breaks ``schema``."""
    properties = schema.get("properties", {})
    for name in schema.get("required", []):
        if name not in value:
            return "tool.arguments.missing-required", name
    if schema.get("additionalProperties") is False:
        for name in value:
            if name not in properties:
                return "tool.arguments.unexpected", name
    for error in Draft202012Validator(schema).iter_errors(value):
        field = str(error.path[0]) if error.path else None
        return "tool.arguments.invalid", field
    return None


def decide_candidate(inputs: Inputs, now: datetime) -> Event:
    """Return ``CandidateReceived`` or ``CandidateRejected`` for a candidate.

    The first event of the intent; its id derives from the candidate message so a
    redelivery decides the same event.
    """
    c = inputs.candidate
    intent_id = intent_id_for(inputs.tenant, c.run_id, c.call_id)
    raw = c.arguments.encode()
    common: dict[str, Any] = dict(
        originator_id=UUID(hex=intent_id),
        originator_version=1,
        timestamp=now,
        originator_topic=INTENT_TOPIC,
        event_id=derived_id("intake", inputs.message_id, intent_id),
        correlation_id=c.run_id,
        causation_id=inputs.message_id,
        tenant=inputs.tenant,
        run_id=c.run_id,
        turn_id=c.turn_id,
        call_id=c.call_id,
        actor=inputs.run.actor if inputs.run else "",
        tool=c.tool[:200],
        raw_digest=digest_bytes(raw),
        raw_size_bytes=len(raw),
        catalogue_digest=inputs.catalogue_digest or "",
    )

    def reject(reason: str, field: str | None = None, detail: str = "") -> Event:
        return EffectIntent.CandidateRejected(  # type: ignore[call-arg]
            reason=reason, field=field, detail=detail[:300], **common
        )

    if inputs.malformed:
        return reject("candidate.malformed")
    if inputs.run is None:
        return reject("run.unknown")
    if inputs.catalogue is None:
        return reject("turn.unknown")
    offered = {t.name for t in inputs.catalogue.tools}
    if c.tool not in offered:
        return reject("tool.unknown")
    contract = inputs.contract
    if contract is None or inputs.catalogue.revisions.get(c.tool) != contract.revision:
        # The capability changed (or vanished) since the turn was offered.
        return reject("tool.changed-since-turn")
    limit = min(inputs.max_candidate_bytes, contract.max_argument_bytes)
    if inputs.raw_size_bytes > limit or len(raw) > limit:
        return reject("tool.arguments.too-large", detail=f"{len(raw)} bytes > {limit}")
    parsed = parse_arguments(c.arguments)
    if parsed.value is None:
        return reject(parsed.reason or "tool.arguments.malformed", parsed.field, parsed.detail)
    problem = _schema_problem(contract.argument_schema, parsed.value)
    if problem is not None:
        return reject(problem[0], problem[1])
    return EffectIntent.CandidateReceived(  # type: ignore[call-arg]
        arguments=parsed.value, contract_revision=contract.revision, **common
    )


def well_formed_ids(candidate: Candidate) -> bool:
    """True when run, turn and call ids can be used as subject tokens."""
    return all(is_subject_token(x) for x in (candidate.run_id, candidate.turn_id, candidate.call_id))
