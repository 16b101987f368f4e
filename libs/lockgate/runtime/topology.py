"""Streams, buckets and durable consumers: created explicitly with nats-py, once.

The streams' and buckets' names are ``lockgate.runtime.streams``'; the durables are
derived from the services' specs (``lockgate.runtime.specs``).

A client that declares streams (FastStream's ``declare=True``) overwrites an existing stream's configuration with its
own defaults, and nats-py binds an existing durable without applying a new config;
so Lockgate owns its topology here and services only bind to it.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from dataclasses import dataclass

from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    KeyValueConfig,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import BadRequestError, NotFoundError

from lockgate.contracts import mcp_subjects, subjects
from lockgate.core.errors import LockgateError
from lockgate.eventstore.jetstream import partition_stream_configs
from lockgate.eventstore.partitions import SINGLE, Partitions
from lockgate.runtime.spec import DELIVERIES, SHARED_PENDING, Consumer, max_deliver_for
from lockgate.runtime.specs import SERVICES
from lockgate.runtime.streams import BUDGETS_BUCKET as BUDGETS_BUCKET
from lockgate.runtime.streams import CANDIDATES as CANDIDATES
from lockgate.runtime.streams import CAPABILITIES_BUCKET as CAPABILITIES_BUCKET
from lockgate.runtime.streams import CATALOGUES_BUCKET as CATALOGUES_BUCKET
from lockgate.runtime.streams import EVENTS as EVENTS
from lockgate.runtime.streams import EXEC as EXEC
from lockgate.runtime.streams import LEASES as LEASES
from lockgate.runtime.streams import LOCKS_BUCKET as LOCKS_BUCKET
from lockgate.runtime.streams import MCP as MCP
from lockgate.runtime.streams import POLICY_BUCKET as POLICY_BUCKET
from lockgate.runtime.streams import PROGRESS_BUCKET as PROGRESS_BUCKET
from lockgate.runtime.streams import REPORTS as REPORTS
from lockgate.runtime.streams import RESPONSES as RESPONSES
from lockgate.runtime.streams import RUNS_BUCKET as RUNS_BUCKET

#: How long an entry of ``LG_LOCKS`` lives: a lock left by a crashed executor frees itself.
LOCK_TTL_S = 300.0
#: How long the server's marker of a run's lease that ran out stays (the run-ends durable
#: reads it; the run's end is then on record in the runs bucket).
LEASE_MARKER_TTL_S = 24 * 3600.0
#: How long policy's progress checkpoint remembers denials (``LG_PROGRESS``).
PROGRESS_TTL_S = 7 * 24 * 3600.0
#: How long a budget window's counter lives (``LG_BUDGETS``): old windows expire.
BUDGETS_TTL_S = 8 * 24 * 3600.0
#: Largest candidate message ``LG_CANDIDATES`` stores (``max_msg_size``). The broker's
#: own ``max_payload`` is larger (4 MB on the embedded server) so that a candidate of a
#: megabyte reaches intake and is refused on the record; past this size the stream
#: refuses it (JetStream error 10054), and the SDK says so before publishing.
MAX_CANDIDATE_MESSAGE_BYTES = 2 * 1024 * 1024


@dataclass(frozen=True)
class Durable:
    """A durable pull consumer a service binds to.

    ``timers``: its handlers ask for messages again later on purpose (``Retry``), so
    how often a message was delivered says nothing about failures; only failures count
    toward giving it up in the process. ``max_deliver`` bounds every delivery on the
    server (``spec.max_deliver_for`` the consumer's ``deliveries``); the process gives a
    message up on the record a few deliveries before it (``spec.give_up_from``).
    """

    stream: str
    name: str
    filters: tuple[str, ...]
    max_deliver: int = max_deliver_for(DELIVERIES)
    max_ack_pending: int = SHARED_PENDING
    timers: bool = False


def durable_of(consumer: Consumer) -> Durable:
    """The durable a service spec's consumer is on the server (on the one events stream
    of K = 1; ``durables_on`` places it on every partition)."""
    return Durable(consumer.stream, consumer.name, consumer.filters,
                   max_deliver=max_deliver_for(consumer.deliveries),
                   max_ack_pending=consumer.max_ack_pending, timers=consumer.timers)


#: Every durable consumer, derived from the services' specs (``lockgate.runtime.specs``).
DURABLES: tuple[Durable, ...] = tuple(durable_of(c) for s in SERVICES for c in s.consumes)


def durables_on(partitions: Partitions) -> tuple[Durable, ...]:
    """Every durable on the server: an events consumer once on each partition's stream
    (same name, filters under that partition's prefix), the others as they are."""
    placed: list[Durable] = []
    for service in SERVICES:
        for c in service.consumes:
            if c.stream != EVENTS:
                placed.append(durable_of(c))
                continue
            placed += [Durable(p.stream, c.name, c.filters_for(p.prefix),
                               max_deliver=max_deliver_for(c.deliveries),
                               max_ack_pending=c.max_ack_pending, timers=c.timers) for p in partitions]
    return tuple(placed)


def durable(name: str) -> Durable:
    """Return the durable consumer called ``name``.

    Raises:
        KeyError: no such durable is part of the topology.
    """
    for d in DURABLES:
        if d.name == name:
            return d
    raise KeyError(name)


def stream_configs(replicas: int = 1, partitions: Partitions = SINGLE) -> list[StreamConfig]:
    """Every stream Lockgate uses (the events stream once per partition)."""
    two_minutes = 120.0
    return [
        *partition_stream_configs(partitions, replicas=replicas, duplicate_window_s=two_minutes),
        # Work queues: a message is gone once its consumer acknowledged it.
        _work_queue(CANDIDATES, subjects.PROPOSE_ALL, replicas,
                    max_msg_size=MAX_CANDIDATE_MESSAGE_BYTES),
        _work_queue(EXEC, subjects.EXEC_ALL, replicas),
        _work_queue(REPORTS, subjects.REPORT_ALL, replicas),
        StreamConfig(
            name=RESPONSES,
            subjects=[subjects.RESPONSES_ALL],
            storage=StorageType.FILE,
            num_replicas=replicas,
            duplicate_window=two_minutes,
            allow_direct=True,
            max_msgs_per_subject=16,
            max_age=7 * 24 * 3600.0,
        ),
        # One message per run: its lease, whose TTL the server enforces, leaving a delete
        # marker when it runs out (lockgate.intake.leases).
        StreamConfig(
            name=LEASES,
            subjects=[subjects.LEASE_ALL],
            storage=StorageType.FILE,
            num_replicas=replicas,
            duplicate_window=two_minutes,
            allow_direct=True,
            allow_msg_ttl=True,
            subject_delete_marker_ttl=LEASE_MARKER_TTL_S,
            max_msgs_per_subject=1,
        ),
        # Append-only; the latest record per subject is read by direct get.
        StreamConfig(name=MCP, subjects=[mcp_subjects.RECORDS_ALL], storage=StorageType.FILE,
                     num_replicas=replicas, duplicate_window=two_minutes, allow_direct=True),
    ]


def _work_queue(name: str, subject: str, replicas: int, **extra: int) -> StreamConfig:
    return StreamConfig(
        name=name,
        subjects=[subject],
        retention=RetentionPolicy.WORK_QUEUE,
        storage=StorageType.FILE,
        num_replicas=replicas,
        duplicate_window=120.0,
        **extra,  # type: ignore[arg-type]
    )


def consumer_config(d: Durable, ack_wait_s: float) -> ConsumerConfig:
    """The configuration of one durable consumer."""
    return ConsumerConfig(
        durable_name=d.name,
        deliver_policy=DeliverPolicy.ALL,
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=ack_wait_s,
        max_deliver=d.max_deliver,
        max_ack_pending=d.max_ack_pending,
        filter_subjects=list(d.filters),
    )


#: Every key-value bucket: its history and the time-to-live of its entries (None: forever).
BUCKETS: dict[str, tuple[int, float | None]] = {
    RUNS_BUCKET: (1, None), CATALOGUES_BUCKET: (1, None), CAPABILITIES_BUCKET: (4, None),
    LOCKS_BUCKET: (1, LOCK_TTL_S), PROGRESS_BUCKET: (1, PROGRESS_TTL_S),
    BUDGETS_BUCKET: (1, BUDGETS_TTL_S), POLICY_BUCKET: (1, None),
}


def consumer_name(capability: str) -> str:
    """Return the durable consumer name of the adapter serving ``capability``."""
    return "adapter-" + capability.replace(".", "_")


def exec_consumer_config(capability: str, ack_wait_s: float) -> ConsumerConfig:
    """The durable on ``LG_EXEC`` the adapters of ``capability`` share.

    The adapter SDK creates it with this configuration when it starts (its grant names
    exactly this consumer and filter); an administrator may create it first. Bounded like
    every durable: an order the server stops delivering was never reported, and the
    attempt's deadline puts that silence on the record (``OutcomeUnknown``).
    """
    name = consumer_name(capability)
    return ConsumerConfig(
        name=name,
        durable_name=name,
        deliver_policy=DeliverPolicy.ALL,
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=ack_wait_s,
        max_deliver=max_deliver_for(DELIVERIES),
        filter_subject=subjects.order(capability),
    )


async def ensure_topology(
    js: JetStreamContext, *, replicas: int = 1, ack_wait_s: float = 5.0,
    capabilities: Sequence[str] = (), partitions: Partitions = SINGLE,
) -> None:
    """Create (or bring up to date) every stream, bucket and durable consumer.

    Safe to run from several processes at once and on every start. ``capabilities``:
    also create their adapters' execution durables (``exec_consumer_config``), so that
    on a cluster every replicated consumer exists, with its replicas placed, before
    any process binds to it.
    """
    await _check_partitions(js, partitions)
    for config in stream_configs(replicas, partitions):
        try:
            await js.add_stream(config)
        except BadRequestError:
            await js.update_stream(config)
    for bucket, (history, ttl_s) in BUCKETS.items():
        try:
            await js.key_value(bucket)
        except NotFoundError:
            await js.create_key_value(
                KeyValueConfig(
                    bucket=bucket,
                    history=history,
                    ttl=ttl_s,
                    storage=StorageType.FILE,
                    replicas=replicas,
                    direct=True,
                )
            )
    for d in durables_on(partitions):
        # CONSUMER.CREATE without an action creates, or updates a compatible existing one:
        # max_deliver and ack_wait are editable, so an unbounded durable of an earlier
        # deployment is bounded here, its pending messages kept.
        await js.add_consumer(d.stream, consumer_config(d, ack_wait_s))
    for capability in capabilities:
        await js.add_consumer(EXEC, exec_consumer_config(capability, ack_wait_s))


class PartitionsMismatch(LockgateError):
    """The broker keeps the events in another number of streams than this deployment says."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="topology.partitions-mismatch")


async def _check_partitions(js: JetStreamContext, partitions: Partitions) -> None:
    """Refuse a K that disagrees with the events streams already there.

    Intents are placed by their id's hash modulo K: another K would look for them in
    other streams, and the ones stored would never be read again.

    Raises:
        PartitionsMismatch: a stream of another K exists.
    """
    other_layouts = ([f"{partitions.stem}_0"] if len(partitions) == 1
                     else [partitions.stem, f"{partitions.stem}_{len(partitions)}"])
    for name in other_layouts:
        try:
            await js.stream_info(name)
        except NotFoundError:
            continue
        raise PartitionsMismatch(
            f"the broker has {name}: its events were placed for another number of partitions "
            f"than {len(partitions)} (LOCKGATE_EVENT_PARTITIONS); K is chosen when a "
            "deployment is created and kept")


def topology_streams(partitions: Partitions = SINGLE) -> tuple[str, ...]:
    """Every stream and bucket stream the topology creates (what a cluster waits for)."""
    return (*(c.name for c in stream_configs(partitions=partitions) if c.name),
            *(f"KV_{b}" for b in BUCKETS))


async def spread_leaders(nc: Client, partitions: Partitions, nodes: Sequence[str]) -> dict[str, str]:
    """Move the events partitions' leaders onto the nodes in turn (partition k on node
    k mod N), so that no node leads every append; return each partition's leader.

    Raft elects wherever it likes (three partitions led by one node were seen); a
    stepdown naming a preferred node (``$JS.API.STREAM.LEADER.STEPDOWN``, nats-server
    2.11+) hands the leadership over. A node that does not take it leaves the partition
    where it is: spreading is for throughput, never a condition to run.
    """
    leaders: dict[str, str] = {}
    if len(partitions) < 2 or len(nodes) < 2:
        return leaders
    js = nc.jetstream()
    for p in partitions:
        preferred = nodes[p.index % len(nodes)]
        info = await js.stream_info(p.stream)
        leader = info.cluster.leader if info.cluster is not None else None
        if leader and leader != preferred:
            await hand_leadership(nc, p.stream, preferred)
        leaders[p.stream] = leader or ""
    return leaders


async def hand_leadership(nc: Client, stream: str, node: str) -> None:
    """Ask ``stream``'s leader to step down in favour of ``node`` (nothing happens when it
    cannot: the leadership stays where it is)."""
    request = json.dumps({"placement": {"preferred": node}}).encode()
    with contextlib.suppress(NatsError):
        await nc.request(f"$JS.API.STREAM.LEADER.STEPDOWN.{stream}", request, timeout=5.0)
