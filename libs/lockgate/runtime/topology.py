"""Streams, buckets and durable consumers: created explicitly with nats-py, once.

FastStream's ``declare=True`` overwrites an existing stream's configuration with its
own defaults, and nats-py binds an existing durable without applying a new config;
so Lockgate owns its topology here and services only bind to it.
"""

from __future__ import annotations

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

from lockgate.eventstore.jetstream import events_stream_config
from lockgate.eventstore.subjects import type_filter

CANDIDATES = "LG_CANDIDATES"
EXEC = "LG_EXEC"
REPORTS = "LG_REPORTS"
RESPONSES = "LG_RESPONSES"
EVENTS = "LG_EVENTS"
RUNS_BUCKET = "LG_RUNS"
CATALOGUES_BUCKET = "LG_CATALOGUES"
CAPABILITIES_BUCKET = "LG_CAPABILITIES"
#: Per-resource locks that serialize effects whose contracts ask for it. Entries
#: expire after ``LOCK_TTL_S`` so a lock left by a crashed executor frees itself.
LOCKS_BUCKET = "LG_LOCKS"
#: Denials of one consequence per run, for policy's progress checkpoint.
PROGRESS_BUCKET = "LG_PROGRESS"
PROGRESS_TTL_S = 7 * 24 * 3600.0
#: Budget counters (one key per budget, scope and window); old windows expire.
BUDGETS_BUCKET = "LG_BUDGETS"
BUDGETS_TTL_S = 8 * 24 * 3600.0
LOCK_TTL_S = 300.0
#: Largest candidate message ``LG_CANDIDATES`` stores (``max_msg_size``). The broker's
#: own ``max_payload`` is larger (4 MB on the embedded server) so that a candidate of a
#: megabyte reaches intake and is refused on the record; past this size the stream
#: refuses it (JetStream error 10054), and the SDK says so before publishing.
MAX_CANDIDATE_MESSAGE_BYTES = 2 * 1024 * 1024

#: Events the model learns of: intake answers the agent runtime when one is recorded.
MODEL_VISIBLE = (
    "CandidateRejected",
    "NormalizationFailed",
    "PolicyDecided",
    "ReviewRequested",
    "ReviewDenied",
    "ReviewExpired",
    "GateRefused",
    "EffectCompleted",
    "AttemptRejected",
    "OutcomeUnknown",
    "Reconciled",
    "Withdrawn",
    "WithdrawalRequested",
    "InterruptionRequested",
    "AttemptInterrupted",
    "ProcessingAbandoned",
)

#: Events after which an intent may no longer hold its resource lock
#: (``lockgate.intent.locks``): the executor releases the lock on each of them, from the
#: record, whatever happened to the process that appended it. A unit test derives this
#: list from the aggregate, so an event that can end a hold cannot be left out.
ENDS_HOLD = (
    "GateRefused",
    "EffectCompleted",
    "AttemptRejected",
    "AttemptInterrupted",
    "Withdrawn",
    "Reconciled",
    "ProcessingAbandoned",
)


#: Unacknowledged messages a shared durable holds (delivered and not yet settled, or
#: nak'd to come back later). Every tenant's candidates pass the same durables, so this
#: is kept well above what one tenant can have in flight (intake's per-tenant cap, 128
#: in the demo bundle): one tenant's stuck or slow work fills at most an eighth of it.
SHARED_PENDING = 1024


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


def _events(name: str, *types: str, max_ack_pending: int = SHARED_PENDING, timers: bool = False) -> Durable:
    return Durable(EVENTS, name, tuple(type_filter(t) for t in types),
                   max_ack_pending=max_ack_pending, timers=timers)


#: Timer consumers hold one message per open deadline (nak'd with a delay until it
#: falls due), so their pending limit bounds how many deadlines can be open at once.
TIMERS = 100_000


DURABLES: tuple[Durable, ...] = (
    Durable(CANDIDATES, "intake", ("lg.propose.>",)),
    _events("intake-responses", *MODEL_VISIBLE),
    _events("normalization", "CandidateReceived"),
    _events("policy", "CandidateNormalized"),
    _events("policy-pauses", "PolicyDecided", max_ack_pending=TIMERS, timers=True),
    # Every event that can end an intent (a PolicyDecided only when it denies): budget
    # holds and intake's in-flight holds are settled from the record.
    _events(
        "policy-budgets",
        "EffectCompleted", "Reconciled", "AttemptRejected", "GateRefused", "Withdrawn",
        "ReviewDenied", "ReviewExpired", "AttemptInterrupted", "ProcessingAbandoned",
        "NormalizationFailed", "PolicyDecided",
    ),
    _events("approval", "PolicyDecided"),
    _events("approval-expiry", "ReviewRequested", max_ack_pending=TIMERS, timers=True),
    # The gate waits (Retry) for a resource lock and for facts.
    _events("executor-gate", "PolicyDecided", "ReviewApproved", "AttemptFailedBeforeSend", "Reconciled",
            timers=True),
    # The executor publishes an order right after appending its ExecutionAuthorized; the
    # deadline consumer sends any order that was not (the executor died in between).
    _events("executor-deadlines", "ExecutionAuthorized", max_ack_pending=TIMERS, timers=True),
    # The handler that appends one of them releases at once too (a fast path); this
    # durable is what makes release survive a crash right after the append.
    _events("executor-locks", *ENDS_HOLD),
    Durable(REPORTS, "executor-reports", ("lg.report.>",)),
    # The reconciler asks again (Retry) while no adapter answers its query.
    _events("reconciler", "OutcomeUnknown", timers=True),
)


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
        _work_queue(CANDIDATES, "lg.propose.>", replicas, max_msg_size=MAX_CANDIDATE_MESSAGE_BYTES),
        _work_queue(EXEC, "lg.exec.>", replicas),
        _work_queue(REPORTS, "lg.report.>", replicas),
        StreamConfig(
            name=RESPONSES,
            subjects=["lg.response.>"],
            storage=StorageType.FILE,
            num_replicas=replicas,
            duplicate_window=two_minutes,
            allow_direct=True,
            max_msgs_per_subject=16,
            max_age=7 * 24 * 3600.0,
        ),
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


async def ensure_topology(
    js: JetStreamContext, *, replicas: int = 1, ack_wait_s: float = 5.0
) -> None:
    """Create (or bring up to date) every stream, bucket and durable consumer.

    Safe to run from several processes at once and on every start.
    """
    for config in stream_configs(replicas):
        try:
            await js.add_stream(config)
        except BadRequestError:
            await js.update_stream(config)
    buckets = (
        (RUNS_BUCKET, 1, None), (CATALOGUES_BUCKET, 1, None), (CAPABILITIES_BUCKET, 4, None),
        (LOCKS_BUCKET, 1, LOCK_TTL_S), (PROGRESS_BUCKET, 1, PROGRESS_TTL_S),
        (BUDGETS_BUCKET, 1, BUDGETS_TTL_S),
    )
    for bucket, history, ttl_s in buckets:
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
