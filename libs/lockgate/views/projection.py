"""The projection: every Lockgate event, in stream order, folded into the views.

An ``eventsourcing`` ``Projection`` over the views' store: ``process_event`` is handed
each event with its ``Tracking`` (the stream position) and writes the event to the
permanent record, the intent's row, its review, its budget shares and its latest
decision beside a shadow bundle's, with the tracking, in one transaction. The intent
itself is folded with the same aggregate the services decide on, from the events the
views already hold (kept folded in memory for the intents seen last, so a step costs
one transaction and no reads).

Events arrive in stream order, so an intent's next event is always its folded
version + 1. An event the views already hold (same id, same version) is handed over
again and changes nothing; any other that is not the next (a gap, a different event at
a version already held) stops the projector with ``ProjectionGap`` instead of guessing:
a view that skipped an event would say something the record does not.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

from eventsourcing.persistence import Tracking, TrackingRecorder
from eventsourcing.projection import Projection

from lockgate.core.bounded import keep
from lockgate.core.errors import LockgateError
from lockgate.intent.aggregate import EffectIntent, Event
from lockgate.intent.codec import decode_event, encode_event, fold
from lockgate.intent.events import IntentArchived, PolicyDecided, ReviewRequested
from lockgate.intent.evolve import evolve
from lockgate.views.rows import (
    BudgetUse,
    EventRow,
    budget_status,
    intent_row,
    iso,
    opened_review,
    recorded,
    review_change,
    shadow_row,
)
from lockgate.views.store import SOURCE, Change, Views

#: Intents kept folded between their events (the rest are folded again from the views).
FOLDED_KEPT = 4096


class ProjectionGap(LockgateError):
    """An event that does not follow what the views hold of its intent."""


class IntentViews(Projection[TrackingRecorder]):
    """Folds each event into the views, with its tracking, in one transaction."""

    name = "lockgate-views"

    def __init__(self, view: Views, sources: Sequence[str] = (SOURCE,)) -> None:
        """``sources``: the events streams (partitions) events come from, in partition order."""
        # The library types its views as tracking recorders; both backends are one.
        super().__init__(cast(TrackingRecorder, view))
        self.views = view
        self._sources = {name: index for index, name in enumerate(sources)}
        self._folded: OrderedDict[str, tuple[EffectIntent, datetime]] = OrderedDict()

    def position(self, tracking: Tracking) -> int:
        """An event's position in the views' record: its stream sequence with one events
        stream; with K partitions, the sequence times K plus the partition's index (unique
        across partitions, and in about the order they were stored, as the partitions
        grow alike)."""
        k = len(self._sources)
        return tracking.notification_id if k == 1 else \
            tracking.notification_id * k + self._sources[tracking.application_name]

    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        """Apply ``domain_event`` (an ``EffectIntent`` event) at ``tracking``'s position.

        Raises:
            ProjectionGap: the event is not its intent's next.
            TypeError: not a Lockgate event.
        """
        self.process_events([(domain_event, tracking)])

    def process_events(self, pairs: Sequence[tuple[Any, Tracking]]) -> int:
        """Apply consecutive events in one transaction, tracked at the last one applied.

        The views then move from one position to a later one at once: a crash leaves
        them at either, never between, and the store's commit (its fsync) is paid once
        per batch instead of once per event. Events before a failing one are applied;
        the failure is raised after.

        Returns:
            How many events changed the views (those held already change nothing).

        Raises:
            ProjectionGap: an event is not its intent's next.
            TypeError: not a Lockgate event.
        """
        changes: list[Change] = []
        folded: dict[str, tuple[EffectIntent, datetime]] = {}
        last: Tracking | None = None
        failure: Exception | None = None
        for domain_event, tracking in pairs:
            try:
                change = self._step(domain_event, tracking, folded)
            except Exception as exc:  # noqa: BLE001 - raised below, after the prefix is kept
                failure = exc
                break
            if change is not None:
                changes.append(change)
                last = tracking
        if changes and last is not None:
            self.views.apply_many(changes, last)
            for intent_id, entry in folded.items():
                keep(self._folded, intent_id, entry, FOLDED_KEPT)
        if failure is not None:
            raise failure
        return len(changes)

    def _step(self, domain_event: Any, tracking: Tracking,
              folded: dict[str, tuple[EffectIntent, datetime]]) -> Change | None:
        """The change one event makes, folding it into ``folded`` (this batch's intents)."""
        if not isinstance(domain_event, Event):
            raise TypeError(f"not a Lockgate event: {type(domain_event).__name__}")
        event = domain_event
        intent_id = event.originator_id.hex
        known = folded.get(intent_id) or self._recall(intent_id)
        before = known[0] if known else None
        expected = (before.version if before else 0) + 1
        if event.originator_version < expected and self._holds(event):
            return None  # handed over again (a redelivery, a replay): applied once already
        if before is None and isinstance(event, IntentArchived):
            # Views started after the intent left the hot store: it begins at its mark
            # (what came before is in the store that projected it then, not here).
            expected = event.originator_version
        if event.originator_version != expected:
            raise ProjectionGap(
                f"intent {intent_id}: event {type(event).__name__} v{event.originator_version} "
                f"at position {tracking.notification_id}, but the views hold v{expected - 1}")
        # Until the write commits, the process remembers nothing of it.
        self._folded.pop(intent_id, None)
        intent = evolve(before, event)
        created_at = known[1] if known else event.timestamp
        folded[intent_id] = (intent, created_at)
        return self.change(event, intent, created_at, self.position(tracking))

    def refold(self, *, page: int = 500) -> int:
        """Fold the record the views hold into their derived tables again; return intents.

        After the derived tables' shape changed (``prepare`` dropped them): the record
        is not read from the hot store, which may no longer hold it, but from the views'
        own events, one intent at a time, each event's change written in order.
        """
        self._folded.clear()
        after, count = "", 0
        while True:
            ids = self.views.intent_ids_after(after, limit=page)
            if not ids:
                self.views.refolded([], done=True)
                return count
            changes: list[Change] = []
            for intent_id in ids:
                intent: EffectIntent | None = None
                created_at: datetime | None = None
                for row in self.views.events_of(intent_id):
                    event = decode_event(recorded(row))
                    intent = evolve(intent, event)
                    created_at = created_at or event.timestamp
                    if intent is not None:
                        changes.append(self.change(event, intent, created_at, row.sequence))
                count += 1
            self.views.refolded(changes)
            after = ids[-1]

    @staticmethod
    def change(event: Event, intent: EffectIntent, created_at: datetime, sequence: int) -> Change:
        """Everything ``event`` changes in the views, ``intent`` folded through it (pure)."""
        stored = encode_event(event)
        row = EventRow(
            sequence=sequence, tenant=intent.tenant, intent_id=intent.intent_id,
            version=event.originator_version, event_type=stored.event_type,
            event_id=event.event_id, recorded_at=iso(event.timestamp), data=stored.data.decode(),
        )
        opened = review = None
        if isinstance(event, ReviewRequested):
            opened = opened_review(event, intent)
        changed = review_change(event, intent)
        if changed is not None and hasattr(event, "review_id"):
            review = (str(event.review_id), changed[0], changed[1])
        budgets: tuple[BudgetUse, ...] = ()
        if intent.reservations and (isinstance(event, PolicyDecided)
                                    or intent.state.terminal):
            status = budget_status(intent)
            budgets = tuple(BudgetUse(tenant=intent.tenant, intent_id=intent.intent_id,
                                      budget=b, status=status, updated_at=row.recorded_at)
                            for b in intent.reservations)
        decided = isinstance(event, PolicyDecided)
        return Change(event=row, intent=intent_row(intent, created_at=created_at,
                                                   last_sequence=sequence),
                      opened=opened, review=review, budgets=budgets, decided=decided,
                      # The intent's latest decision beside the shadow bundle's, if one ran.
                      shadow=shadow_row(event, intent) if isinstance(event, PolicyDecided) else None)

    def _holds(self, event: Event) -> bool:
        """Whether the views hold ``event`` itself (its id, at its version)."""
        return any(r.version == event.originator_version and r.event_id == event.event_id
                   for r in self.views.events_of(event.originator_id.hex))

    def _recall(self, intent_id: str) -> tuple[EffectIntent, datetime] | None:
        """The intent as the views hold it, folded (``None``: no event of it yet)."""
        if intent_id in self._folded:
            self._folded.move_to_end(intent_id)
            return self._folded[intent_id]
        rows = self.views.events_of(intent_id)
        if not rows:
            return None
        events = [decode_event(recorded(r)) for r in rows]
        intent = fold(events)
        if intent is None:
            return None
        return keep(self._folded, intent_id, (intent, events[0].timestamp), FOLDED_KEPT)
