"""Watching the run: the ready line, children that hang or get stuck, and a broker (or a
cluster node) that dies or hangs.

Every ``WATCH_EVERY_S`` the supervisor asks every child ``lg.status.<name>``; a child that
stays unwell is killed, and its restart loop starts it again. Children are judged only
while the broker answers the supervisor: without it every child would look silent.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from nats.aio.client import Client
from nats.errors import Error as NatsError

from lockgate.eventstore.partitions import Partitions
from lockgate.operations.cluster import (
    HAND_BACK_EVERY_S,
    HandBack,
    LocalCluster,
    cluster_report,
    describe_moves,
    misplaced_leaders,
)
from lockgate.operations.natsserver import NatsServer, NatsServerError
from lockgate.operations.status import STALL_S, gather_status, problem
from lockgate.operations.supervisor.children import _Child, _signal_group
from lockgate.operations.supervisor.report import _say
from lockgate.operations.supervisor.targets import Targets
from lockgate.runtime.metrics import CHILD_UP
from lockgate.runtime.topology import hand_leadership

#: How long the supervisor waits for every child to answer before saying who did not.
READY_TIMEOUT_S = 60.0
#: How often the supervisor asks every child (and the broker) whether it is well.
WATCH_EVERY_S = 2.0
#: A child that answered once and then stays silent this long (while the broker
#: answers the supervisor) is hung or stopped: it is killed and started again.
UNRESPONSIVE_S = 15.0
#: The broker not answering the supervisor for this long is hung: killed and restarted.
BROKER_UNRESPONSIVE_S = 20.0

READY_LINE = "Lockgate ready"


async def _announce_ready(
    nc: Client, kids: Sequence[_Child], timeout_s: float, log_dir: Path, targets: Targets,
    ready: asyncio.Event,
) -> None:
    """Print the ready line once every child answers (and set ``ready``); say who is missing
    after ``timeout_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    warned = False
    expected = Counter(k.name for k in kids)
    while True:
        answers = await gather_status(nc, expected, timeout_s=1.0)
        targets.learn_each(kids, answers)
        for kid in kids:
            kid.pin(kid.answer(answers))
        missing = [kid.label for kid in kids if kid.answer(answers) is None]
        if not missing:
            now = loop.time()
            for kid in kids:  # each answered: from here, silence counts against it
                kid.well_at = kid.well_at or now
            ready.set()
            _say(READY_LINE)
            for kid in kids:  # a child that serves people says where (the console)
                answer = kid.answer(answers) or {}
                if isinstance(answer.get("url"), str):
                    _say(f"lockgate: {kid.label} at {answer['url']}")
            return
        if not warned and loop.time() >= deadline:
            _say(
                f"lockgate: not ready after {timeout_s:g}s; no answer from "
                f"{', '.join(missing)} (logs in {log_dir}); still waiting"
            )
            warned = True
        await asyncio.sleep(2.0 if warned else 0.2)


@dataclass
class _Health:
    """When the broker last answered the supervisor (children are judged only while it does)."""

    broker_ok_at: float

    def broker_ok(self, now: float) -> bool:
        return now - self.broker_ok_at < 2 * WATCH_EVERY_S + 1.0


async def _watch_children(
    nc: Client, kids: Sequence[_Child], health: _Health, ready_timeout_s: float,
    targets: Targets,
) -> None:
    """Kill (so the restart loop starts again) any child that is hung, stopped or stuck.

    A child is unwell when it does not answer its status, or answers that it is not
    connected or that a durable is stuck (``status.problem``). While the broker itself
    does not answer, nobody is judged: every child would look silent. Each answer also
    says where the child serves its metrics (``targets``).
    """
    loop = asyncio.get_running_loop()
    unwell_since: dict[str, float] = {}
    while True:
        await asyncio.sleep(WATCH_EVERY_S)
        live = [(k, k.proc) for k in kids if k.proc is not None and k.proc.returncode is None]
        try:
            answers = await gather_status(nc, Counter(k.name for k, _ in live), timeout_s=1.0)
        except NatsError:
            continue
        targets.learn_each([k for k, _ in live], answers)
        for kid, _ in live:
            kid.pin(kid.answer(answers))
        now = loop.time()
        for kid, proc in live:
            why = problem(kid.answer(answers), STALL_S)
            CHILD_UP.labels(kid.label).set(1 if why is None else 0)
            if why is None:
                kid.well_at, kid.unwell = now, None
                unwell_since.pop(kid.label, None)
                continue
            if not health.broker_ok(now):
                unwell_since.pop(kid.label, None)
                continue
            since = unwell_since.setdefault(kid.label, now)
            # Never yet answered since it started: it gets the ready timeout to come up.
            grace = ready_timeout_s if kid.well_at is None else UNRESPONSIVE_S
            if now - max(since, kid.started_at) < grace:
                continue
            _say(f"lockgate: {kid.label} is not well ({why}) for {now - since:.0f}s; "
                 "killing it, it will be started again")
            _signal_group(proc.pid, signal.SIGKILL)
            unwell_since.pop(kid.label, None)


