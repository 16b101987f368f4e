"""The OpenTelemetry SDK behind ``lockgate.runtime.tracing``: imported only when tracing is on."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.trace.sampling import TraceIdRatioBased
from opentelemetry.trace import (
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)

from lockgate.runtime.settings import Settings
from lockgate.runtime.tracing import FAILED, Attributes, root_span_id_of, trace_id_of

_SAMPLED = TraceFlags(TraceFlags.SAMPLED)


class ChosenIds(IdGenerator):
    """Random ids, except for the one span whose ids the caller chose (a candidate's root)."""

    def __init__(self) -> None:
        self._trace_id: int | None = None
        self._span_id: int | None = None

    def choose(self, trace_id: int | None, span_id: int | None) -> None:
        """The next span started gets these ids (``None``: random ones)."""
        self._trace_id, self._span_id = trace_id, span_id

    def generate_trace_id(self) -> int:
        """The chosen trace id, once; else a random one."""
        chosen, self._trace_id = self._trace_id, None
        return chosen if chosen is not None else random.getrandbits(128) or 1

    def generate_span_id(self) -> int:
        """The chosen span id, once; else a random one."""
        chosen, self._span_id = self._span_id, None
        return chosen if chosen is not None else random.getrandbits(64) or 1

    def is_trace_id_random(self) -> bool:
        """Intent ids are SHA-256 digits: as random as drawn ones."""
        return True


class OtelTracing:
    """``lockgate.runtime.tracing.Tracing`` over the SDK: OTLP over HTTP, batched."""

    def __init__(self, settings: Settings, process: str, exporter: SpanExporter | None) -> None:
        self._ids = ChosenIds()
        resource = Resource.create({"service.name": process, "service.namespace": "lockgate"})
        self._provider = TracerProvider(
            resource=resource, id_generator=self._ids, sampler=TraceIdRatioBased(settings.trace_ratio))
        if exporter is None:
            base = (settings.otlp_endpoint or "").rstrip("/")
            self._provider.add_span_processor(
                BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{base}/v1/traces")))
        else:
            self._provider.add_span_processor(SimpleSpanProcessor(exporter))
        self._tracer = self._provider.get_tracer("lockgate")

    @contextmanager
    def span(
        self, name: str, intent_id: str | None, *, root: bool = False,
        attributes: Attributes | None = None,
    ) -> Iterator[Span]:
        """A span in the trace of the candidate ``intent_id`` (see ``Tracing.span``)."""
        context = Context()
        if intent_id is not None:
            trace_id, root_id = trace_id_of(intent_id), root_span_id_of(intent_id)
            if root:
                self._ids.choose(trace_id, root_id)
            else:
                parent = SpanContext(trace_id, root_id, is_remote=True, trace_flags=_SAMPLED)
                context = trace.set_span_in_context(NonRecordingSpan(parent), context)
        try:
            span = self._tracer.start_span(name, context=context, kind=SpanKind.CONSUMER,
                                           attributes=dict(attributes or {}))
        finally:
            self._ids.choose(None, None)
        with trace.use_span(span, end_on_exit=True):
            yield span

    def outcome(self, span: Span, outcome: str) -> None:
        """Record how the message ended (an error status for a failure)."""
        span.set_attribute("lockgate.outcome", outcome)
        if outcome in FAILED:
            span.set_status(Status(StatusCode.ERROR, outcome))

    def shutdown(self) -> None:
        """Export what is buffered and stop."""
        self._provider.shutdown()
