"""The administrator's step of a deployment: create the topology once, then exit.

``python -m lockgate.operations.admin`` connects as its own user (``LOCKGATE_CREDENTIALS_FILE``,
``admin`` in the role table, the only user that may create a stream), creates every
stream and bucket at ``LOCKGATE_REPLICAS`` and every durable consumer, the adapters'
execution durables included, as ``lockgate run --cluster`` does before any service
starts; then it waits until every stream has a leader and current replicas, and exits 0.
It is the compose profile's one-shot ``admin`` job, which every other process waits for
(``docker-compose.yml``): services and adapters only bind to what it made.

Running it again is harmless (``ensure_topology`` creates or brings up to date).

``--keep-leaders`` then stays (the compose profile's ``leaders`` service): a node that was
down, frozen or restarted lost its events partitions' leaderships to the others and does
not get them back by itself, so every ``HAND_BACK_EVERY_S`` it reads the partitions' leaders and
replicas from their streams and hands a leadership back once the partition's replica on its
own node has been current, with no node offline, for ``HAND_BACK_AFTER_S`` (what ``lockgate run
--cluster``'s supervisor does from the nodes' monitoring ports, which a container may not
reach). It stops on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import time
from collections.abc import Sequence

import nats
from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.js import JetStreamContext

from lockgate.core.errors import LockgateError
from lockgate.eventstore.partitions import Partitions
from lockgate.operations.cluster import (
    HAND_BACK_AFTER_S,
    HAND_BACK_EVERY_S,
    ClusterReport,
    HandBack,
    NodeState,
    ReplicaState,
    StreamState,
    describe_moves,
    misplaced_leaders,
)
from lockgate.runtime.settings import Settings
from lockgate.runtime.streams import CANDIDATES
from lockgate.runtime.topology import (
    ensure_topology,
    hand_leadership,
    spread_leaders,
    topology_streams,
)

#: How long the step waits for a node to answer and for the streams to settle.
DEFAULT_TIMEOUT_S = 120.0


class TopologyError(LockgateError):
    """The topology could not be created, or its streams did not settle in time."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="admin.topology")


async def connect(settings: Settings, timeout_s: float) -> Client:
    """Connect as the settings' user, trying again until a node answers or ``timeout_s`` passes.

    Raises:
        TopologyError: no node answered in time.
    """
    deadline = time.monotonic() + timeout_s
    options = {**settings.connect_options(), "name": "lockgate-admin",
               # The first connection is retried here, not by nats-py (which would retry forever).
               "allow_reconnect": True, "max_reconnect_attempts": 3}
    while True:
        try:
            return await nats.connect(**options)  # type: ignore[arg-type]
        except (OSError, TimeoutError, NatsError) as exc:
            if time.monotonic() > deadline:
                raise TopologyError(f"no NATS node answered at {settings.nats_url}: {exc!r}") from exc
        await asyncio.sleep(1.0)


