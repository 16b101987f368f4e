"""Intake's and normalization's events: a candidate received or rejected, then normalized."""

from __future__ import annotations

from typing import Any, ClassVar

from lockgate.contracts.vocabulary import Settles
from lockgate.intent.events.base import Created, Event


class CandidateReceived(Created, frozen=True, kw_only=True):
    """Intake accepted the candidate's shape: a known tool, offered in its turn.

    ``candidate_digest`` is the digest of the whole candidate message, the bytes
    that "the same call" is judged by; ``holds`` the in-flight keys intake took for
    it (released from the record when the intent ends, whatever the bundle says then).
    """

    tenant: str
    run_id: str
    turn_id: str
    call_id: str
    actor: str
    tool: str
    arguments: dict[str, Any]
    raw_digest: str
    raw_size_bytes: int
    catalogue_digest: str
    contract_revision: str
    # Added later, with defaults: events stored before them read as "unknown, none".
    candidate_digest: str = ""
    holds: tuple[str, ...] = ()
    # The evidence (bounded; an operator's to read, never a model's): the argument
    # text exactly as received, the provider's item and format, the model named.
    raw_arguments: str = ""
    provider: str = ""
    model: str = ""
    provider_item: dict[str, Any] | None = None
    # The candidate it corrects or follows in the run (its intent id), and how the
    # link was made: ``declared`` by the runtime, or ``automatic`` (the same tool,
    # in the same turn, after a refusal).
    follows: str = ""
    follows_how: str = ""


class CandidateRejected(Created, frozen=True, kw_only=True):
    """Intake refused the candidate before any interpretation.

    ``retry_after_s`` is set for a refusal that passes (a rate limit): the model is
    told it may try again after that long.
    """

    tenant: str
    run_id: str
    turn_id: str
    call_id: str
    actor: str
    tool: str
    raw_digest: str
    raw_size_bytes: int
    catalogue_digest: str
    reason: str
    field: str | None
    detail: str
    # Added later, with defaults: events stored before them read as "unknown, none".
    candidate_digest: str = ""
    retry_after_s: float | None = None
    # The evidence (bounded; an operator's to read, never a model's): the argument
    # text exactly as received, the provider's item and format, the model named.
    raw_arguments: str = ""
    provider: str = ""
    model: str = ""
    provider_item: dict[str, Any] | None = None
    # The candidate it corrects or follows in the run (its intent id), and how the
    # link was made: ``declared`` by the runtime, or ``automatic`` (the same tool,
    # in the same turn, after a refusal).
    follows: str = ""
    follows_how: str = ""


class CandidateNormalized(Event, frozen=True, kw_only=True):
    """The exact consequence: canonical arguments, resource, and their digest."""

    arguments: dict[str, Any]
    resource: dict[str, str]
    destination: str
    effect_class: str
    digest: str
    serializer: str
    contract_revision: str
    # Its place in the lineage (``lockgate.intent.lineage``): how it differs from the
    # candidate it follows (``equivalent``, ``narrowing``, ``branch``, ``repair``;
    # empty for a candidate that follows none), the lineage's first candidate, how
    # many refusals came before it in the lineage, and whether the one it follows
    # was denied (a denial that flows to an equivalent successor).
    lineage: str = ""
    lineage_root: str = ""
    lineage_denials: int = 0
    predecessor_denied: bool = False
    # The adapter's facts about the resource, answered with the normalization (the
    # evidence policy decides on while they are fresh; ``None``: policy asks).
    facts: dict[str, str | int | bool] | None = None
    # The contract's data classes, the part of it a decision reads besides the effect
    # class (``None``: recorded before it was kept, when only the revision says which).
    data_classes: tuple[str, ...] | None = None


class NormalizationFailed(Event, frozen=True, kw_only=True):
    """The arguments do not describe a consequence the capability can have."""

    routed_by: ClassVar[str] = "settles"
    reason: str
    field: str | None
    detail: str

    #: What policy has to settle when this ends the intent (its route); set by
    #: ``next`` from the intent. Events recorded before it existed read as ``budget``.
    settles: Settles = Settles.BUDGET
