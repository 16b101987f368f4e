"""``lockgate status`` on what the cluster and the processes answered: the lines, the tables, the verdict.

The cluster report, the connection and the processes' answers are stand-ins (no server);
what is checked is what a person or a script is told, and the exit code.
"""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Mapping
from typing import Any

import pytest

from lockgate.cli import status as cli_status
from lockgate.cli.status import cmd_status
from lockgate.client.output import Output
from lockgate.operations.cluster import ClusterReport, NodeState, ReplicaState, StreamState
from lockgate.operations.status import Status, status_names
from lockgate.runtime.credentials import NodeAddress, RunInfo
from lockgate.runtime.topology import topology_streams

READY: Status = {"pid": 11, "ready": True, "consumers": {}}
NODES = [NodeAddress(name=f"n{i}", url=f"nats://127.0.0.1:{4000 + i}", monitor=f"http://127.0.0.1:{8000 + i}")
         for i in (1, 2)]


class Connection:
    """A stand-in connection: it only closes."""

    closed = False

    async def close(self) -> None:
        self.closed = True


@pytest.fixture
def answers(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Status]]:
    """The processes' answers (every one ready unless a test changes it), with no server asked."""
    given = {name: [dict(READY)] for name in status_names()}

    async def connect(url: str, credentials: object) -> Connection:
        return Connection()

    async def gather(nc: object, expected: Mapping[str, int]) -> dict[str, list[Status]]:
        return {name: list(given.get(name, [])) for name in expected}

    monkeypatch.setattr(cli_status, "_connect_once", connect)
    monkeypatch.setattr(cli_status, "gather_status", gather)
    return given


def cluster(monkeypatch: pytest.MonkeyPatch, report: ClusterReport) -> None:
    async def cluster_report(addresses: object) -> ClusterReport:
        return report

    monkeypatch.setattr(cli_status, "cluster_report", cluster_report)


def run(info: RunInfo | None = None) -> tuple[int, list[dict[str, Any]], str]:
    out, err = io.StringIO(), io.StringIO()
    code = asyncio.run(cmd_status("nats://x", info=info, output=Output(json=True, stdout=out, stderr=err)))
    return code, [json.loads(line) for line in out.getvalue().splitlines()], err.getvalue()


def test_every_process_answering_is_healthy(answers: dict[str, list[Status]]) -> None:
    code, lines, said = run()
    assert code == 0
    assert lines == [{"service": name, "ok": True, "pid": 11} for name in status_names()]
    assert said == "every service and adapter answers and makes progress\n"


def test_a_silent_process_and_an_unsupervised_adapter_are_each_a_failing_line(
    answers: dict[str, list[Status]],
) -> None:
    first = status_names()[0]
    answers[first] = []
    answers["adapter.extra"] = [{"pid": 12, "metrics": "http://127.0.0.1:9100/metrics"}]
    info = RunInfo(url="nats://x", pid=1, adapters={"extra": ["x.y"], "gone": ["x.z"]})

    code, lines, said = run(info)

    assert code == 1
    assert lines[0] == {"service": first, "ok": False, "pid": None, "problem": "no answer"}
    assert lines[-2:] == [
        {"service": "adapter.extra", "ok": True, "pid": 12, "metrics": "http://127.0.0.1:9100/metrics"},
        {"service": "adapter.gone", "ok": False, "pid": None, "problem": "no answer"},
    ]
    assert said == f"not healthy: 2 of {len(status_names()) + 2} processes not well\n"


def test_replicas_are_a_line_each_in_answer_order_and_a_missing_one_fails(
    answers: dict[str, list[Status]],
) -> None:
    name = status_names()[0]
    answers[name] = [{**READY, "pid": 30, "instance": "b"}, {**READY, "pid": 20, "instance": "a"}]
    info = RunInfo(url="nats://x", pid=1, replicas={name: 3})

    code, lines, _said = run(info)

    assert code == 1
    assert lines[:3] == [
        {"service": name, "ok": True, "pid": 20, "replica": 1},
        {"service": name, "ok": True, "pid": 30, "replica": 2},
        {"service": name, "ok": False, "pid": None, "replica": 3, "problem": "no answer"},
    ]


def test_a_cluster_is_nodes_then_streams_then_processes(
    answers: dict[str, list[Status]], monkeypatch: pytest.MonkeyPatch,
) -> None:
    led, *rest = topology_streams()
    cluster(monkeypatch, ClusterReport(
        nodes=[NodeState(name="n1", url=NODES[0].url, up=True, healthy=True, meta_leader="n1"),
               NodeState(name="n2", url=NODES[1].url, up=False)],
        streams=[StreamState(stream=led, leader="n1", messages=7,
                             replicas=[ReplicaState(name="n2", current=False, lag=3)])],
    ))
    code, lines, said = run(RunInfo(url="nats://x", pid=1, nodes=NODES))

    assert code == 1
    assert lines[:3] == [
        {"node": "n1", "url": NODES[0].url, "up": True, "healthy": True, "meta_leader": "n1"},
        {"node": "n2", "url": NODES[1].url, "up": False, "healthy": False, "meta_leader": None},
        {"stream": led, "leader": "n1", "messages": 7, "replicas": [{"name": "n2", "current": False, "lag": 3}]},
    ]
    assert lines[3:3 + len(rest)] == [{"stream": s, "leader": None, "problem": "no leader"} for s in sorted(rest)]
    assert lines[3 + len(rest):] == [{"service": name, "ok": True, "pid": 11} for name in status_names()]
    assert said == "not healthy: the cluster's nodes or streams are not well\n"


def test_a_person_sees_the_tables_and_the_verdict(
    answers: dict[str, list[Status]], monkeypatch: pytest.MonkeyPatch,
) -> None:
    streams = topology_streams()
    cluster(monkeypatch, ClusterReport(
        nodes=[NodeState(name="n1", url=NODES[0].url, up=True, healthy=True, meta_leader="n1")],
        streams=[StreamState(stream=s, leader="n1", replicas=[ReplicaState(name="n2", current=False, lag=3)])
                 for s in streams],
    ))
    out = io.StringIO()
    code = asyncio.run(cmd_status("nats://x", info=RunInfo(url="nats://x", pid=1, nodes=NODES[:1]),
                                  output=Output(stdout=out)))
    text = out.getvalue()
    assert code == 1
    assert text.index("META LEADER") < text.index("REPLICAS") < text.index("SERVICE")
    assert "n2 (lag 3)" in text and "REPLICA " not in text
    assert text.rstrip().endswith("not healthy: the cluster's nodes or streams are not well")


def test_no_connection_is_a_failure_after_the_cluster_tables(
    answers: dict[str, list[Status]], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    async def refused(url: str, credentials: object) -> Connection:
        raise ConnectionError("refused")

    monkeypatch.setattr(cli_status, "_connect_once", refused)
    cluster(monkeypatch, ClusterReport(nodes=[NodeState(name="n1", url=NODES[0].url, up=False)], streams=[]))
    code, lines, _said = run(RunInfo(url="nats://x", pid=1, nodes=NODES[:1]))
    assert code == 1
    assert lines[0]["node"] == "n1" and all("service" not in line for line in lines)
    assert "lockgate: cannot connect to NATS at nats://x: refused" in capsys.readouterr().err
