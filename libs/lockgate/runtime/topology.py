"""Streams, buckets and durable consumers: created explicitly with nats-py, once.

The streams' and buckets' names are ``lockgate.runtime.streams``'; the durables are
derived from the services' specs (``lockgate.runtime.specs``).

FastStream's ``declare=True`` overwrites an existing stream's configuration with its
own defaults, and nats-py binds an existing durable without applying a new config;
so Lockgate owns its topology here and services only bind to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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

from lockgate.contracts import subjects
from lockgate.eventstore.jetstream import events_stream_config
from lockgate.runtime.spec import SHARED_PENDING, Consumer
from lockgate.runtime.specs import SERVICES
from lockgate.runtime.streams import BUDGETS_BUCKET as BUDGETS_BUCKET
from lockgate.runtime.streams import CANDIDATES as CANDIDATES
from lockgate.runtime.streams import CAPABILITIES_BUCKET as CAPABILITIES_BUCKET
from lockgate.runtime.streams import CATALOGUES_BUCKET as CATALOGUES_BUCKET
from lockgate.runtime.streams import EVENTS as EVENTS
from lockgate.runtime.streams import EXEC as EXEC
from lockgate.runtime.streams import LOCKS_BUCKET as LOCKS_BUCKET
from lockgate.runtime.streams import MCP as MCP
from lockgate.runtime.streams import PROGRESS_BUCKET as PROGRESS_BUCKET
from lockgate.runtime.streams import REPORTS as REPORTS
from lockgate.runtime.streams import RESPONSES as RESPONSES
from lockgate.runtime.streams import RUNS_BUCKET as RUNS_BUCKET

#: How long an entry of ``LG_LOCKS`` lives: a lock left by a crashed executor frees itself.
LOCK_TTL_S = 300.0
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
    toward giving it up (``lockgate.runtime.service``).
    """

    stream: str
    name: str
    filters: tuple[str, ...]
    max_deliver: int = -1
    max_ack_pending: int = SHARED_PENDING
    timers: bool = False


def durable_of(consumer: Consumer) -> Durable:
    """The durable a service spec's consumer is on the server."""
    return Durable(consumer.stream, consumer.name, consumer.filters,
                   max_ack_pending=consumer.max_ack_pending, timers=consumer.timers)


#: Every durable consumer, derived from the services' specs (``lockgate.runtime.specs``).
DURABLES: tuple[Durable, ...] = tuple(durable_of(c) for s in SERVICES for c in s.consumes)


def durable(name: str) -> Durable:
    """Return the durable consumer called ``name``.

    Raises:
        KeyError: no such durable is part of the topology.
    """
    for d in DURABLES:
        if d.name == name:
            return d
    raise KeyError(name)


def stream_configs(replicas: int = 1) -> list[StreamConfig]:
    """Every stream Lockgate uses."""
    two_minutes = 120.0
    return [
        events_stream_config(EVENTS, replicas=replicas, duplicate_window_s=two_minutes),
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
        # Append-only; the latest record per subject is read by direct get.
        StreamConfig(name=MCP, subjects=["lg.mcp.rec.>"], storage=StorageType.FILE,
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
    BUDGETS_BUCKET: (1, BUDGETS_TTL_S),
}


def consumer_name(capability: str) -> str:
    """Return the durable consumer name of the adapter serving ``capability``."""
    return "adapter-" + capability.replace(".", "_")


def exec_consumer_config(capability: str, ack_wait_s: float) -> ConsumerConfig:
    """The durable on ``LG_EXEC`` the adapters of ``capability`` share.

    The adapter SDK creates it with this configuration when it starts (its grant names
    exactly this consumer and filter); an administrator may create it first.
    """
    name = consumer_name(capability)
    return ConsumerConfig(
        name=name,
        durable_name=name,
        deliver_policy=DeliverPolicy.ALL,
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=ack_wait_s,
        max_deliver=-1,
        filter_subject=subjects.order(capability),
    )


async def ensure_topology(
    js: JetStreamContext, *, replicas: int = 1, ack_wait_s: float = 5.0,
    capabilities: Sequence[str] = (),
) -> None:
    """Create (or bring up to date) every stream, bucket and durable consumer.

    Safe to run from several processes at once and on every start. ``capabilities``:
    also create their adapters' execution durables (``exec_consumer_config``), so that
    on a cluster every replicated consumer exists, with its replicas placed, before
    any process binds to it.
    """
    for config in stream_configs(replicas):
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
    for d in DURABLES:
        # CONSUMER.CREATE without an action creates, or updates a compatible existing one.
        await js.add_consumer(d.stream, consumer_config(d, ack_wait_s))
    for capability in capabilities:
        await js.add_consumer(EXEC, exec_consumer_config(capability, ack_wait_s))