async def wait_settled(
    js: JetStreamContext, streams: Sequence[str], timeout_s: float
) -> dict[str, str]:
    """Wait until every stream in ``streams`` has a leader and every replica is current.

    Returns:
        Each stream's leader (empty for a stream that is not replicated).

    Raises:
        TopologyError: not within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        leaders: dict[str, str] = {}
        waiting: list[str] = []
        for name in streams:
            try:
                info = await js.stream_info(name)
            except NatsError:
                waiting.append(name)
                continue
            cluster = info.cluster
            if cluster is None:
                leaders[name] = ""
            elif cluster.leader and all(peer.current for peer in cluster.replicas or []):
                leaders[name] = cluster.leader
            else:
                waiting.append(name)
        if not waiting:
            return leaders
        if time.monotonic() > deadline:
            raise TopologyError(f"streams without a leader or with lagging replicas: {waiting}")
        await asyncio.sleep(0.25)


async def create_topology(settings: Settings, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> dict[str, str]:
    """Create every stream, bucket and durable at ``settings.replicas`` and wait for their leaders.

    Returns:
        Each stream's leader.

    Raises:
        TopologyError: no node answered, the server refused, or the streams did not settle.
    """
    nc = await connect(settings, timeout_s)
    try:
        js = nc.jetstream()
        try:
            await ensure_topology(
                js, replicas=settings.replicas, ack_wait_s=settings.ack_wait_s,
                capabilities=[c for caps in settings.adapters.values() for c in caps],
                partitions=settings.partitions)
        except NatsError as exc:
            raise TopologyError(f"could not create the topology: {exc!r}") from exc
        streams = topology_streams(settings.partitions)
        await wait_settled(js, streams, timeout_s)
        # The partitions' leaders onto the nodes in turn (the nodes: the meta group's).
        await spread_leaders(nc, settings.partitions, await _node_names(js))
        return await wait_settled(js, streams, timeout_s)
    finally:
        await nc.close()


async def _node_names(js: JetStreamContext) -> list[str]:
    """The nodes an R3 stream is placed on, by server name (the candidates stream's)."""
    info = await js.stream_info(CANDIDATES)
    cluster = info.cluster
    if cluster is None:
        return []
    names = {r.name for r in cluster.replicas or [] if r.name}
    return sorted(names | ({cluster.leader} if cluster.leader else set()))


async def partition_report(js: JetStreamContext, partitions: Partitions) -> ClusterReport:
    """The events partitions' leaders and replicas as their streams say (``misplaced_leaders``'
    input, from NATS alone). A node counts as up unless a partition lists it offline; a
    partition without a leader, or one that cannot be read, gives a report with no nodes,
    on which nothing is moved."""
    streams: list[StreamState] = []
    seen: set[str] = set()
    offline: set[str] = set()
    for p in partitions:
        try:
            cluster = (await js.stream_info(p.stream)).cluster
        except (NatsError, TimeoutError):
            return ClusterReport(nodes=[], streams=[])
        if cluster is None or not cluster.leader:
            return ClusterReport(nodes=[], streams=[])
        replicas = [ReplicaState(name=r.name, current=bool(r.current) and not r.offline, lag=r.lag or 0)
                    for r in cluster.replicas or [] if r.name]
        offline |= {r.name for r in cluster.replicas or [] if r.name and r.offline}
        seen |= {cluster.leader, *(r.name for r in replicas)}
        streams.append(StreamState(stream=p.stream, leader=cluster.leader, replicas=replicas))
    nodes = [NodeState(name=n, url="", up=n not in offline, healthy=n not in offline)
             for n in sorted(seen)]
    return ClusterReport(nodes=nodes, streams=streams)


async def keep_leaders(
    settings: Settings, stop: asyncio.Event, *, every_s: float = HAND_BACK_EVERY_S,
    after_s: float = HAND_BACK_AFTER_S, timeout_s: float = DEFAULT_TIMEOUT_S,
) -> None:
    """Hand the events partitions' leaderships back to their nodes until ``stop`` is set.

    Raises:
        TopologyError: the connection was lost for good (its reconnects ran out); the
            process exits, and compose starts it again on a fresh connection.
    """
    nc = await connect(settings, timeout_s)
    try:
        js = nc.jetstream()
        names = await _node_names(js)
        hand_back = HandBack(after_s)
        while not stop.is_set():
            if nc.is_closed:
                raise TopologyError("the connection to the cluster was lost; start again")
            moves = hand_back.due(misplaced_leaders(
                await partition_report(js, settings.partitions), settings.partitions, names),
                time.monotonic())
            if moves:
                print(f"lockgate admin: leaders handed back: {describe_moves(moves)}", flush=True)
                for stream, node in sorted(moves.items()):
                    await hand_leadership(nc, stream, node)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), every_s)
    finally:
        await nc.close()


async def _create_then_keep(settings: Settings, timeout_s: float) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await create_topology(settings, timeout_s=timeout_s)
    print("lockgate admin: keeping the events partitions' leaders on their nodes", flush=True)
    await keep_leaders(settings, stop, timeout_s=timeout_s)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m lockgate.operations.admin [--timeout S] [--keep-leaders]``: the topology,
    once; exit 0 when it is there (or, keeping the leaders, on SIGTERM)."""
    parser = argparse.ArgumentParser(prog="python -m lockgate.operations.admin")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                        help="seconds to wait for a node and for the streams (default %(default)s)")
    parser.add_argument("--keep-leaders", action="store_true",
                        help="then stay, handing the events partitions' leaderships back to "
                             "their nodes after a node was down")
    args = parser.parse_args(argv)
    settings = Settings()
    try:
        if args.keep_leaders:
            asyncio.run(_create_then_keep(settings, args.timeout))
            return 0
        leaders = asyncio.run(create_topology(settings, timeout_s=args.timeout))
    except LockgateError as exc:
        print(f"lockgate admin: {exc}", file=sys.stderr, flush=True)
        return 1
    per_node: dict[str, int] = {}
    for leader in leaders.values():
        per_node[leader or "-"] = per_node.get(leader or "-", 0) + 1
    print(f"lockgate admin: topology at R{settings.replicas}, {len(leaders)} streams; "
          f"leaders per node {dict(sorted(per_node.items()))}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
