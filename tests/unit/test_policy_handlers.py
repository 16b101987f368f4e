"""Policy's handlers on in-memory ports: facts, pauses, budgets and denials, without a broker.

Each test builds a history in the fake store, runs one handler as its consumer would, and
reads back what was appended, what the adapter was asked, and the budget and progress
counters.
"""

from __future__ import annotations

import shutil
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from lockgate.authz.source import BundleSource
from lockgate.contracts.messages import Facts
from lockgate.core.canonical import digest
from lockgate.eventstore.base import RecordedEvent
from lockgate.intent.aggregate import State
from lockgate.intent.events import AttemptSent, EffectCompleted, ExecutionAuthorized, GateRefused
from lockgate.policy.handlers import (
    CARRIED_FACTS_FRESH_S,
    CLOCK_SKEW_S,
    PAUSE_AFTER,
    PolicyHandlers,
)
from lockgate.runtime.context import MemoryPorts
from lockgate.runtime.ports.adapters import AdapterUnavailable
from lockgate.runtime.service import Retry
from lockgate.runtime.settings import Settings
from lockgate.testing.intents import T0, History
from tests.unit.memory_ports import OPEN_FACTS, state_of, store_history

BUNDLES = BundleSource(Settings().policy_dir)


async def test_policy_decides_on_the_facts_answered_with_the_normalization(ports: MemoryPorts) -> None:
    h = History().normalized(facts=OPEN_FACTS)
    last = await store_history(ports, h)
    await PolicyHandlers(ports, BUNDLES, lambda: T0 + timedelta(seconds=2)).normalized(last, deliveries=1)
    intent = await state_of(ports, h)
    assert intent.state is State.ALLOWED and intent.facts == OPEN_FACTS
    assert ports.adapters.asked_for("facts") == []  # a policy that asked would be told nobody answers


# Normalized at T0 + 1 s: long before policy's clock, or stamped ahead of it (skew).
@pytest.mark.parametrize("policy_at", [
    T0 + timedelta(seconds=1 + CARRIED_FACTS_FRESH_S + 1),
    T0 + timedelta(seconds=1) - timedelta(seconds=CLOCK_SKEW_S + 1),
], ids=["old", "ahead"])
async def test_policy_asks_again_for_facts_it_cannot_date(ports: MemoryPorts, policy_at: datetime) -> None:
    h = History().normalized(facts={**OPEN_FACTS, "version": 3})
    last = await store_history(ports, h)
    ports.adapters.facts_answer = Facts(facts=OPEN_FACTS, revision="4")
    await PolicyHandlers(ports, BUNDLES, lambda: policy_at).normalized(last, deliveries=1)
    intent = await state_of(ports, h)
    assert len(ports.adapters.asked_for("facts")) == 1
    assert intent.state is State.ALLOWED and intent.facts["version"] == 4


async def test_policy_pauses_when_facts_never_come(ports: MemoryPorts) -> None:
    h = History().normalized()
    last = await store_history(ports, h)
    handlers = PolicyHandlers(ports, BUNDLES, lambda: T0)
    with pytest.raises(AdapterUnavailable):
        await handlers.normalized(last, deliveries=1)
    assert (await state_of(ports, h)).state is State.NORMALIZED
    await handlers.normalized(last, deliveries=PAUSE_AFTER)
    intent = await state_of(ports, h)
    assert intent.state is State.PAUSED and intent.reason == "facts.unavailable"


async def paused_history(ports: MemoryPorts) -> tuple[History, RecordedEvent]:
    h = History().normalized()
    last = await store_history(ports, h)
    await PolicyHandlers(ports, BUNDLES, lambda: T0).normalized(last, deliveries=PAUSE_AFTER)
    paused = (await ports.store.load("tenant-a", h.intent_id)).events[-1]
    assert paused.event_type == "PolicyDecided"
    return h, paused


async def test_a_pause_is_decided_again_when_the_evidence_arrives(ports: MemoryPorts) -> None:
    h, paused = await paused_history(ports)
    handlers = PolicyHandlers(ports, BUNDLES, lambda: T0 + timedelta(seconds=5))
    with pytest.raises(Retry):  # still no facts: wait and ask again
        await handlers.paused(paused)
    ports.adapters.facts_answer = Facts(facts=OPEN_FACTS, revision="4")
    await handlers.paused(paused)
    intent = await state_of(ports, h)
    assert intent.state is State.ALLOWED and intent.decision == "allow"


