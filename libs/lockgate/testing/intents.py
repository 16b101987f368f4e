"""Build ``EffectIntent`` histories in tests without running the services."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from lockgate.contracts.vocabulary import DecisionOutcome
from lockgate.core.ids import derived_id, intent_id_for
from lockgate.intent.aggregate import INTENT_TOPIC, EffectIntent, Event, Stamp
from lockgate.intent.codec import fold
from lockgate.intent.events import CandidateNormalized, CandidateReceived, PolicyDecided

T0 = datetime(2026, 1, 1, tzinfo=UTC)


class History:
    """An intent's events, grown one decision at a time."""

    def __init__(self, *, tenant: str = "tenant-a", run_id: str = "run-1", call_id: str = "call-1",
                 actor: str = "user-42", tool: str = "case.add_note",
                 arguments: dict[str, Any] | None = None, contract_revision: str = "rev-1",
                 holds: tuple[str, ...] = (), follows: str = "") -> None:
        self.intent_id = intent_id_for(tenant, run_id, call_id)
        self.events: list[Event] = [
            CandidateReceived(
                originator_id=UUID(hex=self.intent_id), originator_version=1, timestamp=T0,
                originator_topic=INTENT_TOPIC, event_id=derived_id("t", self.intent_id, "1"),
                correlation_id=run_id, causation_id="msg-1", tenant=tenant, run_id=run_id,
                turn_id="turn-1", call_id=call_id, actor=actor, tool=tool,
                arguments=arguments if arguments is not None else {"note": "hello"},
                raw_digest="sha256:raw", raw_size_bytes=17, catalogue_digest="sha256:cat",
                contract_revision=contract_revision, candidate_digest="sha256:candidate",
                holds=holds, follows=follows, follows_how="declared" if follows else "",
            )
        ]

    @property
    def intent(self) -> EffectIntent:
        """The aggregate folded from the events so far."""
        intent = fold(self.events)
        if intent is None:
            raise ValueError("no events")
        return intent

    def stamp(self) -> Stamp:
        """The stamp of the next event: a second after the last, with a derived id."""
        n = str(len(self.events) + 1)
        return Stamp(now=T0 + timedelta(seconds=len(self.events)),
                     event_id=derived_id("t", self.intent_id, n), causation_id=n)

    def add(self, cls: type[Event], **fields: Any) -> History:
        """Append the event ``cls`` with ``fields`` after the current ones.

        ``fields`` are not type-checked here: tests build odd events on purpose. The
        helpers below build theirs with ``next`` directly, so mypy checks them.
        """
        return self.extend([cls.next(self.intent, self.stamp(), **fields)])

    def extend(self, events: list[Event]) -> History:
        """Append events a decision returned."""
        self.events.extend(events)
        return self

    def normalized(self, digest: str = "sha256:d1", contract_revision: str = "rev-1", *,
                   arguments: dict[str, Any] | None = None, resource: dict[str, str] | None = None,
                   destination: str = "case-notes:tenant-a/case-123", effect_class: str = "write",
                   **lineage: Any) -> History:
        """Record a normalization (by default of the note into case-123)."""
        return self.extend([CandidateNormalized.next(
            self.intent, self.stamp(),
            arguments=arguments if arguments is not None else {"case_id": "case-123", "note": "hello"},
            resource=resource if resource is not None else {"type": "case", "id": "case-123",
                                                             "tenant": "tenant-a"},
            destination=destination, effect_class=effect_class, digest=digest,
            serializer="jcs", contract_revision=contract_revision, **lineage,
        )])

    def decided(self, outcome: str = DecisionOutcome.ALLOW, reasons: list[str] | None = None,
                policy_revision: str = "pol-1") -> History:
        """Record a policy decision (``outcome``: a ``DecisionOutcome`` or its value)."""
        return self.extend([PolicyDecided.next(
            self.intent, self.stamp(), outcome=DecisionOutcome(outcome),
            policy_revision=policy_revision, reasons=reasons or [], determining=[], facts={},
            digest=self.intent.digest or "", reservations=[],
        )])
