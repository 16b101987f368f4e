"""What giving a message up records, against a real store: per stream, once, whatever the aggregate."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from types import SimpleNamespace

import msgspec
import pytest
from nats.aio.client import Client
from nats.js.errors import NotFoundError

from lockgate.contracts.messages import AttemptReport
from lockgate.intent.aggregate import Stamp, State
from lockgate.intent.codec import decode_event, encode_event
from lockgate.intent.events import (
    AttemptSent,
    EffectCompleted,
    ExecutionAuthorized,
    ProcessingAbandoned,
)
from lockgate.runtime.context import Ports, ports_for
from lockgate.runtime.ports.intents import load_intent
from lockgate.runtime.service import Unaddressed, abandon_event, abandon_report
from lockgate.runtime.settings import Settings
from lockgate.runtime.settlement import Abandonment
from lockgate.testing.intents import T0, History

WHY = Abandonment("executor-reports", "failed 5 times; last: KeyError: 'x'", 5)


@pytest.fixture
async def ports(nc: Client) -> AsyncIterator[Ports]:
    with contextlib.suppress(NotFoundError):
        await nc.jetstream().delete_stream("LG_EVENTS")
    yield await ports_for(nc, Settings(manage_topology=True))


def sent_history() -> History:
    h = History().normalized().decided("allow")
    h.add(ExecutionAuthorized, attempt_id="a1", intent_key="k1", digest="sha256:d1",
          policy_revision="p", contract_revision="rev-1", gate_facts={}, deadline_at=T0)
    return h.add(AttemptSent, attempt_id="a1")


def message(subject: str, data: bytes, headers: dict[str, str] | None = None, seq: int = 9) -> object:
    raw = SimpleNamespace(subject=subject, data=data, headers=headers or {},
                          metadata=SimpleNamespace(sequence=SimpleNamespace(stream=seq), num_delivered=5))
    return SimpleNamespace(raw_message=raw)


async def test_a_report_given_up_leaves_a_sent_intent_to_an_operator(ports: Ports) -> None:
    h = sent_history()
    await ports.store.append(await ports.store.load("tenant-a", h.intent_id),
                             [encode_event(e) for e in h.events])
    report = AttemptReport(tenant="tenant-a", intent_id=h.intent_id, attempt_id="a1", stage="completed")
    msg = message(f"lg.report.case.add_note.{h.intent_id}", msgspec.json.encode(report))
    abandon = abandon_report(lambda: ports, lambda: T0)
    await abandon(msg, WHY)  # type: ignore[arg-type]
    await abandon(msg, WHY)  # type: ignore[arg-type]  # a redelivery records nothing twice
    intent = await load_intent(ports.store, "tenant-a", h.intent_id)
    assert intent is not None and intent.state is State.NEEDS_OPERATOR
    assert intent.abandoned == ("executor-reports:report-a1-completed",)
    # A report too broken to name its intent is on no record (its deadline speaks for it),
    # and says so: the kit terminates it as poison.
    with pytest.raises(Unaddressed):
        await abandon(message("lg.report.case.add_note.x", b"\xff"), WHY)  # type: ignore[arg-type]


async def test_an_event_given_up_is_recorded_even_when_its_aggregate_does_not_fold(ports: Ports) -> None:
    h = History().normalized()
    history = await ports.store.append(await ports.store.load("tenant-a", h.intent_id),
                                       [encode_event(e) for e in h.events])
    # An event that decodes but does not apply: an attempt the intent never authorized.
    broken = EffectCompleted.next(
        h.intent, Stamp(now=T0, event_id="broken", causation_id="c"), attempt_id="nope", receipt={},
        result={}, provenance={})
    history = await ports.store.append(history, [encode_event(broken)])
    last = history.events[-1]
    msg = message(f"lg.evt.tenant-a.{h.intent_id}.{last.version}.EffectCompleted", last.data,
                  {"Nats-Msg-Id": "broken"}, seq=last.sequence)
    await abandon_event(lambda: ports, lambda: T0)(msg, Abandonment("intake-responses", "KeyError", 5))  # type: ignore[arg-type]
    stored = (await ports.store.load("tenant-a", h.intent_id)).events
    assert [e.event_type for e in stored][-1] == "ProcessingAbandoned"
    abandoned = decode_event(stored[-1])
    assert isinstance(abandoned, ProcessingAbandoned) and abandoned.trigger == "broken"
    # Giving up a ProcessingAbandoned itself records nothing more: that would never end.
    again = message(f"lg.evt.tenant-a.{h.intent_id}.{stored[-1].version}.ProcessingAbandoned",
                    stored[-1].data, {"Nats-Msg-Id": stored[-1].event_id}, seq=stored[-1].sequence)
    await abandon_event(lambda: ports, lambda: T0)(again, Abandonment("intake-responses", "x", 5))  # type: ignore[arg-type]
    assert len((await ports.store.load("tenant-a", h.intent_id)).events) == len(stored)
