"""The views' typed rows as the API's answers (pure: rows in, response models out)."""

from __future__ import annotations

import msgspec

from lockgate.console import domain
from lockgate.console.models import Intent, Label, Review, ReviewDetail, TimelineEvent
from lockgate.views.rows import IntentRow, ReviewEvidence, ReviewRow, TimelineRow

#: What a candidate's first event keeps as evidence that only an operator reads.
EVIDENCE = ("raw_arguments", "provider_item")


def intent_of(row: IntentRow) -> Intent:
    """The API's intent for a views row, with its honest label."""
    lab = domain.label(row.state, row.model_status, row.reason)
    return Intent(
        intent_id=row.intent_id, tenant=row.tenant, run_id=row.run_id, actor=row.actor,
        call_id=row.call_id, tool=row.tool, effect_class=row.effect_class,
        destination=row.destination, state=row.state, reason=row.reason,
        model_status=row.model_status, attempts=row.attempts, attempt_stage=row.attempt_stage,
        review_id=row.review_id, created_at=row.created_at, updated_at=row.updated_at,
        position=row.last_sequence, label=Label(code=lab.code, text=lab.text),
        follows=row.follows or None, lineage=row.lineage or None,
    )


def review_of(row: ReviewRow) -> Review:
    """The API's review for a views row (fields a newer row has and this API does not, ignored)."""
    fields = msgspec.to_builtins(row)
    return Review(**{k: v for k, v in fields.items() if k in Review.model_fields})


def event_of(row: TimelineRow, *, evidence: bool = True) -> TimelineEvent:
    """The API's timeline entry for an event (without the raw evidence unless ``evidence``)."""
    data = row.data
    if not evidence:
        data = {k: ("(withheld: operators only)" if k in EVIDENCE and v else v) for k, v in data.items()}
    return TimelineEvent(sequence=row.sequence, version=row.version, type=row.event_type,
                         words=domain.event_words(row.event_type, data), recorded_at=row.recorded_at,
                         data=data)


def review_detail(review: ReviewRow, intent: IntentRow, evidence: ReviewEvidence, *,
                  now: str) -> ReviewDetail:
    """An intent's latest ``review`` with the evidence behind it; ``now`` in the views' format."""
    return ReviewDetail(
        review=review_of(review), intent=intent_of(intent),
        decidable=domain.decidable(review, intent, now=now),
        arguments=evidence.arguments, proposed_arguments=evidence.proposed_arguments,
        resource=evidence.resource, destination=evidence.destination,
        effect_class=evidence.effect_class, policy_reasons=list(evidence.policy_reasons),
    )
