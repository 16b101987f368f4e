"""``lockgate status``: exit 0 only when every service and adapter answers and makes progress."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from nats.aio.client import Client
from nats.errors import Error as NatsError

from lockgate.cli.group import CommandGroup, Subparsers, add_as, command
from lockgate.cli.where import locate
from lockgate.client.output import Output
from lockgate.eventstore.partitions import Partitions
from lockgate.operations.cluster import cluster_report
from lockgate.operations.status import Status, gather_status, problem, status_names
from lockgate.runtime.credentials import Credentials, RunInfo, read_run_info
from lockgate.runtime.topology import topology_streams


def _register(sub: Subparsers) -> None:
    add_as(command(sub, "status",
                   "exit 0 only when every service and adapter answers and makes progress"),
           "operator")


def _status(args: argparse.Namespace, out: Output) -> int:
    where = locate(args)
    person = where.person("operator", getattr(args, "as_", None))
    return asyncio.run(cmd_status(where.url, where.credentials(f"operator-{person}"),
                                  read_run_info(where.var_dir), output=out))


async def cmd_status(
    url: str, credentials: Credentials | None = None, info: RunInfo | None = None, *,
    output: Output,
) -> int:
    """Say whether every service and adapter answers and makes progress, through ``output``.

    Every process ``lockgate run`` supervises, and every adapter the running deployment
    has a user for (``info.adapters``: those ``lockgate adapter serve`` registered too).

    For a person: a table of the processes (and, on a local cluster, of its nodes and
    streams first) and a sentence. With ``--json``: one JSON line per service and adapter,
    ``{"service", "ok", "pid", "metrics", "problem"}``; ``ok`` means it answered and makes
    progress (see ``status.problem``); ``metrics`` is where the process serves its
    Prometheus metrics (absent when it serves none).

    On a local cluster (``info`` names its nodes) the JSON lines begin with one per node
    (``{"node", "url", "up", "healthy", "meta_leader"}``) and per stream
    (``{"stream", "leader", "replicas": [{"name", "current", "lag"}]}``), then one line
    per replica of each process (``"replica"``: 1, 2, ... in the order they answered;
    a replica that did not answer is a line with ``"ok": false``).

    Returns:
        0 when every node is up, every stream led with current replicas, and every
        replica of every service and adapter is OK; 1 otherwise.
    """
    names = status_names()
    # Adapters the deployment has users for but does not supervise (``lockgate adapter
    # serve``, or a hand-written one started beside the run) answer for themselves too.
    names += tuple(served for served in (f"adapter.{a}" for a in sorted(info.adapters if info else {}))
                   if served not in names)
    expected = {name: (info.replicas.get(name, 1) if info else 1) for name in names}
    healthy = True
    if info is not None and info.nodes:
        healthy = await _show_cluster(info, output)
    try:
        nc = await _connect_once(url, credentials)
    except ConnectionError as exc:
        print(f"lockgate: cannot connect to NATS at {url}: {exc}", file=sys.stderr)
        return 1
    try:
        answers = await gather_status(nc, expected)
    finally:
        with contextlib.suppress(NatsError, OSError):
            await nc.close()
    lines = _process_lines(names, expected, answers)
    healthy = healthy and all(line["ok"] for line in lines)
    columns: dict[str, str] = {"SERVICE": "service", "OK": "ok", "PID": "pid"}
    if any("replica" in line for line in lines):
        columns = {"SERVICE": "service", "REPLICA": "replica", "OK": "ok", "PID": "pid"}
    output.rows({**columns, "METRICS": "metrics", "PROBLEM": "problem"}, lines)
    unwell = [line for line in lines if not line["ok"]]
    output.note("every service and adapter answers and makes progress" if healthy else
                f"not healthy: {len(unwell)} of {len(lines)} processes not well"
                if unwell else "not healthy: the cluster's nodes or streams are not well")
    return 0 if healthy else 1


async def _show_cluster(info: RunInfo, output: Output) -> bool:
    """Show a local cluster's nodes, then its streams; whether every node is up and healthy and
    every stream the topology makes is led, with current replicas."""
    report = await cluster_report(info.nodes)
    nodes = [{"node": node.name, "url": node.url, "up": node.up, "healthy": node.healthy,
              "meta_leader": node.meta_leader or None} for node in report.nodes]
    output.rows({"NODE": "node", "URL": "url", "UP": "up", "HEALTHY": "healthy",
                 "META LEADER": "meta_leader"}, nodes, empty="no cluster node answered")
    streams: list[dict[str, object]] = [
        {"stream": stream.stream, "leader": stream.leader, "messages": stream.messages,
         "replicas": [{"name": r.name, "current": r.current, "lag": r.lag} for r in stream.replicas]}
        for stream in report.streams
    ]
    led = {s.stream for s in report.streams}
    leaderless = sorted(set(topology_streams(Partitions(info.event_partitions))) - led)
    streams += [{"stream": stream, "leader": None, "problem": "no leader"} for stream in leaderless]
    output.rows({"STREAM": "stream", "LEADER": "leader", "MESSAGES": "messages",
                 "REPLICAS": _replicas, "PROBLEM": "problem"}, streams,
                empty="no stream answered")
    return (all(node.up and node.healthy for node in report.nodes)
            and all(r.current for stream in report.streams for r in stream.replicas)
            and not leaderless)


def _process_lines(
    names: Sequence[str], expected: Mapping[str, int], answers: Mapping[str, list[Status]],
) -> list[dict[str, object]]:
    """One line per replica of each process, in the order they answered; a replica that did not
    answer is a line too, with its problem."""
    lines: list[dict[str, object]] = []
    for name in names:
        got = sorted(answers[name], key=lambda a: str(a.get("instance") or a.get("pid")))
        shown: list[Status | None] = [*got, *([None] * max(0, expected[name] - len(got)))]
        for replica, answer in enumerate(shown, start=1):
            why = problem(answer)
            pid = answer.get("pid") if answer is not None else None
            line: dict[str, object] = {"service": name, "ok": why is None, "pid": pid}
            if expected[name] > 1:
                line["replica"] = replica
            if answer is not None and answer.get("metrics"):
                line["metrics"] = answer["metrics"]
            if why is not None:
                line["problem"] = why
            lines.append(line)
    return lines


def _replicas(stream: Mapping[str, Any]) -> str:
    replicas = stream.get("replicas")
    if not isinstance(replicas, list):
        return "-"
    shown = [str(r["name"]) if r["current"] else f"{r['name']} (lag {r['lag']})" for r in replicas]
    return ", ".join(shown) or "-"


async def _connect_once(url: str, credentials: Credentials | None) -> Client:
    """Connect without retrying: a status check should fail fast, not wait for a server."""

    async def on_error(exc: Exception) -> None:
        return None

    options: dict[str, object] = dict(
        servers=[u for u in url.split(",") if u], connect_timeout=2, allow_reconnect=False, max_reconnect_attempts=1,
        error_cb=on_error, name="lockgate-status",
    )
    # nats-py drops a server from its pool only after max_reconnect_attempts (> 0)
    # failures; with unlimited attempts a first connection never gives up.
    if credentials is not None:
        options.update(user=credentials.user, password=credentials.password,
                       inbox_prefix=credentials.inbox_prefix)
    nc = Client()
    try:
        await asyncio.wait_for(nc.connect(**options), 5.0)  # type: ignore[arg-type]
    except (TimeoutError, OSError, NatsError) as exc:
        reason = nc.last_error or exc
        with contextlib.suppress(Exception):
            await nc.close()
        raise ConnectionError(repr(reason)) from exc
    return nc


STATUS = CommandGroup("status", _register, _status)
