"""The reconciler's handlers on in-memory ports: an unknown outcome queried by identity and its
finding recorded, retries with backoff, and operators' resolutions, without a broker."""

from __future__ import annotations

import msgspec
import pytest

from lockgate.contracts import subjects
from lockgate.contracts.messages import (
    NotResolved,
    QueryRequest,
    QueryResult,
    Recorded,
    ResolveOutcome,
)
from lockgate.eventstore.base import RecordedEvent
from lockgate.intent.aggregate import EffectIntent, State
from lockgate.intent.codec import decode_event, encode_event
from lockgate.intent.events import (
    AttemptSent,
    ExecutionAuthorized,
    OutcomeUnknown,
    Reconciled,
    WithdrawalRequested,
)
from lockgate.reconciler.handlers import ReconcilerHandlers
from lockgate.runtime.context import MemoryPorts
from lockgate.runtime.ports.adapters import FakeAdapters
from lockgate.runtime.service import Retry
from lockgate.runtime.settlement import backoff_s
from lockgate.testing.intents import T0, History
from lockgate.worlds.casenotes.adapter import CONTRACT


def unknown_history(*, asked_to_stop: bool = False) -> History:
    """Attempt a1 of case.add_note sent, its outcome unknown (``asked_to_stop``: withdrawn
    while its order was out)."""
    h = History().normalized().decided("allow")
    h.add(ExecutionAuthorized, attempt_id="a1", intent_key="k1", digest="sha256:d1",
          policy_revision="p", contract_revision="rev-1", gate_facts={}, deadline_at=T0)
    h.add(AttemptSent, attempt_id="a1")
    if asked_to_stop:
        h.add(WithdrawalRequested, attempt_id="a1", by="user-42", why="changed my mind")
    return h.add(OutcomeUnknown, attempt_id="a1", evidence="silence")


def ports_answering(answer: QueryResult | None) -> MemoryPorts:
    """case.add_note registered; its adapter's query answers ``answer`` (``None``: nobody answers)."""
    return MemoryPorts.create(CONTRACT, adapters=FakeAdapters(queries=answer))


async def store(ports: MemoryPorts, h: History) -> RecordedEvent:
    """Store ``h``; its last event as stored (the OutcomeUnknown the reconciler is handed)."""
    history = await ports.store.load("tenant-a", h.intent_id)
    history = await ports.store.append(history, [encode_event(e) for e in h.events])
    return history.events[-1]


async def state_of(ports: MemoryPorts, intent_id: str) -> EffectIntent:
    intent = await ports.intents.load("tenant-a", intent_id)
    assert intent is not None
    return intent


# case.add_note's recovery allows the same intent again once its note is proven absent.
@pytest.mark.parametrize(("finding", "state", "resolution"), [
    ("found", State.COMPLETED, "completed"), ("absent", State.ALLOWED, "retry")])
async def test_the_query_s_finding_is_recorded(finding: str, state: State, resolution: str) -> None:
    ports = ports_answering(QueryResult(finding=finding, receipt={"note_id": "n1"} if finding == "found" else {}))
    last = await store(ports, unknown_history())
    await ReconcilerHandlers(ports, lambda: T0).unknown(last, deliveries=1)
    (asked,) = ports.adapters.asked_for("query")
    assert isinstance(asked, QueryRequest) and (asked.intent_key, asked.intent_id) == ("k1", last.intent_id)
    intent = await state_of(ports, last.intent_id)
    assert intent.state is state
    reconciled = decode_event((await ports.store.load("tenant-a", last.intent_id)).events[-1])
    assert isinstance(reconciled, Reconciled)
    assert (reconciled.resolution, reconciled.by) == (resolution, "reconciler")


async def test_an_effect_absent_that_was_asked_to_stop_stays_undone() -> None:
    ports = ports_answering(QueryResult(finding="absent"))
    last = await store(ports, unknown_history(asked_to_stop=True))
    await ReconcilerHandlers(ports, lambda: T0).unknown(last, deliveries=1)
    assert (await state_of(ports, last.intent_id)).state is State.WITHDRAWN


