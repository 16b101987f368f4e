"""Normalization's handler on in-memory ports: the adapter asked (with the facts), canonical
arguments and their digest stored, and every way it fails recorded, without a broker."""

from __future__ import annotations

import pytest

from lockgate.contracts.messages import (
    Facts,
    NormalizeRequest,
    NormalizeResult,
    Refusal,
    RunContext,
)
from lockgate.core.canonical import digest
from lockgate.eventstore.base import RecordedEvent
from lockgate.intent.aggregate import EffectIntent, State
from lockgate.intent.codec import encode_event
from lockgate.normalization.handlers import GIVE_UP_AFTER, NormalizationHandlers
from lockgate.runtime.context import MemoryPorts
from lockgate.runtime.ports.adapters import AdapterRefused, AdapterUnavailable, FakeAdapters
from lockgate.testing.intents import T0, History
from lockgate.worlds.casenotes.adapter import CONTRACT

#: The case-notes world's facts about an open case the actor may write to.
OPEN_FACTS: dict[str, str | int | bool] = {
    "exists": True, "tenant": "tenant-a", "status": "open", "writes_suspended": False,
    "actor_may_add_note": True, "sensitive": False, "version": 4}
NORMALIZED = NormalizeResult(
    arguments={"case_id": "case-123", "note": "hello"},
    resource={"type": "case", "id": "case-123", "tenant": "tenant-a"},
    destination="case-notes:tenant-a/case-123", facts=Facts(facts=OPEN_FACTS, revision="4"))


def ports_answering(answer: NormalizeResult | BaseException | None) -> MemoryPorts:
    """case.add_note registered; its adapter answers ``answer`` (``None``: nobody answers)."""
    return MemoryPorts.create(CONTRACT, adapters=FakeAdapters(normalizes=answer))


async def received(ports: MemoryPorts, h: History) -> RecordedEvent:
    """Store ``h``; its CandidateReceived as stored (what normalization's durable is handed)."""
    history = await ports.store.load("tenant-a", h.intent_id)
    history = await ports.store.append(history, [encode_event(e) for e in h.events])
    return history.events[0]


async def intent_of(ports: MemoryPorts, h: History) -> EffectIntent:
    intent = await ports.intents.load("tenant-a", h.intent_id)
    assert intent is not None
    return intent


async def test_canonical_arguments_their_digest_and_the_facts_are_stored() -> None:
    ports = ports_answering(NORMALIZED)
    await ports.runs.open(RunContext(run_id="run-1", tenant="tenant-a", actor="user-42",
                                     context={"case_id": "case-123"}, delegation=None,
                                     stage="default", opened_at=T0))
    h = History(contract_revision=CONTRACT.revision)
    await NormalizationHandlers(ports, lambda: T0).received(await received(ports, h), deliveries=1)
    (asked,) = ports.adapters.asked_for("normalize")
    assert asked == NormalizeRequest(tenant="tenant-a", actor="user-42", arguments={"note": "hello"},
                                     context={"case_id": "case-123"}, with_facts=True)
    intent = await intent_of(ports, h)
    assert intent.state is State.NORMALIZED
    assert intent.normalized_arguments == {"case_id": "case-123", "note": "hello"}
    assert intent.digest == digest({
        "tenant": "tenant-a", "actor": "user-42", "capability": "case.add_note",
        "contract_revision": CONTRACT.revision, "effect_class": "write",
        "arguments": {"case_id": "case-123", "note": "hello"},
        "resource": {"type": "case", "id": "case-123", "tenant": "tenant-a"},
        "destination": "case-notes:tenant-a/case-123"})
    assert intent.normalized_facts == OPEN_FACTS


async def test_normalizing_again_records_nothing_more() -> None:
    ports = ports_answering(NORMALIZED)
    h = History(contract_revision=CONTRACT.revision)
    trigger = await received(ports, h)
    handlers = NormalizationHandlers(ports, lambda: T0)
    await handlers.received(trigger, deliveries=1)
    await handlers.received(trigger, deliveries=2)  # redelivered
    types = [e.event_type for e in (await ports.store.load("tenant-a", h.intent_id)).events]
    assert types == ["CandidateReceived", "CandidateNormalized"]


async def test_the_adapter_s_reason_is_recorded_as_the_failure() -> None:
    ports = ports_answering(NormalizeResult(reason="case.not-found", field="case_id"))
    h = History(contract_revision=CONTRACT.revision)
    await NormalizationHandlers(ports, lambda: T0).received(await received(ports, h), deliveries=1)
    intent = await intent_of(ports, h)
    assert (intent.state, intent.reason) == (State.REJECTED, "case.not-found")
    last = (await ports.store.load("tenant-a", h.intent_id)).events[-1]
    assert last.event_type == "NormalizationFailed"


async def test_a_contract_changed_since_the_turn_fails_without_asking_the_adapter() -> None:
    ports = ports_answering(NORMALIZED)
    h = History(contract_revision="an-older-revision")
    await NormalizationHandlers(ports, lambda: T0).received(await received(ports, h), deliveries=1)
    intent = await intent_of(ports, h)
    assert (intent.state, intent.reason) == (State.REJECTED, "capability.changed")
    assert ports.adapters.asked == []


async def test_an_adapter_s_refusal_is_not_retried_forever() -> None:
    ports = ports_answering(AdapterRefused("case.add_note", Refusal("adapter.malformed", "bad answer")))
    h = History(contract_revision=CONTRACT.revision)
    with pytest.raises(AdapterRefused):  # the consumer's failure path: nak, then give up
        await NormalizationHandlers(ports, lambda: T0).received(await received(ports, h), deliveries=1)
    assert (await intent_of(ports, h)).state is State.PROPOSED


async def test_normalization_retries_then_gives_up_as_unavailable() -> None:
    ports = ports_answering(None)
    h = History(contract_revision=CONTRACT.revision)
    trigger = await received(ports, h)
    handlers = NormalizationHandlers(ports, lambda: T0)
    with pytest.raises(AdapterUnavailable):  # no adapter answers: nak and try again
        await handlers.received(trigger, deliveries=GIVE_UP_AFTER - 1)
    assert (await intent_of(ports, h)).state is State.PROPOSED
    await handlers.received(trigger, deliveries=GIVE_UP_AFTER)
    intent = await intent_of(ports, h)
    assert (intent.state, intent.reason) == (State.REJECTED, "capability.unavailable")


async def test_a_correction_is_placed_in_its_lineage() -> None:
    """A call that follows a refused one is normalized with its place: its predecessor and root."""
    ports = ports_answering(NORMALIZED)
    first = History(call_id="call-1", contract_revision=CONTRACT.revision).normalized(
        digest="sha256:other").decided("deny", reasons=["case.closed"])
    await received(ports, first)
    h = History(call_id="call-2", contract_revision=CONTRACT.revision, follows=first.intent_id)
    await NormalizationHandlers(ports, lambda: T0).received(await received(ports, h), deliveries=1)
    intent = await intent_of(ports, h)
    assert intent.state is State.NORMALIZED
    assert (intent.lineage_root, intent.lineage_denials) == (first.intent_id, 1)
