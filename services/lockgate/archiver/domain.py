"""The archiver's pure decisions: which intents may leave the hot store, and their mark."""

from __future__ import annotations

from datetime import datetime

from lockgate.core.ids import derived_id
from lockgate.intent.aggregate import INTENT_TOPIC, EffectIntent
from lockgate.intent.events import IntentArchived
from lockgate.views.rows import IntentRow


def may_archive(intent: EffectIntent, row: IntentRow) -> str | None:
    """Why ``intent`` (as the store has it) may not leave the hot store yet; ``None``: it may.

    Only an intent that ended, that nothing has marked archived, and whose every event
    the views hold (their row is at the store's version) goes; a live intent never does,
    however old.
    """
    if not intent.state.terminal:
        return "live"
    if intent.archived:
        return "archived"
    if row.version != intent.version:
        return "views behind"
    return None


def archived(intent: EffectIntent, *, now: datetime) -> IntentArchived:
    """The mark appended after ``intent``'s last event, before the events ahead of it go."""
    return IntentArchived(
        originator_id=intent.id, originator_version=intent.version + 1, timestamp=now,
        originator_topic=INTENT_TOPIC,
        event_id=derived_id("archived", intent.intent_id, str(intent.version)),
        correlation_id=intent.run_id, causation_id=f"archive:{intent.version}",
        tenant=intent.tenant, run_id=intent.run_id, turn_id=intent.turn_id,
        call_id=intent.call_id, actor=intent.actor, tool=intent.tool,
        raw_digest=intent.raw_digest, raw_size_bytes=intent.raw_size_bytes,
        catalogue_digest=intent.catalogue_digest, contract_revision=intent.contract_revision,
        candidate_digest=intent.candidate_digest, state=intent.state.value,
        reason=intent.reason, archived_versions=intent.version,
    )