@pytest.mark.parametrize("answer", [None, QueryResult(finding="unknown")])
@pytest.mark.parametrize("deliveries", [1, 4, 20])
async def test_no_answer_or_an_inconclusive_one_waits_with_backoff(
    answer: QueryResult | None, deliveries: int,
) -> None:
    ports = ports_answering(answer)
    last = await store(ports, unknown_history())
    with pytest.raises(Retry) as retry:
        await ReconcilerHandlers(ports, lambda: T0).unknown(last, deliveries=deliveries)
    assert retry.value.delay_s == backoff_s(deliveries, base_s=1.0, cap_s=60.0)
    assert (await state_of(ports, last.intent_id)).state is State.UNKNOWN
    assert [e.event_type for e in (await ports.store.load("tenant-a", last.intent_id)).events][-1] == \
        "OutcomeUnknown"


async def test_an_intent_already_settled_is_not_queried() -> None:
    ports = ports_answering(QueryResult(finding="found"))
    h = unknown_history()
    trigger = await store(ports, h)
    reconciler = ReconcilerHandlers(ports, lambda: T0)
    await reconciler.resolve(subjects.resolve("tenant-a", h.intent_id, "ops-1"),
                             msgspec.json.encode(ResolveOutcome(finding="absent", why="checked")))
    await reconciler.unknown(trigger, deliveries=2)
    assert ports.adapters.asked_for("query") == []


async def test_an_operator_resolution_is_recorded_once_and_a_repeat_says_so() -> None:
    ports = ports_answering(None)
    last = await store(ports, unknown_history())
    reconciler = ReconcilerHandlers(ports, lambda: T0)
    command = msgspec.json.encode(ResolveOutcome(finding="absent", why="checked"))
    as_ops1 = subjects.resolve("tenant-a", last.intent_id, "ops-1")
    first = msgspec.json.decode(await reconciler.resolve(as_ops1, command), type=Recorded)
    again = msgspec.json.decode(await reconciler.resolve(as_ops1, command), type=Recorded)  # reply lost
    assert first == again == Recorded("Reconciled")
    other = ResolveOutcome(finding="confirmed", why="saw it")
    answer = msgspec.json.decode(
        await reconciler.resolve(subjects.resolve("tenant-a", last.intent_id, "ops-2"),
                                 msgspec.json.encode(other)), type=NotResolved)
    assert (answer.error, answer.by, answer.finding) == ("reconcile.already-settled", "operator:ops-1", "absent")
    types = [e.event_type for e in (await ports.store.load("tenant-a", last.intent_id)).events]
    assert types.count("Reconciled") == 1


async def test_an_operator_racing_the_reconciler_is_refused_with_the_finding_that_settled_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The reconciler records Reconciled(confirmed) between the operator's load and append:
    the operator's command is decided again on the new history and refused, with the
    reconciler's finding and receipt, never lost and never recorded on top."""
    ports = ports_answering(QueryResult(finding="found", receipt={"note_id": "n7"}))
    last = await store(ports, unknown_history())
    reconciler = ReconcilerHandlers(ports, lambda: T0)
    lookup = ports.registry.get
    raced: list[bool] = []

    async def lookup_while_the_reconciler_runs(capability: str) -> object:
        if not raced:  # the operator's step, after its load: the reconciler gets there first
            raced.append(True)
            await reconciler.unknown(last, deliveries=1)
        return await lookup(capability)

    monkeypatch.setattr(ports.registry, "get", lookup_while_the_reconciler_runs)
    command = ResolveOutcome(finding="absent", why="not in the CRM")
    reply = await reconciler.resolve(subjects.resolve("tenant-a", last.intent_id, "ops-1"),
                                     msgspec.json.encode(command))
    answer = msgspec.json.decode(reply, type=NotResolved)
    assert (answer.error, answer.settled_by, answer.finding, answer.by) == (
        "reconcile.already-settled", "Reconciled", "confirmed", "reconciler")
    assert answer.receipt == {"note_id": "n7"} and answer.state == "completed"
    stored = [e.event_type for e in (await ports.store.load("tenant-a", last.intent_id)).events]
    assert stored.count("Reconciled") == 1


@pytest.mark.parametrize(("subject", "body", "code"), [
    ("lg.nonsense", b"{}", "reconcile.unknown-intent"),
    (subjects.resolve("tenant-a", "0" * 32, "ops-1"), b"{", "reconcile.malformed"),
])
async def test_a_resolution_that_cannot_be_read_is_refused(subject: str, body: bytes, code: str) -> None:
    ports = ports_answering(None)
    reply = await ReconcilerHandlers(ports, lambda: T0).resolve(subject, body)
    assert msgspec.json.decode(reply)["error"] == code
