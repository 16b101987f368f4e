"""Every process's metrics and traces, on the running system: loopback, listed, counted once, no ids.

The system runs with an OTLP endpoint configured (a receiver of the test's own), so the
traces of the same candidates are checked too.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from lockgate.cli.status import cmd_status
from lockgate.client.output import Output
from lockgate.client.sdk import Gateway
from lockgate.core.ids import random_id
from lockgate.operations.status import check_status, status_names
from lockgate.runtime.tracing import root_span_id_of
from lockgate.testing.otlp import Receiver
from lockgate.testing.system import System, running

NOTE = json.dumps({"note": "counted"})


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    """Where every process sends its spans."""
    with Receiver() as r:
        yield r


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory, receiver: Receiver) -> Iterator[System]:
    """The whole system, metrics on as by default, traces to ``receiver``, exported promptly."""
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100"}
    with running(System(tmp_path_factory.mktemp("metrics"), extra_env=env)) as s:
        yield s


@pytest.fixture
async def gw_b(system: System) -> AsyncIterator[Gateway]:
    """Tenant B's agent runtime (and its host)."""
    gateway = await system.gateway("tenant-b")
    try:
        yield gateway
    finally:
        await gateway.close()


async def endpoints(system: System) -> dict[str, str]:
    """Each process's metrics URL, from its status answer."""
    nc = await system.connect()
    try:
        answers = await check_status(nc, status_names(), timeout_s=2.0)
    finally:
        await nc.close()
    urls = {}
    for name, answer in answers.items():
        assert answer is not None, name
        urls[name] = str(answer["metrics"])
    return urls


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as reply:
        assert reply.status == 200
        return str(reply.read().decode())


def sample(text: str, name: str, **labels: str) -> float:
    """The value of one sample in an exposition (0 when absent)."""
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return 0.0


async def test_every_process_serves_its_metrics_on_loopback_and_status_lists_them(
    system: System, capsys: pytest.CaptureFixture[str],
) -> None:
    urls = await endpoints(system)
    assert set(urls) == set(status_names())
    assert all(url.startswith("http://127.0.0.1:") and url.endswith("/metrics") for url in urls.values())
    assert len(set(urls.values())) == len(urls)  # a port each
    for name, url in urls.items():
        text = await asyncio.to_thread(scrape, url)
        assert "# TYPE lockgate_handler_seconds histogram" in text, name

    assert await cmd_status(system.url, system.credentials("operator-ops"),
                            output=Output(json=True)) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {line["service"]: line["metrics"] for line in lines} == urls


async def test_an_executed_proposal_counts_once_and_every_step_is_timed(
    system: System, gw: Gateway,
) -> None:
    urls = await endpoints(system)
    labels = {"outcome": "executed", "reason_class": "none"}
    before = sample(await asyncio.to_thread(scrape, urls["intake"]), "lockgate_candidates_total", **labels)

    run = await gw.open_run(tenant="tenant-a", actor="user-42", context={"case_id": "case-load-40"})
    response = await (await run.open_turn()).propose(tool="case.add_note", arguments=NOTE)
    assert response.status == "executed"

    deadline = time.monotonic() + 10
    while (now := sample(await asyncio.to_thread(scrape, urls["intake"]),
                         "lockgate_candidates_total", **labels)) == before:
        assert time.monotonic() < deadline, "the executed answer was not counted"
        await asyncio.sleep(0.05)
    assert now == before + 1

    timed = {"intake": ("candidate", "respond", "open_run", "open_turn"),
             "normalization": ("received",), "policy": ("normalized",),
             "executor": ("ready", "report", "claim")}
    for service, reactions in timed.items():
        text = await asyncio.to_thread(scrape, urls[service])
        for reaction in reactions:
            assert sample(text, "lockgate_handler_seconds_count", service=service,
                          reaction=reaction) > 0, (service, reaction)
    assert sample(await asyncio.to_thread(scrape, urls["policy"]),
                  "lockgate_policy_decisions_total", outcome="allow") > 0
    executor = await asyncio.to_thread(scrape, urls["executor"])
    assert sample(executor, "lockgate_attempt_transitions_total", stage="completed") > 0
    # The gate's trigger is its attempt's timer: asked for again at the deadline, not acked.
    assert sample(executor, "lockgate_deliveries_total", service="executor", reaction="ready",
                  settlement="nak", outcome="timer") > 0
    adapter = await asyncio.to_thread(scrape, urls["adapter.casenotes"])
    assert sample(adapter, "lockgate_adapter_executions_total", capability="case.add_note",
                  result="completed") > 0
    assert sample(adapter, "lockgate_adapter_requests_total", capability="case.add_note",
                  operation="normalize", result="ok") > 0


async def test_no_metric_carries_an_id_or_free_text(
    system: System, gw: Gateway, gw_b: Gateway,
) -> None:
    secrets: list[str] = []
    for gateway, tenant, case, actor in ((gw, "tenant-a", "case-load-41", "user-42"),
                                         (gw_b, "tenant-b", "case-999", "user-77")):
        stranger = f"actor-{random_id()}"
        for who in (actor, stranger):
            run = await gateway.open_run(tenant=tenant, actor=who, context={"case_id": case})
            turn = await run.open_turn(turn_id=f"turn-{random_id()}")
            for tool, arguments in (("case.add_note", NOTE), (f"x.t{random_id()}", NOTE),
                                    ("case.add_note", '{"note": "a", "note": "b"}')):
                call_id = f"call-{random_id()}"
                response = await turn.propose(tool=tool, arguments=arguments, call_id=call_id)
                secrets += [response.candidate_id, call_id, run.id, turn.id, tool]
            secrets.append(stranger)
    secrets = [s for s in secrets if s != "case.add_note"]  # the capability's own name is bounded

    for name, url in (await endpoints(system)).items():
        text = await asyncio.to_thread(scrape, url)
        leaked = [s for s in secrets if s in text]
        assert leaked == [], (name, leaked)
        assert "tenant-a" not in text and "tenant-b" not in text, name


async def test_one_trace_per_candidate_with_a_span_per_step(
    system: System, gw: Gateway, receiver: Receiver,
) -> None:
    run = await gw.open_run(tenant="tenant-a", actor="user-42", context={"case_id": "case-load-42"})
    response = await (await run.open_turn()).propose(tool="case.add_note", arguments=NOTE)
    assert response.status == "executed"
    trace_id = response.candidate_id
    wanted = {"intake", "normalization", "policy", "executor", "adapter.casenotes"}
    steps = {"intake respond", "normalization received", "policy normalized", "executor ready",
             "executor report", "adapter case.add_note execute"}

    deadline = time.monotonic() + 15
    while True:  # each process exports its spans in batches of its own, whenever it does
        spans = [s for s in receiver.spans() if s.trace_id == trace_id]
        if wanted <= {s.service for s in spans} and steps <= {s.name for s in spans}:
            break
        assert time.monotonic() < deadline, sorted((s.service, s.name) for s in spans)
        await asyncio.sleep(0.1)

    root = f"{root_span_id_of(trace_id):016x}"
    (first,) = [s for s in spans if s.parent_span_id == ""]
    assert (first.service, first.name, first.span_id) == ("intake", "intake candidate", root)
    assert all(s.parent_span_id == root for s in spans if s is not first)
    names = {s.name for s in spans}
    assert steps <= names