async def test_a_pause_without_evidence_times_out_into_a_denial(ports: MemoryPorts) -> None:
    h, paused = await paused_history(ports)
    timeout_s = BUNDLES.current().config.pause.timeout_s
    await PolicyHandlers(ports, BUNDLES, lambda: T0 + timedelta(seconds=timeout_s + 1)).paused(paused)
    intent = await state_of(ports, h)
    assert intent.state is State.DENIED and intent.reason == "policy.pause-expired"


async def test_a_denial_is_counted_against_its_consequence_on_its_facts(ports: MemoryPorts) -> None:
    suspended = {**OPEN_FACTS, "writes_suspended": True}
    h = History().normalized(facts=suspended)
    last = await store_history(ports, h)
    await PolicyHandlers(ports, BUNDLES, lambda: T0 + timedelta(seconds=2)).normalized(last, deliveries=1)
    intent = await state_of(ports, h)
    assert intent.state is State.DENIED
    assert await ports.progress.denials("tenant-a", "run-1", intent.digest or "") == (digest(suspended), 1)


def with_budget(tmp_path: Path) -> BundleSource:
    """The demo bundle with one budget: a note per run per hour."""
    policies = tmp_path / "policies"
    shutil.copytree(Settings().policy_dir, policies)
    with (policies / "bundle.yaml").open("a") as bundle:
        bundle.write("\nbudgets:\n  - name: notes\n    scope: run\n    window_s: 3600\n    max_count: 1\n")
    return BundleSource(policies)


async def test_an_allowed_intent_holds_its_budget_and_the_next_is_denied(
    ports: MemoryPorts, tmp_path: Path,
) -> None:
    bundles = with_budget(tmp_path)
    handlers = PolicyHandlers(ports, bundles, lambda: T0 + timedelta(seconds=2))
    first, second = History(call_id="call-1").normalized(facts=OPEN_FACTS), History(
        call_id="call-2").normalized(facts=OPEN_FACTS)
    await handlers.normalized(await store_history(ports, first), deliveries=1)
    allowed = await state_of(ports, first)
    assert allowed.state is State.ALLOWED and len(allowed.reservations) == 1
    (key,) = allowed.reservations
    assert await ports.budgets.holds(key, first.intent_id)
    await handlers.normalized(await store_history(ports, second), deliveries=1)
    denied = await state_of(ports, second)
    assert denied.state is State.DENIED and denied.reason == "budget.notes.exhausted"
    assert list(ports.budgets.counters[key].holds) == [first.intent_id]


async def reserved(ports: MemoryPorts, tmp_path: Path) -> tuple[PolicyHandlers, History, str]:
    """An intent allowed under the one-note budget, its decision as stored: the key it holds."""
    handlers = PolicyHandlers(ports, with_budget(tmp_path), lambda: T0 + timedelta(seconds=2))
    h = History().normalized(facts=OPEN_FACTS)
    await handlers.normalized(await store_history(ports, h), deliveries=1)
    (key,) = (await state_of(ports, h)).reservations
    h.events[:] = await ports.intents.events("tenant-a", h.intent_id)  # the decision as stored
    return handlers, h, key


async def test_an_effect_that_happened_consumes_its_hold(ports: MemoryPorts, tmp_path: Path) -> None:
    handlers, h, key = await reserved(ports, tmp_path)
    h.add(ExecutionAuthorized, attempt_id="a1", intent_key="k1", digest="sha256:d1",
          policy_revision="p", contract_revision="rev-1", gate_facts={}, deadline_at=T0)
    h.add(AttemptSent, attempt_id="a1")
    h.add(EffectCompleted, attempt_id="a1", receipt={}, result={}, provenance={})
    await handlers.settled(await store_history(ports, h))
    counter = ports.budgets.counters[key]
    assert counter.holds == {} and counter.count == 1  # used, no longer held


async def test_an_effect_that_did_not_happen_gives_its_budget_back(
    ports: MemoryPorts, tmp_path: Path,
) -> None:
    handlers, h, key = await reserved(ports, tmp_path)
    h.add(GateRefused, reason="gate.policy-changed", gate_facts={})
    await handlers.settled(await store_history(ports, h))
    counter = ports.budgets.counters[key]
    assert counter.holds == {} and counter.count == 0

