"""The benchmark's harness works: every raw chain runs all six stages and is stored, on
one stream and on K partitions, and a cluster profile prints its figures.

Only the harness is checked here (nothing timed): a handful of chains through the six
durables, run as tasks against the session's server, each aggregate loaded afterwards;
then ``python -m bench --profile cluster-r1`` at a tiny size, its last line's shape.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys

from nats.aio.client import Client
from nats.js.errors import BadRequestError, NotFoundError

from bench import load
from bench.rawchain import ChainDriver, ChainSpec, StageWorkers, delete_consumers, ensure_consumers
from bench.stats import Phase
from lockgate.core.ids import random_id
from lockgate.eventstore.jetstream import events_stream_config
from lockgate.testing.system import REPO
from tests.conftest import require_postgres

CHAINS = 24


async def _run_chains(nc: Client, spec: ChainSpec, nonce: str) -> tuple[Phase, list[list[str]], int]:
    workers = StageWorkers(nc, spec)
    driver = ChainDriver(nc, spec, nonce)
    try:
        await workers.start()
        await driver.start()
        phase = await load.closed_loop(
            Phase("raw chain", "smoke"), driver.fire("smoke"), concurrency=4, count=CHAINS,
            op_timeout_s=5.0, max_s=5.0,
        )
        stored = [await driver.stored_types(driver.aggregate_id("smoke", i)) for i in range(CHAINS)]
    finally:
        await driver.stop()
        await workers.stop()
    return phase, stored, workers.errors


async def test_raw_chain_completes_and_stores_every_stage(nc: Client) -> None:
    js = nc.jetstream()
    with contextlib.suppress(BadRequestError):  # another suite may have created it already
        await js.add_stream(events_stream_config())
    nonce = random_id()[:8]
    spec = ChainSpec(tenant=f"bench-smoke-{nonce}", durable_prefix=f"smoke-{nonce}-")
    await ensure_consumers(js, spec)
    try:
        phase, stored, errors = await _run_chains(nc, spec, nonce)
    finally:
        await delete_consumers(js, spec)

    assert phase.offered == CHAINS
    assert phase.outcomes == {"ok": CHAINS}
    assert len(phase.latencies_s) == CHAINS
    # The driver's Stage0 opens each aggregate; the six stages each appended one event.
    stages = [f"Stage{k}" for k in range(1, 7)]
    assert all(types == ["Stage0", *stages] for types in stored), stored
    assert errors == 0


async def test_partitioned_raw_chain_runs_on_every_partition(nc: Client) -> None:
    js = nc.jetstream()
    nonce = random_id()[:8]
    spec = ChainSpec(tenant=f"bench-smoke-{nonce}", durable_prefix=f"smoke-{nonce}-",
                     stream=f"BENCH_SMOKE_{nonce}", prefix=f"bench.smoke{nonce}", partitions=3)
    await ensure_consumers(js, spec)
    try:
        phase, stored, errors = await _run_chains(nc, spec, nonce)
        held = {p.stream: (await js.stream_info(p.stream)).state.messages for p in spec.layout}
    finally:
        await delete_consumers(js, spec)
        for p in spec.layout:
            with contextlib.suppress(NotFoundError):
                await js.delete_stream(p.stream)

    assert phase.outcomes == {"ok": CHAINS}
    stages = [f"Stage{k}" for k in range(1, 7)]
    assert all(types == ["Stage0", *stages] for types in stored), stored
    assert errors == 0
    # Each aggregate's seven events are in its own partition, and every partition got some.
    placed = [spec.layout.index_of(f"{nonce}-smoke-{i}") for i in range(CHAINS)]
    assert held == {p.stream: 7 * placed.count(p.index) for p in spec.layout}
    assert all(held.values()), held


def test_cluster_profile_reports_lockgate_beside_the_raw_chain() -> None:
    """The cluster-r1 profile at a tiny size: three nodes, both systems, one JSON line."""
    require_postgres()  # the cluster's views are on PostgreSQL, or it does not start
    out = subprocess.run(
        [sys.executable, "-m", "bench", "--profile", "cluster-r1", "--quick", "--slice", "2",
         "--concurrency", "4", "--rate", "4", "--duration", "1"],
        cwd=REPO, capture_output=True, text=True, timeout=150, check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    figures = json.loads(out.stdout.strip().splitlines()[-1])["profiles"]["cluster-r1"]
    assert figures["nodes"] == 3 and figures["stream_replicas"] == 1
    assert figures["sync_interval"] == "default" and figures["partitions"] == 3
    assert figures["service_replicas"] == 2 and figures["raw_chain_workers"] == 2
    assert figures["views"] == "postgresql"
    for key in ("lockgate_per_s", "raw_chain_per_s", "throughput_ratio", "lockgate_p50_ms",
                "lockgate_p99_ms", "raw_p50_ms", "cpu_ms_per_candidate"):
        assert isinstance(figures[key], float) and figures[key] > 0, (key, figures)
    ratio = figures["lockgate_per_s"] / figures["raw_chain_per_s"]
    assert abs(figures["throughput_ratio"] - ratio) < 0.01
    # Both paths counted by the nodes: a chain is six deliveries and seven stored events at
    # least (the nodes count whatever else ran meanwhile too); a candidate's path is longer.
    assert figures["raw_deliveries_per_chain"] >= 6 and figures["raw_stored_per_chain"] >= 7
    assert figures["messages_per_candidate"] > figures["raw_messages_per_chain"] > 0
    assert figures["stored_per_candidate"] > figures["raw_stored_per_chain"]
    # Lockgate's partitions and the raw chain's, one per node, the same index on the same node.
    leaders = figures["leaders"]
    assert {leaders[f"LG_EVENTS_{k}"] for k in range(3)} == {"n1", "n2", "n3"}
    assert all(leaders[f"BENCH_EVENTS_{k}"] == leaders[f"LG_EVENTS_{k}"] for k in range(3))
    # Every executed response of the closed loop's slices is a note in the world's ledger.
    ledger = re.search(r"lockgate closed x4, 1 x 2s: (\d+) notes in the case-notes ledger for "
                       r"(\d+) executed responses", out.stdout)
    assert ledger is not None and ledger[1] == ledger[2] and int(ledger[1]) > 0, out.stdout[-3000:]
    assert figures["ratio_rounds"] == [figures["throughput_ratio"]]
