"""A process's /metrics: loopback, a port of its own, a fixed one when asked; traces only when configured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from lockgate.core.ids import intent_id_for
from lockgate.operations.natsserver import free_port
from lockgate.runtime.metrics import start_endpoint
from lockgate.runtime.settings import Settings
from lockgate.runtime.tracing import root_span_id_of, start_tracing
from lockgate.testing.otlp import Receiver


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as reply:
        assert reply.status == 200
        assert reply.headers["Content-Type"].startswith("text/plain")
        return str(reply.read().decode())


def test_each_endpoint_listens_on_loopback_on_a_port_of_its_own() -> None:
    first, second = start_endpoint(Settings()), start_endpoint(Settings())
    assert first is not None and second is not None
    try:
        assert first.url.startswith("http://127.0.0.1:") and first.url.endswith("/metrics")
        assert first.url != second.url  # two replicas on one machine never collide
        text = scrape(first.url)
        assert "# TYPE lockgate_handler_seconds histogram" in text
        assert "process_cpu_seconds_total" in text
    finally:
        first.stop()
        second.stop()
    with pytest.raises(urllib.error.URLError):
        scrape(first.url)


def test_a_fixed_port_is_honoured_and_a_taken_one_costs_only_the_metrics() -> None:
    port = free_port()
    endpoint = start_endpoint(Settings(metrics_port=port))
    assert endpoint is not None
    try:
        assert endpoint.url == f"http://127.0.0.1:{port}/metrics"
        assert start_endpoint(Settings(metrics_port=port)) is None  # logged, not raised
    finally:
        endpoint.stop()


def test_metrics_can_be_turned_off() -> None:
    assert start_endpoint(Settings(metrics_enabled=False)) is None


def test_without_an_endpoint_no_process_imports_opentelemetry() -> None:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LOCKGATE_", "OTEL_"))}
    probe = (
        "import json, sys\n"
        "from lockgate.runtime.settings import Settings\n"
        "from lockgate.runtime.tracing import start_tracing\n"
        "import lockgate.intake.app, lockgate.executor.app, lockgate.adapters.worker\n"
        "assert start_tracing(Settings(), 'intake') is None\n"
        "print(json.dumps([m for m in sys.modules\n"
        "                  if m.startswith(('opentelemetry', 'lockgate.runtime._otel'))]))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                         timeout=60, check=True)
    loaded = json.loads(out.stdout)
    # No SDK, no exporter, no tracer: nothing of opentelemetry at all.
    assert loaded == [], loaded


def test_spans_reach_an_otlp_receiver_over_http() -> None:
    intent_id = intent_id_for("tenant-a", "run-1", "call-otlp")
    with Receiver() as receiver:
        tracing = start_tracing(Settings(otlp_endpoint=receiver.endpoint), "intake")
        assert tracing is not None
        with tracing.span("intake candidate", intent_id, root=True):
            pass
        tracing.shutdown()  # flushes the batch
        deadline = time.monotonic() + 10
        while not receiver.spans():
            assert time.monotonic() < deadline, "no span arrived"
            time.sleep(0.05)
    (span,) = receiver.spans()
    assert (span.service, span.name, span.trace_id) == ("intake", "intake candidate", intent_id)
    assert span.span_id == f"{root_span_id_of(intent_id):016x}" and span.parent_span_id == ""
