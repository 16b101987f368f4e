"""One trace per candidate: its id is the intent id, intake's span its root, every step a span under it."""

from __future__ import annotations

import logging
from types import SimpleNamespace

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from lockgate.core.ids import intent_id_for
from lockgate.eventstore.subjects import event_subject
from lockgate.runtime.host import ServiceHost
from lockgate.runtime.settings import Settings
from lockgate.runtime.specs import POLICY
from lockgate.runtime.tracing import Tracing, root_span_id_of, start_tracing, trace_id_of

LOG = logging.getLogger("test")
INTENT = intent_id_for("tenant-a", "run-1", "call-1")


def tracing(process: str, exporter: InMemorySpanExporter, ratio: float = 1.0) -> Tracing:
    started = start_tracing(Settings(trace_ratio=ratio), process, exporter=exporter)
    assert started is not None
    return started


def test_no_endpoint_no_tracing() -> None:
    assert start_tracing(Settings(), "intake") is None


def test_the_trace_id_is_the_intent_id() -> None:
    assert trace_id_of(INTENT) == int(INTENT, 16)
    assert trace_id_of("stand-in for a malformed candidate") != 0
    assert trace_id_of("x") == trace_id_of("x")


def test_every_process_hangs_its_span_under_intakes_root() -> None:
    spans = InMemorySpanExporter()
    intake, policy = tracing("intake", spans), tracing("policy", spans)

    with intake.span("intake candidate", INTENT, root=True):
        pass
    with policy.span("policy normalized", INTENT):
        pass

    root, step = spans.get_finished_spans()
    assert root.context is not None and step.context is not None
    assert root.context.trace_id == step.context.trace_id == int(INTENT, 16)
    assert root.parent is None and root.context.span_id == root_span_id_of(INTENT)
    assert step.parent is not None and step.parent.span_id == root.context.span_id
    assert step.resource.attributes["service.name"] == "policy"


def test_a_span_without_a_candidate_starts_a_trace_of_its_own() -> None:
    spans = InMemorySpanExporter()
    t = tracing("intake", spans)
    with t.span("intake candidate", None, root=True):
        pass
    with t.span("intake candidate", INTENT, root=True):
        pass
    (alone, known) = spans.get_finished_spans()
    assert alone.context is not None and known.context is not None
    assert alone.context.trace_id != known.context.trace_id
    assert alone.context.span_id != root_span_id_of(INTENT)  # the chosen ids were used once


def test_every_process_samples_the_same_candidates() -> None:
    first, second = InMemorySpanExporter(), InMemorySpanExporter()
    a, b = tracing("intake", first, ratio=0.5), tracing("executor", second, ratio=0.5)
    intents = [intent_id_for("tenant-a", "run-1", f"call-{n}") for n in range(200)]
    for intent_id in intents:
        with a.span("intake candidate", intent_id, root=True):
            pass
        with b.span("executor ready", intent_id):
            pass

    def kept(spans: InMemorySpanExporter) -> set[int]:
        return {s.context.trace_id for s in spans.get_finished_spans() if s.context is not None}

    assert kept(first) == kept(second)
    assert 50 < len(kept(first)) < 150


class Delivered:
    """An event delivered to a durable (settled into nothing)."""

    def __init__(self, subject: str) -> None:
        self.raw_message = SimpleNamespace(
            subject=subject, headers={},
            metadata=SimpleNamespace(num_delivered=1, sequence=SimpleNamespace(stream=9)))

    async def ack(self) -> None:
        return None

    async def nack(self, delay: float | None = None) -> None:
        return None

    async def reject(self) -> None:
        return None


async def test_the_kit_traces_each_delivery_under_its_candidate() -> None:
    spans = InMemorySpanExporter()
    host = ServiceHost(Settings(metrics_enabled=False), POLICY, lambda ports: ports, LOG)
    failing = [False]

    async def handler(msg: object) -> None:
        if failing[0]:
            raise ValueError("a bug")

    host.durable(POLICY.normalized, handler)
    host.tracing = tracing("policy", spans)
    (binding,) = host.bindings
    subject = event_subject("tenant-a", INTENT, 2, "CandidateNormalized")

    await binding.entry(Delivered(subject))  # type: ignore[arg-type]
    failing[0] = True
    await binding.entry(Delivered(subject))  # type: ignore[arg-type]

    ok, failed = spans.get_finished_spans()
    assert ok.name == "policy normalized"
    assert ok.context is not None and ok.context.trace_id == int(INTENT, 16)
    assert ok.parent is not None and ok.parent.span_id == root_span_id_of(INTENT)
    assert ok.attributes is not None and ok.attributes["lockgate.outcome"] == "ack"
    assert ok.attributes["lockgate.reaction"] == "normalized"
    assert failed.status.status_code is StatusCode.ERROR
