"""Events stored at an older version read as the current one, through ``lockgate.intent.upcasters``."""

from __future__ import annotations

from uuid import UUID

import msgspec
import pytest

from lockgate.contracts.vocabulary import DecisionOutcome, Finding, Resolution, Settles
from lockgate.eventstore.base import RecordedEvent
from lockgate.intent.aggregate import State
from lockgate.intent.codec import EVENT_TYPES, EventDecodeError, decode_event, encode_event, fold
from lockgate.intent.events import EffectCompleted, PolicyDecided, Reconciled
from lockgate.intent.upcasters import UPCASTERS
from tests.unit.test_intent_goldens import completed

INTENT = "479f96e1ea16d51f0d90ea3c0a48ba77"
#: As version 1 of each event was stored: no budgets, no provenance, no resolution.
POLICY_DECIDED_V1 = (
    b'{"v":1,"data":{"originator_id":"479f96e1-ea16-d51f-0d90-ea3c0a48ba77","originator_version":3,'
    b'"timestamp":"2026-01-01T00:00:02Z","event_id":"e3","correlation_id":"run-1","causation_id":"3",'
    b'"outcome":"allow","policy_revision":"pol-1","reasons":["policy.allow"],"determining":["p1"],'
    b'"facts":{"case_state":"open"},"digest":"sha256:d1"}}')
EFFECT_COMPLETED_V1 = (
    b'{"v":1,"data":{"originator_id":"479f96e1-ea16-d51f-0d90-ea3c0a48ba77","originator_version":8,'
    b'"timestamp":"2026-01-01T00:00:07Z","event_id":"e8","correlation_id":"run-1","causation_id":"8",'
    b'"attempt_id":"a1","receipt":{"note_id":"n-1"},"result":{"note_id":"n-1"}}}')
RECONCILED_V1 = (
    b'{"v":1,"data":{"originator_id":"479f96e1-ea16-d51f-0d90-ea3c0a48ba77","originator_version":7,'
    b'"timestamp":"2026-01-01T00:00:06Z","event_id":"e7","correlation_id":"run-1","causation_id":"7",'
    b'"attempt_id":"a1","finding":"confirmed","receipt":{"note_id":"n-1"},"by":"ops","why":"looked"}}')


def stored(event_type: str, version: int, data: bytes) -> RecordedEvent:
    return RecordedEvent("tenant-a", INTENT, version, event_type, f"e{version}", data, version)


def test_a_version_1_policy_decision_reads_with_no_budgets() -> None:
    e = decode_event(stored("PolicyDecided", 3, POLICY_DECIDED_V1))
    assert isinstance(e, PolicyDecided)
    assert (e.outcome, e.reservations, e.facts) == (DecisionOutcome.ALLOW, [], {"case_state": "open"})
    assert e.originator_id == UUID(hex=INTENT) and e.originator_version == 3


def test_a_version_1_completion_reads_with_no_provenance_and_settles_its_budget() -> None:
    e = decode_event(stored("EffectCompleted", 8, EFFECT_COMPLETED_V1))
    assert isinstance(e, EffectCompleted)
    assert (e.provenance, e.receipt, e.settles) == ({}, {"note_id": "n-1"}, Settles.BUDGET)


@pytest.mark.parametrize(("finding", "resolution"), [
    ("confirmed", Resolution.COMPLETED), ("absent", Resolution.OPERATOR),
])
def test_a_version_1_reconciliation_reads_with_the_resolution_it_meant(
    finding: str, resolution: Resolution,
) -> None:
    data = RECONCILED_V1.replace(b'"confirmed"', b'"%s"' % finding.encode())
    e = decode_event(stored("Reconciled", 7, data))
    assert isinstance(e, Reconciled)
    assert (e.finding, e.resolution) == (Finding(finding), resolution)


def test_every_upcaster_reads_a_version_its_event_has_moved_past() -> None:
    for (name, version), _ in UPCASTERS.items():
        assert version < EVENT_TYPES[name].version, name
    for name, cls in EVENT_TYPES.items():
        assert all((name, v) in UPCASTERS for v in range(1, cls.version)), name


def test_a_stored_version_with_no_upcaster_is_refused() -> None:
    data = msgspec.json.encode({**msgspec.json.decode(POLICY_DECIDED_V1), "v": 0})
    with pytest.raises(EventDecodeError):
        decode_event(stored("PolicyDecided", 3, data))


def test_an_old_history_folds_to_what_its_events_meant() -> None:
    h = completed()
    n = next(i for i, e in enumerate(h.events, start=1) if isinstance(e, EffectCompleted))
    records = [RecordedEvent("tenant-a", h.intent_id, e.originator_version, type(e).__name__,
                             e.event_id, encode_event(e).data, i)
               for i, e in enumerate(h.events[:n - 1], start=1)]
    # The completion as version 1 stored it; the subject gives its intent and position.
    records.append(RecordedEvent("tenant-a", h.intent_id, n, "EffectCompleted", "e", EFFECT_COMPLETED_V1, n))
    intent = fold(decode_event(r) for r in records)
    assert intent is not None and intent.state is State.COMPLETED and intent.version == n
    assert intent.receipt == {"note_id": "n-1"}
    assert intent.settlement is not None and intent.settlement.by == ""  # no provenance: no adapter