async def _watch_broker(server: NatsServer, nc: Client, health: _Health) -> None:
    """Start the embedded server again when it died, or kill and start it when it hangs."""
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(WATCH_EVERY_S)
        now = loop.time()
        process = server.process
        dead = process is None or process.poll() is not None
        if not dead:
            try:
                await nc.flush(timeout=int(WATCH_EVERY_S))
            except (NatsError, TimeoutError):
                if now - health.broker_ok_at < BROKER_UNRESPONSIVE_S:
                    continue
                _say(f"lockgate: nats-server has not answered for {now - health.broker_ok_at:.0f}s "
                     "(hung or stopped); killing it and starting it again")
                await asyncio.to_thread(server.kill)
            else:
                health.broker_ok_at = loop.time()
                continue
        else:
            code = process.returncode if process is not None else None
            _say(f"lockgate: nats-server exited with {code}; starting it again on the same store")
        try:
            await asyncio.to_thread(server.start)
        except NatsServerError as exc:
            _say(f"lockgate: nats-server did not start again: {exc} (see {server.log_file}); "
                 "trying again", error=True)


async def _watch_nodes(
    nodes: LocalCluster, nc: Client, health: _Health, partitions: Partitions,
) -> None:
    """Start a cluster node again, on its own store, when its process died; put the events
    partitions' leaders back on their nodes once the cluster is whole again.

    A node that is alive but silent is left alone: the others hold quorum and lead
    meanwhile, and a node stopped on purpose (SIGSTOP) rejoins when it is continued.
    The supervisor's connection fails over to another node by itself; while it answers
    through any of them, the broker counts as up.

    A node that lost its leaderships (killed, frozen, restarted) does not get them back
    by itself, so one node would go on leading two partitions' appends. Once every node
    is healthy and the partition's replica on its own node is current, and has been for
    ``HAND_BACK_AFTER_S`` (``HandBack``: a node that comes and goes is not chased), the leadership is
    handed back (``hand_leadership``, as ``spread_leaders`` places it).
    """
    loop = asyncio.get_running_loop()
    names = [a.name for a in nodes.addresses()]
    hand_back = HandBack()
    checked_at = loop.time()
    while True:
        await asyncio.sleep(WATCH_EVERY_S)
        with contextlib.suppress(NatsError, TimeoutError):
            await nc.flush(timeout=int(WATCH_EVERY_S))
            health.broker_ok_at = loop.time()
        down = False
        for address, node in zip(nodes.addresses(), nodes.nodes, strict=True):
            if node.running:
                continue
            down = True
            code = node.process.returncode if node.process is not None else None
            _say(f"lockgate: cluster node {address.name} exited with {code}; starting it again "
                 "on its store")
            try:
                await asyncio.to_thread(node.start)
            except NatsServerError as exc:
                _say(f"lockgate: node {address.name} did not start again: {exc}; trying again",
                     error=True)
        if down:
            hand_back.reset()
            continue
        if loop.time() - checked_at < HAND_BACK_EVERY_S:
            continue
        checked_at = loop.time()
        moves = hand_back.due(misplaced_leaders(
            await cluster_report(nodes.addresses()), partitions, names), loop.time())
        if moves:
            _say(f"lockgate: every node is back; leaders handed back: {describe_moves(moves)}")
            for stream, name in sorted(moves.items()):
                await hand_leadership(nc, stream, name)
