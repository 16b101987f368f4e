"""What the model sees: a narrow projection of an intent, never internal state."""

from __future__ import annotations

from typing import Any

import msgspec


class ModelResponse(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The model-facing answer to one candidate.

    ``status`` is one of ``STATUSES``; ``field`` is set only when the problem is in an
    argument the model controls; ``result`` is bounded data, labelled untrusted.
    """

    candidate_id: str
    call_id: str
    status: str
    code: str
    field: str | None = None
    persistent: bool | None = None
    """For a denial: retrying will not help (true) or may help later (false)."""
    alternatives: tuple[str, ...] | None = None
    """For a denial: safe next steps the model may take instead."""
    result: dict[str, Any] | None = None
    result_label: str | None = None
    retry_after_s: float | None = None
    """For a denial that passes (a rate limit): seconds after which trying again may succeed."""
    candidate_digest: str | None = None
    """Digest of the candidate bytes this answers (``lockgate.core.ids.candidate_digest``):
    a runtime that reused a call id with other bytes can tell this answer is not its own."""
    successor: str | None = None
    """For ``replaced``: the candidate id of the call a reviewer's edit made of this one.
    It crosses every gate again; ``Run.wait(successor)`` says what became of it."""


STATUSES = (
    "executed",
    "rejected",
    "denied",
    "pending_approval",
    "paused",
    "unavailable",
    "outcome_unknown",
    "withdrawn",
    "withdrawal_requested",
    "interruption_requested",
    "replaced",
)
