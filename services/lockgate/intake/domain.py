"""Intake's pure decisions: is a candidate well-formed for the turn it claims, and may it enter?"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypedDict
from uuid import UUID

import msgspec

from lockgate.contracts.capability import CapabilityContract
from lockgate.contracts.messages import Candidate, Catalogue, RunContext
from lockgate.contracts.subjects import parse_propose_subject
from lockgate.core.canonical import digest_bytes
from lockgate.core.ids import (
    call_digest,
    candidate_digest,
    derived_id,
    intent_id_for,
    is_capability_name,
    is_subject_token,
)
from lockgate.core.text import safe_text
from lockgate.core.validation import validator
from lockgate.intake.parsing import decode_candidate, parse_arguments
from lockgate.intent.aggregate import INTENT_TOPIC, EffectIntent, Event
from lockgate.intent.events import CandidateReceived, CandidateRejected

#: Characters of a detail kept on the record (operators read it; models never do).
DETAIL_MAX_CHARS = 300
#: UTF-8 bytes of the raw argument text kept on the record as evidence (the whole text
#: of any candidate a capability accepts; a prefix of an over-size one, with its digest
#: and size beside it).
RAW_KEPT_BYTES = 16 * 1024
#: Encoded bytes of a provider's item kept as it came; a larger one is kept as its
#: size and digest.
PROVIDER_ITEM_KEPT_BYTES = 8 * 1024
#: Causes a runtime may give for a call it could not assemble from its provider's stream
#: (``Candidate.assembly_failure``); any other is a malformed candidate.
ASSEMBLY_FAILURES = frozenset({
    "stream.truncated", "stream.conflicting-delta", "stream.repeated-field", "stream.too-large",
    "stream.cancelled", "provider.unknown-item", "provider.item-malformed",
})


@dataclass(frozen=True)
class Inputs:
    """What intake knows when a candidate arrives.

    ``problem`` is set when the envelope itself could not be used (``candidate`` is then
    a stand-in carrying ids intake derived from the message); ``intent_id`` is where the
    decision is recorded (by default the call id's own intent).
    """

    tenant: str
    candidate: Candidate
    raw_size_bytes: int
    run: RunContext | None
    catalogue_digest: str | None
    catalogue: Catalogue | None
    contract: CapabilityContract | None
    max_candidate_bytes: int
    message_id: str
    candidate_digest: str = ""
    intent_id: str = ""
    problem: str | None = None
    detail: str = ""
    #: The tool names a capability that exists, though the turn did not offer it.
    known_tool: bool = False
    #: The intent this candidate follows, and ``declared`` or ``automatic``.
    follows: str = ""
    follows_how: str = ""
    #: A declared predecessor that is not a candidate of the run.
    unknown_predecessor: bool = False
    #: Why the run ended (closed, or idle past its lease), when it has.
    run_ended: str | None = None

    @property
    def target(self) -> str:
        """The intent the decision is recorded on."""
        c = self.candidate
        return self.intent_id or intent_id_for(self.tenant, c.run_id, c.call_id)


@dataclass(frozen=True)
class Verdict:
    """What intake makes of a candidate's shape: parsed arguments, or a reason."""

    reason: str | None
    field: str | None = None
    detail: str = ""
    arguments: dict[str, Any] | None = None
    contract_revision: str = ""


@dataclass(frozen=True)
class Limited:
    """A limit refused the candidate: which reason, what for operators, when to try again."""

    reason: str
    detail: str
    retry_after_s: float


def _schema_problem(schema: dict[str, Any], value: dict[str, Any]) -> tuple[str, str | None] | None:
    """Return (reason, field) for the first way ``value`` breaks ``schema``."""
    properties = schema.get("properties", {})
    for name in schema.get("required", []):
        if name not in value:
            return "tool.arguments.missing-required", name
    if schema.get("additionalProperties") is False:
        for name in value:
            if name not in properties:
                return "tool.arguments.unexpected", safe_text(name, 64)
    for error in validator(schema).iter_errors(value):
        field = safe_text(str(error.path[0]), 64) if error.path else None
        return "tool.arguments.invalid", field
    return None


def assess(inputs: Inputs) -> Verdict:
    """Judge a candidate's shape against its run, its turn's catalogue and its contract."""
    c = inputs.candidate
    if inputs.problem is not None:
        return Verdict(inputs.problem, detail=inputs.detail)
    if inputs.run is None:
        return Verdict("run.unknown")
    if inputs.run_ended is not None:
        return Verdict("run.ended", detail=safe_text(inputs.run_ended, DETAIL_MAX_CHARS))
    if inputs.catalogue is None:
        return Verdict("turn.unknown")
    if c.assembly_failure is not None:
        # The runtime could not assemble the call from its stream: on the record with its
        # cause, never interpreted.
        if c.assembly_failure in ASSEMBLY_FAILURES:
            return Verdict(c.assembly_failure, detail=f"{len(c.arguments.encode())} bytes arrived")
        return Verdict("candidate.malformed",
                       detail=f"unknown assembly failure {safe_text(c.assembly_failure, 64)!r}")
    if not is_capability_name(c.tool):
        return Verdict("tool.name-invalid", detail=f"{len(c.tool)} characters")
    offered = {t.name: t for t in inputs.catalogue.tools}
    if c.tool not in offered:
        if inputs.known_tool:
            why = inputs.catalogue.withheld.get(c.tool, "")
            return Verdict("tool.not-offered", detail=safe_text(why, DETAIL_MAX_CHARS))
        return Verdict("tool.unknown")
    if inputs.unknown_predecessor:
        return Verdict("lineage.unknown-predecessor", detail="no candidate of the run has that call id")
    # Judged against its turn: the schema the model was offered, at the turn's revision.
    # A capability changed or gone since then is current state, which normalization and
    # policy judge (``capability.changed``, ``tool.no-longer-offered``): the record
    # then says both, valid when proposed and refused now.
    revision = inputs.catalogue.revisions[c.tool]
    contract = inputs.contract if inputs.contract and inputs.contract.revision == revision else None
    schema = contract.argument_schema if contract else offered[c.tool].parameters
    raw_size = len(c.arguments.encode())
    limit = min(inputs.max_candidate_bytes,
                contract.max_argument_bytes if contract else inputs.max_candidate_bytes)
    if inputs.raw_size_bytes > limit or raw_size > limit:
        return Verdict("tool.arguments.too-large", detail=f"{raw_size} bytes > {limit}")
    parsed = parse_arguments(c.arguments)
    if parsed.value is None:
        return Verdict(parsed.reason or "tool.arguments.malformed", parsed.field, parsed.detail)
    problem = _schema_problem(schema, parsed.value)
    if problem is not None:
        return Verdict(problem[0], problem[1])
    return Verdict(None, arguments=parsed.value, contract_revision=revision)


def bounded_text(value: str, max_bytes: int) -> str:
    """``value`` as storable UTF-8, cut to at most ``max_bytes`` on a character boundary."""
    data = value.encode("utf-8", "backslashreplace")
    return data[:max_bytes].decode("utf-8", "ignore")


def bounded_item(item: dict[str, Any] | None) -> dict[str, Any] | None:
    """A provider's item as it came, or its size and digest when it is larger than is kept."""
    if item is None:
        return None
    try:
        encoded = msgspec.json.encode(item)
    except (msgspec.EncodeError, UnicodeEncodeError, RecursionError, TypeError):
        return {"unreadable": True}
    if len(encoded) > PROVIDER_ITEM_KEPT_BYTES:
        return {"truncated": True, "bytes": len(encoded), "digest": digest_bytes(encoded)}
    return item


def decide_candidate(
    inputs: Inputs, now: datetime, *, verdict: Verdict | None = None, holds: Sequence[str] = (),
    limited: Limited | None = None,
) -> Event:
    """Return ``CandidateReceived`` or ``CandidateRejected`` for a candidate.

    The first event of the intent; its id derives from the candidate message so a
    redelivery decides the same event. ``holds`` are the in-flight keys taken for a
    received candidate; ``limited`` is a flood limit's refusal, which passes (the
    candidate is then not judged further: a flood is refused before it costs more).
    """
    c = inputs.candidate
    intent_id = inputs.target
    raw = c.arguments.encode()
    common = FirstEventFields(
        originator_id=UUID(hex=intent_id),
        originator_version=1,
        timestamp=now,
        originator_topic=INTENT_TOPIC,
        event_id=derived_id("intake", inputs.message_id, intent_id),
        correlation_id=c.run_id,
        causation_id=safe_text(inputs.message_id, 128),
        tenant=inputs.tenant,
        run_id=c.run_id,
        turn_id=c.turn_id,
        call_id=c.call_id,
        actor=inputs.run.actor if inputs.run else "",
        tool=safe_text(c.tool, 200),
        raw_digest=digest_bytes(raw),
        raw_size_bytes=len(raw),
        catalogue_digest=inputs.catalogue_digest or "",
        candidate_digest=inputs.candidate_digest,
        raw_arguments=bounded_text(c.arguments, RAW_KEPT_BYTES),
        provider=safe_text(c.provider, 64),
        model=safe_text(c.model, 128),
        provider_item=bounded_item(c.provider_item),
        follows=inputs.follows,
        follows_how=inputs.follows_how,
    )
    if limited is not None:
        return reject(common, limited.reason, None, limited.detail, retry_after_s=limited.retry_after_s)
    verdict = verdict or assess(inputs)
    if verdict.reason is not None or verdict.arguments is None:
        return reject(common, verdict.reason or "tool.arguments.malformed", verdict.field, verdict.detail)
    return CandidateReceived(
        arguments=verdict.arguments, contract_revision=verdict.contract_revision,
        holds=tuple(holds), **common
    )


class FirstEventFields(TypedDict):
    """What an intent's first event says whether it is received or rejected: its
    envelope and the call it records (the events' own fields, so mypy checks the two)."""

    originator_id: UUID
    originator_version: int
    timestamp: datetime
    originator_topic: str
    event_id: str
    correlation_id: str
    causation_id: str
    tenant: str
    run_id: str
    turn_id: str
    call_id: str
    actor: str
    tool: str
    raw_digest: str
    raw_size_bytes: int
    catalogue_digest: str
    candidate_digest: str
    raw_arguments: str
    provider: str
    model: str
    provider_item: dict[str, Any] | None
    follows: str
    follows_how: str


def reject(common: FirstEventFields, reason: str, field: str | None, detail: str, *,
           retry_after_s: float | None = None) -> Event:
    """``CandidateRejected`` with the envelope fields ``common``."""
    return CandidateRejected(
        reason=reason, field=field, detail=safe_text(detail, DETAIL_MAX_CHARS),
        retry_after_s=retry_after_s, **common
    )


def same_call(first: EffectIntent, candidate: Candidate, read: Read) -> bool:
    """True when ``candidate`` is the call ``first`` recorded: the same tool and bytes.

    In any turn of the run (``lockgate.core.ids.call_digest``). Intents recorded while
    the whole message was digested compare by that digest, and those recorded before
    candidates were digested at all by their arguments.
    """
    if first.candidate_digest:
        return first.candidate_digest in (read.candidate_digest, read.message_digest)
    return first.raw_digest == digest_bytes(candidate.arguments.encode())


def reused(inputs: Inputs, first: EffectIntent, now: datetime) -> Event:
    """The refusal of a call id already used with other bytes, on the reused call's own intent."""
    verdict = Verdict(
        "proposal.call-id-reused",
        detail=f"call id first recorded on {first.intent_id} with {first.candidate_digest or first.raw_digest}",
    )
    return decide_candidate(inputs, now, verdict=verdict)


def well_formed_ids(candidate: Candidate) -> bool:
    """True when run, turn and call ids can be used as subject tokens."""
    return all(is_subject_token(x) for x in (candidate.run_id, candidate.turn_id, candidate.call_id))


@dataclass(frozen=True)
class Read:
    """A candidate message as intake reads it, before looking anything up.

    ``problem`` is ``None`` for a usable envelope. Otherwise ``candidate`` is a stand-in
    whose call id derives from the message, so the refusal is recorded (once per
    message) without trusting anything the envelope says.
    """

    tenant: str
    candidate: Candidate
    size_bytes: int
    #: What identifies the call: ``call_digest`` of a readable candidate, the message's
    #: own digest otherwise.
    candidate_digest: str
    problem: str | None = None
    detail: str = ""
    #: The digest of the message's bytes as published (``candidate_digest``).
    message_digest: str = ""


def stand_in(run_id: str, message_id: str) -> Candidate:
    """The candidate recorded for a message whose own ids cannot be used."""
    return Candidate(run_id=run_id, turn_id="malformed",
                     call_id="malformed-" + derived_id("malformed", message_id),
                     tool="", arguments="")


def read_candidate(subject: str, data: bytes, message_id: str) -> Read:
    """Read a candidate message, whatever its subject and bytes; never raises."""
    address = parse_propose_subject(subject)
    digest = candidate_digest(data)

    def malformed(detail: str) -> Read:
        return Read(address.tenant, stand_in(address.run_id, message_id), len(data), digest,
                    "candidate.malformed", safe_text(detail, DETAIL_MAX_CHARS))

    if not address.routable:
        return malformed(f"subject {safe_text(subject, 120)!r} names no valid tenant and run")
    decoded = decode_candidate(data)
    if decoded.candidate is None:
        return malformed(decoded.detail)
    c = decoded.candidate
    if c.run_id != address.run_id or not well_formed_ids(c):
        return malformed("run, turn or call id is not a token, or the run is not the subject's")
    same = call_digest(call_id=c.call_id, tool=c.tool, arguments=c.arguments,
                       assembly_failure=c.assembly_failure)
    return Read(address.tenant, c, len(data), same, message_digest=digest)
