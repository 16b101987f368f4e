"""The benchmark's raw JetStream chain works: every chain runs all six stages and is stored.

Only the harness is checked here (nothing timed): a handful of chains through the six
durables, run as tasks against the session's server, each aggregate loaded afterwards.
"""

from __future__ import annotations

import contextlib

from nats.aio.client import Client
from nats.js.errors import BadRequestError

from bench import load
from bench.rawchain import ChainDriver, ChainSpec, StageWorkers, delete_consumers, ensure_consumers
from bench.stats import Phase
from lockgate.core.ids import random_id
from lockgate.eventstore.jetstream import events_stream_config

CHAINS = 24


async def test_raw_chain_completes_and_stores_every_stage(nc: Client) -> None:
    js = nc.jetstream()
    with contextlib.suppress(BadRequestError):  # another suite may have created it already
        await js.add_stream(events_stream_config())
    nonce = random_id()[:8]
    spec = ChainSpec(tenant=f"bench-smoke-{nonce}", durable_prefix=f"smoke-{nonce}-")
    await ensure_consumers(js, spec)
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
        await delete_consumers(js, spec)

    assert phase.offered == CHAINS
    assert phase.outcomes == {"ok": CHAINS}
    assert len(phase.latencies_s) == CHAINS
    # The driver's Stage0 opens each aggregate; the six stages each appended one event.
    stages = [f"Stage{k}" for k in range(1, 7)]
    assert all(types == ["Stage0", *stages] for types in stored), stored
    assert workers.errors == 0
