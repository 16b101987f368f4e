"""The record an evaluation reads: runs' histories from the views, and the worlds' writes.

The views keep every event of every intent (the permanent record, archived intents
included), so an evaluation reads them rather than the hot stream.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from lockgate.intent.aggregate import Event
from lockgate.intent.codec import decode_event
from lockgate.views.rows import recorded
from lockgate.views.store import Views

#: Intents read per page of a run.
PAGE = 1000


def run_histories(views: Views, runs: Sequence[str], *, tenant: str | None = None
                  ) -> dict[str, list[Event]]:
    """Every intent of ``runs`` (run ids; of ``tenant`` when given), each its events in order."""
    histories: dict[str, list[Event]] = {}
    for run_id in runs:
        before: int | None = None
        while True:
            rows = views.intents(tenant=tenant, run_id=run_id, before=before, limit=PAGE)
            for row in rows:
                histories[row.intent_id] = [decode_event(recorded(e))
                                            for e in views.events_of(row.intent_id)]
            if len(rows) < PAGE:
                break
            before = rows[-1].last_sequence
    return histories


def relevant_writes(views: Views, histories: Mapping[str, Sequence[Event]],
                    writes: Sequence[Mapping[str, str]]) -> list[Mapping[str, str]]:
    """The writes of the intents in ``histories``, and those of intents nobody has on record.

    A write naming an intent of another run is that run's business; a write naming no
    intent the views know is every evaluation's: nothing may reach a world without one.
    """
    return [w for w in writes
            if w.get("intent_id", "") in histories or views.intent(w.get("intent_id", "")) is None]
