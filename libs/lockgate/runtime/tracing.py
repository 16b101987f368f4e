"""OpenTelemetry traces, when an endpoint is configured: one trace per candidate, a span per step.

Off unless ``Settings.otlp_endpoint`` is set (``LOCKGATE_OTLP_ENDPOINT`` or the standard
``OTEL_EXPORTER_OTLP_ENDPOINT``): a process with tracing off never imports the SDK
(``lockgate.runtime._otel`` is imported only here, only then) and pays one ``is None``
test per message.

Nothing is propagated. A candidate's trace id *is* its intent id (32 hex digits, 128 bits
of a SHA-256), which every process reads off the message it handles: the event subject,
the report subject, the order, or (at intake) the run and call id the intent id is
derived from. Intake's span for the candidate is the trace's root, its span id derived
from the intent id too; every other process's span names that root as its parent.
Carrying a ``traceparent`` instead would need every append to write it into the event's
headers and every reader to hand it on; a derived id needs neither, and an operator
opens a candidate's trace by its candidate id.

Sampling is by trace id (``Settings.trace_ratio``), so every process keeps or drops the
same candidates without telling each other.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol

from lockgate.core.ids import derived_id
from lockgate.runtime.settings import Settings

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span

log = logging.getLogger("lockgate.tracing")

Attributes = Mapping[str, str | int | float | bool]

#: Outcomes of a delivery (``lockgate.runtime.service``) that mark its span as an error.
FAILED = frozenset({"error", "lost", "poison", "abandoned"})

_HEX = frozenset("0123456789abcdef")


def trace_id_of(intent_id: str) -> int:
    """The trace id of the candidate ``intent_id``: the id itself when it is 32 hex digits."""
    if len(intent_id) != 32 or not set(intent_id) <= _HEX:
        intent_id = derived_id("trace", intent_id)
    return int(intent_id, 16) or 1


def root_span_id_of(intent_id: str) -> int:
    """The span id of the candidate's root span (intake's), derived from ``intent_id``."""
    return int(derived_id("root-span", intent_id)[:16], 16) or 1


class Tracing(Protocol):
    """One process's tracer: a span per message it handles, exported over OTLP."""

    def span(
        self, name: str, intent_id: str | None, *, root: bool = False,
        attributes: Attributes | None = None,
    ) -> AbstractContextManager[Span]:
        """A span in the trace of the candidate ``intent_id`` (a trace of its own without one).

        ``root``: the candidate's first step (intake's), the span every other process's
        spans hang under; otherwise the span's parent is that root.
        """
        ...

    def outcome(self, span: Span, outcome: str) -> None:
        """Record how the message ended on its span (an error status for a failure)."""
        ...

    def shutdown(self) -> None:
        """Export what is buffered and stop."""
        ...


def start_tracing(
    settings: Settings, process: str, *, exporter: SpanExporter | None = None,
) -> Tracing | None:
    """The process's tracing, or ``None`` when no endpoint is configured (and no ``exporter``).

    Args:
        settings: ``otlp_endpoint`` (the base URL: spans go to ``<it>/v1/traces``) and
            ``trace_ratio``.
        process: the process's status name, its ``service.name``.
        exporter: export here instead, span by span (tests: the SDK's in-memory exporter).

    Returns:
        The tracing, or ``None``: then nothing of OpenTelemetry was imported.
    """
    if exporter is None and not settings.otlp_endpoint:
        return None
    from lockgate.runtime._otel import OtelTracing

    log.info("tracing to %s", settings.otlp_endpoint or type(exporter).__name__)
    return OtelTracing(settings, process, exporter)
