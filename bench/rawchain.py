"""The floor: six durable pull consumers, plain nats-py, each loading and appending.

Stage ``k`` (1..6) consumes ``Stage{k-1}`` events of its own tenant's aggregates from
a stream of its own laid out like ``LG_EVENTS`` (``BENCH_EVENTS``, subjects
``bench.evt.>``, the events stream's configuration; ``LG_EVENTS`` holds Lockgate's
events only, which the projector reads all of) through the durable ``<prefix>k``,
loads the aggregate with
``JetStreamEventStore.load`` and appends ``Stage{k}`` with ``JetStreamEventStore.append``
(the store Lockgate's services use, so the same direct-get and expected-sequence
headers). The driver opens a chain by appending ``Stage0`` to a new aggregate and
learns of its end from a core subscription on the ``Stage6`` subjects, as Lockgate's SDK
learns of a response. A finished aggregate holds seven events: the driver's ``Stage0``
and one from each of the six stages.

Two ways to consume, chosen per worker process (``--mode``):

- ``pull`` (the baseline the ratio is taken against): each stage keeps a continuous
  pull on its durable with the service kit's own consumer
  (``lockgate.runtime.consumer.PullConsumer``, as many handlers at once as a service's
  durable), so the chain is the best this stack does for an event-sourced six-hop
  pipeline: one delivery, one load, one append and one ack per hop;
- ``fetch`` (kept for continuity with earlier runs): each stage fetches a batch and
  handles it concurrently, as FastStream's pull subscribers did under the services.

Either way a stage is idempotent like a service: one that finds its own event already
stored acks and does nothing.

On a partitioned profile (``ChainSpec.partitions`` K > 1) the chain is laid out as
Lockgate's events are (``lockgate.eventstore.partitions``): K streams ``BENCH_EVENTS_<k>``
with subjects ``bench.evt.p<k>.>``, at ``ChainSpec.replicas``; each stage's durable is on
every partition's stream (the same name, its filter under that partition's prefix) and
pulled on each, its handlers shared out among them as ``start_consumers`` shares a
service's; loads and appends go to the aggregate's partition through the same
``JetStreamEventStore(partitions=...)``. K = 1 is the one stream ``BENCH_EVENTS``.

``python -m bench.rawchain --url ...`` runs the six stages as one process (its user and
password from ``BENCH_NATS_USER`` and ``BENCH_NATS_PASSWORD``, so that a reconnect to a
node the cluster announced authenticates too); it stops at end of stdin (its parent went
away), on SIGTERM/SIGINT, or after ``--max-seconds``. ``--stages 3`` runs only stage 3:
six such processes are the chain laid out as Lockgate's services are, a process (and a
connection) per stage, measured beside the floor as a reference, not as the floor.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.errors import BadRequestError, NotFoundError

from bench.load import Fire
from lockgate.eventstore.base import (
    AggregateHistory,
    ConcurrencyConflict,
    EventStoreUnavailable,
    NewEvent,
)
from lockgate.eventstore.jetstream import JetStreamEventStore, partition_stream_configs
from lockgate.eventstore.partitions import Partition, Partitions
from lockgate.eventstore.subjects import parse_event_subject
from lockgate.runtime import loop
from lockgate.runtime.consumer import Delivery, PullConsumer
from lockgate.runtime.settings import Settings
from lockgate.runtime.spec import Consumer
from lockgate.runtime.topology import Durable, consumer_config

log = logging.getLogger("bench.rawchain")

STAGES = 6
#: A body about the size of a Lockgate event.
PAYLOAD = b'{"bench":"raw-chain","note":"' + b"x" * 160 + b'","schema":1}'


@dataclass(frozen=True)
class ChainSpec:
    """Where a chain lives: its tenant (subject space) and the names of its durables."""

    tenant: str = "bench-raw"
    durable_prefix: str = "raw-"
    stream: str = "BENCH_EVENTS"
    prefix: str = "bench.evt"
    stages: int = STAGES
    #: The fetch mode asks for this many at a time (``Consumer.batch`` of the specs).
    batch: int = Consumer.batch
    #: And their durables allow this many unacknowledged (``Durable.max_ack_pending``).
    max_ack_pending: int = Durable.max_ack_pending
    #: ``pull`` (continuous, the kit's consumer) or ``fetch`` (a batch at a time).
    mode: str = "pull"
    #: Handlers of one stage at once (``Consumer.workers`` of the services' specs).
    workers: int = Consumer.workers
    #: Events streams (K) and the replicas of each (R), as the profile keeps Lockgate's.
    partitions: int = 1
    replicas: int = 1

    @property
    def layout(self) -> Partitions:
        """The chain's streams: ``BENCH_EVENTS`` for K = 1, else ``BENCH_EVENTS_<k>``."""
        return Partitions(self.partitions, self.stream, self.prefix)

    def durable(self, k: int) -> str:
        """The durable of stage ``k`` (1-based)."""
        return f"{self.durable_prefix}{k}"

    def filter(self, k: int, partition: Partition | None = None) -> str:
        """What stage ``k`` consumes (on ``partition``): the previous stage's event, any
        aggregate, any version."""
        prefix = partition.prefix if partition is not None else self.prefix
        return f"{prefix}.{self.tenant}.*.*.Stage{k - 1}.*"

    def done_subjects(self) -> list[str]:
        """The subjects of the last stage's events, on every partition: a chain is done
        when one is published."""
        return [f"{p.prefix}.{self.tenant}.*.*.Stage{self.stages}.*" for p in self.layout]

    @property
    def done_subject(self) -> str:
        """The last stage's subjects of the one stream (K = 1)."""
        return f"{self.prefix}.{self.tenant}.*.*.Stage{self.stages}.*"

    def stage_workers(self) -> int:
        """Handlers of one stage on one partition: a service's workers shared out among
        the partitions as ``lockgate.runtime.service.start_consumers`` shares them."""
        k = self.partitions
        return max(2, -(-self.workers // k)) if k > 1 else self.workers

    def store(self, nc: Client) -> JetStreamEventStore:
        """The event store over the chain's streams (Lockgate's own store)."""
        if self.partitions == 1:
            return JetStreamEventStore(nc, stream=self.stream, subject_prefix=self.prefix)
        return JetStreamEventStore(nc, partitions=self.layout)

    def event_types(self) -> list[str]:
        """The event types of a finished aggregate, in order."""
        return [f"Stage{k}" for k in range(self.stages + 1)]


async def ensure_consumers(js: JetStreamContext, spec: ChainSpec) -> None:
    """Create the chain's durables with the configuration Lockgate gives its own.

    ``Durable`` and ``consumer_config`` are the topology's, and the ack wait is the
    services' default, so the only difference is the filter.
    """
    ack_wait_s = Settings.model_fields["ack_wait_s"].default
    for config in partition_stream_configs(spec.layout, replicas=spec.replicas):
        with contextlib.suppress(BadRequestError):  # the other chain's made it already
            await js.add_stream(config)
    for p in spec.layout:
        for k in range(1, spec.stages + 1):
            d = Durable(p.stream, spec.durable(k), (spec.filter(k, p),),
                        max_ack_pending=spec.max_ack_pending)
            await js.add_consumer(p.stream, consumer_config(d, ack_wait_s))


async def delete_consumers(js: JetStreamContext, spec: ChainSpec) -> None:
    """Remove the chain's durables (absent ones are fine)."""
    for p in spec.layout:
        for k in range(1, spec.stages + 1):
            with contextlib.suppress(NotFoundError):
                await js.delete_consumer(p.stream, spec.durable(k))


@dataclass
class StageWorkers:
    """The six stages (or ``only`` those) as tasks on one connection."""

    nc: Client
    spec: ChainSpec
    only: tuple[int, ...] = ()
    handled: int = 0
    errors: int = 0
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _subs: list[JetStreamContext.PullSubscription] = field(default_factory=list)
    _pulls: list[PullConsumer] = field(default_factory=list)

    async def start(self) -> None:
        """Bind every stage to its durable and start consuming."""
        js = self.nc.jetstream()
        store = self.spec.store(self.nc)
        for k in self.only or range(1, self.spec.stages + 1):
            for p in self.spec.layout:
                if self.spec.mode == "pull":
                    pull = PullConsumer(self.nc, p.stream, self.spec.durable(k),
                                        self._delivered(k, store), workers=self.spec.stage_workers(),
                                        log=log)
                    await pull.start()
                    self._pulls.append(pull)
                    continue
                sub = await js.pull_subscribe_bind(durable=self.spec.durable(k), stream=p.stream)
                self._subs.append(sub)
                self._tasks.append(asyncio.create_task(self._consume(k, sub, store)))

    def _delivered(self, k: int, store: JetStreamEventStore) -> Callable[[Delivery], Awaitable[None]]:
        async def handle(delivery: Delivery) -> None:
            await self._handle(k, delivery.raw_message, store)

        return handle

    async def _consume(
        self, k: int, sub: JetStreamContext.PullSubscription, store: JetStreamEventStore
    ) -> None:
        while True:
            try:
                msgs = await sub.fetch(batch=self.spec.batch, timeout=1.0)
            except TimeoutError:
                continue
            except Exception as exc:  # noqa: BLE001 - a closed or reconnecting connection
                log.warning("stage %d fetch: %r", k, exc)
                await asyncio.sleep(0.2)
                continue
            await asyncio.gather(*(self._handle(k, m, store) for m in msgs))

    async def _handle(self, k: int, msg: Msg, store: JetStreamEventStore) -> None:
        event_type = f"Stage{k}"
        try:
            address = parse_event_subject(msg.subject, prefix=self.spec.prefix)
            history = await store.load(address.tenant, address.intent_id)
            if all(e.event_type != event_type for e in history.events):
                event_id = f"{address.intent_id}-s{k}"  # deterministic: a redelivery dedups
                await store.append(history, [NewEvent(event_id, event_type, PAYLOAD)])
            await msg.ack()
            self.handled += 1
        except (ConcurrencyConflict, EventStoreUnavailable) as exc:
            self.errors += 1
            log.info("stage %d: %s; redelivery", k, exc)
            await msg.nak(delay=0.2)
        except Exception:
            self.errors += 1
            log.exception("stage %d failed; redelivery", k)
            await msg.nak(delay=1.0)

    async def stop(self) -> None:
        """Stop consuming; unacked messages are redelivered to whoever binds next."""
        for pull in self._pulls:
            await pull.stop()
        self._pulls.clear()
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for sub in self._subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        self._tasks.clear()
        self._subs.clear()


@dataclass
class ChainDriver:
    """Opens chains (appends ``Stage0``) and waits until their ``Stage6`` is published."""

    nc: Client
    spec: ChainSpec
    nonce: str
    _waiting: dict[str, asyncio.Future[None]] = field(default_factory=dict)
    _subs: list[Subscription] = field(default_factory=list)

    async def start(self) -> None:
        """Listen for finished chains (one core subscription per partition for all of them)."""
        self._store = self.spec.store(self.nc)

        async def done(msg: Msg) -> None:
            try:
                future = self._waiting.get(parse_event_subject(msg.subject, prefix=self.spec.prefix).intent_id)
            except ValueError:
                return
            if future is not None and not future.done():
                future.set_result(None)

        for subject in self.spec.done_subjects():
            self._subs.append(await self.nc.subscribe(subject, cb=done))

    def aggregate_id(self, label: str, i: int) -> str:
        """The aggregate of chain ``i`` of phase ``label`` (a subject token)."""
        return f"{self.nonce}-{label}-{i}"

    def fire(self, label: str) -> Fire:
        """An operation for the load drivers: open chain ``i`` and wait for its end."""

        async def run_chain(i: int) -> str:
            intent_id = self.aggregate_id(label, i)
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiting[intent_id] = future
            try:
                start = AggregateHistory(self.spec.tenant, intent_id)
                await self._store.append(start, [NewEvent(f"{intent_id}-s0", "Stage0", PAYLOAD)])
                await future
                return "ok"
            finally:
                del self._waiting[intent_id]

        return run_chain

    async def stored_types(self, intent_id: str) -> list[str]:
        """The event types stored for one aggregate, in order."""
        history = await self._store.load(self.spec.tenant, intent_id)
        return [e.event_type for e in history.events]

    async def stop(self) -> None:
        """Stop listening."""
        for sub in self._subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        self._subs.clear()


@dataclass
class WorkerProcess:
    """``python -m bench.rawchain`` as a child: the six stages in one extra process."""

    url: str
    spec: ChainSpec
    log_file: Path
    max_s: float
    proc: asyncio.subprocess.Process | None = None
    #: The user it connects as (its password in the child's environment, not its arguments).
    user: str = ""
    password: str = ""
    #: The stages it runs (all when empty).
    stages: tuple[int, ...] = ()

    async def start(self, timeout_s: float = 20.0) -> None:
        """Start the child and wait until it has bound every stage.

        Raises:
            RuntimeError: it exited or did not report ready in time.
        """
        args = [
            sys.executable, "-m", "bench.rawchain", "--url", self.url,
            "--tenant", self.spec.tenant, "--prefix", self.spec.durable_prefix,
            "--batch", str(self.spec.batch), "--max-seconds", str(self.max_s),
            "--mode", self.spec.mode, "--partitions", str(self.spec.partitions),
        ]
        if self.stages:
            args += ["--stages", ",".join(map(str, self.stages))]
        env = {**os.environ, "BENCH_NATS_USER": self.user, "BENCH_NATS_PASSWORD": self.password}
        with open(self.log_file, "ab") as log_handle:
            self.proc = await asyncio.create_subprocess_exec(
                *args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log_handle, env=env,
                start_new_session=True,  # Ctrl-C reaches the parent, which stops it in order
                cwd=Path(__file__).resolve().parents[1],
            )
        assert self.proc.stdout is not None
        try:
            line = await asyncio.wait_for(self.proc.stdout.readline(), timeout_s)
        except TimeoutError:
            line = b""
        if line.strip() != b"ready":
            await self.stop()
            raise RuntimeError(f"raw chain worker did not start: see {self.log_file}")

    async def stop(self, timeout_s: float = 5.0) -> None:
        """Close its stdin (it stops by itself), then terminate, then kill."""
        proc = self.proc
        if proc is None:
            return
        self.proc = None
        if proc.stdin is not None:
            with contextlib.suppress(Exception):
                proc.stdin.close()
        for escalate in (None, proc.terminate, proc.kill):
            if escalate is not None and proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    escalate()
            try:
                await asyncio.wait_for(proc.wait(), timeout_s)
                return
            except TimeoutError:
                continue


async def _serve(args: argparse.Namespace) -> None:
    import nats

    spec = ChainSpec(tenant=args.tenant, durable_prefix=args.prefix, batch=args.batch, mode=args.mode,
                     partitions=args.partitions)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    async def closed() -> None:
        stop.set()

    credentials = {k: v for k, v in (("user", os.environ.get("BENCH_NATS_USER", "")),
                                     ("password", os.environ.get("BENCH_NATS_PASSWORD", ""))) if v}
    nc = await nats.connect(servers=args.url.split(","), max_reconnect_attempts=3, closed_cb=closed,
                            **credentials)
    only = tuple(int(k) for k in args.stages.split(",")) if args.stages else ()
    workers = StageWorkers(nc, spec, only)
    try:
        await workers.start()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        eof = asyncio.create_task(reader.read())
        stopped = asyncio.create_task(stop.wait())
        await asyncio.wait({eof, stopped}, timeout=args.max_seconds,
                           return_when=asyncio.FIRST_COMPLETED)
        for t in (eof, stopped):
            t.cancel()
    finally:
        await workers.stop()
        log.info("handled %d messages, %d errors", workers.handled, workers.errors)
        with contextlib.suppress(Exception):
            await nc.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the six stages until stdin ends, a signal arrives, or ``--max-seconds`` pass."""
    parser = argparse.ArgumentParser(prog="python -m bench.rawchain", description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--tenant", default=ChainSpec.tenant)
    parser.add_argument("--prefix", default=ChainSpec.durable_prefix)
    parser.add_argument("--batch", type=int, default=ChainSpec.batch)
    parser.add_argument("--max-seconds", type=float, default=900.0)
    parser.add_argument("--mode", choices=("pull", "fetch"), default=ChainSpec.mode)
    parser.add_argument("--partitions", type=int, default=ChainSpec.partitions)
    parser.add_argument("--stages", default="", help="only these stages, e.g. 3 or 1,2 (all: empty)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s rawchain %(levelname)s %(message)s")
    loop.run(_serve(args))  # the services' loop and client settings: the same floor
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
