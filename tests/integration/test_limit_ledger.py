"""Intake's limit counters on a real bucket: exact across replicas, released from the record,
one compare-and-set per candidate."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest
from nats.aio.client import Client
from nats.js.errors import KeyNotFoundError, NotFoundError
from nats.js.kv import KeyValue

from lockgate.authz.config import Limit
from lockgate.authz.limits import FloodState, Hold, flood_key
from lockgate.authz.source import BundleSource
from lockgate.core.ids import random_id
from lockgate.intake.handlers import IntakeHandlers
from lockgate.intent.codec import encode_event
from lockgate.intent.events import NormalizationFailed
from lockgate.runtime.context import Ports, ports_for
from lockgate.runtime.ports.ledger import LimitLedger
from lockgate.runtime.settings import Settings
from lockgate.runtime.topology import BUDGETS_BUCKET
from lockgate.testing.intents import T0, History
from lockgate.testing.system import REPO


@pytest.fixture
async def ports(nc: Client) -> AsyncIterator[Ports]:
    with contextlib.suppress(NotFoundError):
        await nc.jetstream().delete_stream("LG_EVENTS")
    yield await ports_for(nc, Settings(manage_topology=True))


@pytest.fixture
def tenant() -> str:
    """A tenant of this test alone: the bucket outlives the test, and a counter is per tenant."""
    return f"t-{random_id()[:8]}"


async def budgets(ports: Ports) -> KeyValue:
    """The ``LG_BUDGETS`` bucket itself (these tests count its round trips)."""
    return await ports.js.key_value(BUDGETS_BUCKET)


async def counter(ports: Ports, tenant: str) -> FloodState:
    """A tenant's counter as the bucket holds it."""
    return msgspec.json.decode((await (await budgets(ports)).get(flood_key(tenant))).value or b"", type=FloodState)


class CountingKV:
    """The bucket, counting its round trips."""

    def __init__(self, kv: object) -> None:
        self.kv = kv
        self.calls = 0

    def __getattr__(self, name: str) -> object:
        attr = getattr(self.kv, name)
        if name in ("get", "create", "update"):
            async def counted(*args: object, **kwargs: object) -> object:
                self.calls += 1
                return await attr(*args, **kwargs)  # type: ignore[operator]
            return counted
        return attr


def run_cap(max_in_flight: int = 1) -> Limit:
    return Limit(name="per-run", scope="run", max_in_flight=max_in_flight)


async def test_two_replicas_admit_exactly_the_cap(ports: Ports, tenant: str) -> None:
    cap = Limit(name="per-tenant", scope="tenant", max_in_flight=10)
    replicas = [LimitLedger(await budgets(ports)), LimitLedger(await budgets(ports))]
    admissions = await asyncio.gather(*(
        replicas[n % 2].admit([cap], tenant=tenant, actor="u", run_id="r", intent_id=f"i{n}")
        for n in range(40)
    ))
    admitted = [a for a in admissions if a.refused is None]
    assert len(admitted) == 10
    assert {a.refused.reason for a in admissions if a.refused} == {"rate.in-flight"}
    assert {k for a in admitted for k in a.holds} == {flood_key(tenant)}
    assert len((await counter(ports, tenant)).holds) == 10


async def test_every_limit_of_a_candidate_is_one_compare_and_set(ports: Ports, tenant: str) -> None:
    """A run's, its actor's and its tenant's limits: one write admits, one gives back."""
    limits = [Limit(name="per-run", scope="run", per_s=50, burst=50, max_in_flight=16),
              Limit(name="per-actor", scope="actor", per_s=100, burst=100, max_in_flight=32),
              Limit(name="per-tenant", scope="tenant", per_s=200, burst=200, max_in_flight=64)]
    kv = CountingKV(await budgets(ports))
    ledger = LimitLedger(kv)  # type: ignore[arg-type]
    for n in range(5):
        admission = await ledger.admit(limits, tenant=tenant, actor="u", run_id="r", intent_id=f"i{n}")
        assert admission.holds == (flood_key(tenant),)
    assert kv.calls == 5
    for n in range(5):
        await ledger.release((flood_key(tenant),), f"i{n}")
    assert kv.calls == 10
    state = await counter(ports, tenant)
    assert state.holds == {} and set(state.rates) == {"per-run/r", "per-actor/u", "per-tenant/"}


async def test_holds_are_released_from_the_record_whatever_the_bundle_says_now(
    ports: Ports, tmp_path: Path
) -> None:
    key = flood_key("tenant-a")
    h = History(holds=(key, "limit=per-actor.tenant-a_user-42"))  # and a key from before
    await (await budgets(ports)).put(key, msgspec.json.encode(FloodState(holds={
        "someone-else": Hold(1e12, "u", "r"), h.intent_id: Hold(1e12, "user-42", "r")})))
    h.add(NormalizationFailed, reason="argument.note.empty", field="note", detail="")
    history = await ports.store.append(await ports.store.load("tenant-a", h.intent_id),
                                       [encode_event(e) for e in h.events])
    # The bundle that took the hold is gone: this one has no limits at all.
    policies = tmp_path / "policies"
    shutil.copytree(REPO / "deploy" / "policies", policies)
    (policies / "bundle.yaml").write_text("pause:\n  recheck_s: 2\n")
    intake = IntakeHandlers(ports, Settings(), lambda: T0, BundleSource(policies))
    await intake.respond(history.events[-1])  # the model learns it failed; the hold goes
    assert list((await counter(ports, "tenant-a")).holds) == ["someone-else"]


async def test_a_candidate_over_the_rate_costs_no_round_trip(ports: Ports, tenant: str) -> None:
    rate = Limit(name="rate", scope="actor", per_s=0.01, burst=2, max_in_flight=10)
    kv = CountingKV(await budgets(ports))
    ledger = LimitLedger(kv)  # type: ignore[arg-type]
    for n in range(2):
        admission = await ledger.admit([rate], tenant=tenant, actor="a", run_id="r", intent_id=f"i{n}")
        assert admission.refused is None
    # The first: a create, no read (a key this process never saw is taken to be absent).
    # The second starts from this process's own write: one update, no read.
    assert kv.calls == 2
    refused = await ledger.admit([rate], tenant=tenant, actor="a", run_id="r", intent_id="i2")
    assert refused.refused is not None and refused.refused.reason == "rate.limited"
    calls = kv.calls
    for n in range(50):
        again = await ledger.admit([rate], tenant=tenant, actor="a", run_id="r", intent_id=f"j{n}")
        assert again.refused is not None and again.refused.reason == "rate.limited"
    assert kv.calls == calls
    # Another process sees the same: its create is refused (the key exists), its read
    # refuses the candidate, and from then on it knows.
    other = CountingKV(await budgets(ports))
    second = LimitLedger(other)  # type: ignore[arg-type]
    assert (await second.admit([rate], tenant=tenant, actor="a", run_id="r", intent_id="k")).refused
    assert other.calls == 2
    assert (await second.admit([rate], tenant=tenant, actor="a", run_id="r", intent_id="k2")).refused
    assert other.calls == 2


async def test_a_hold_released_elsewhere_admits_the_next_candidate_at_once(
    ports: Ports, tenant: str,
) -> None:
    cap = run_cap(max_in_flight=2)
    ledger = LimitLedger(await budgets(ports))
    for n in range(2):
        assert (await ledger.admit([cap], tenant=tenant, actor="a", run_id="r", intent_id=f"i{n}")).holds
    refused = await ledger.admit([cap], tenant=tenant, actor="a", run_id="r", intent_id="i2")
    assert refused.refused is not None and refused.refused.reason == "rate.in-flight"
    # Released by another process (a replica answering the intent's end): the very next is admitted.
    await LimitLedger(await budgets(ports)).release([flood_key(tenant)], "i0")
    assert (await ledger.admit([cap], tenant=tenant, actor="a", run_id="r", intent_id="i3")).holds
    assert (await ledger.admit([cap], tenant=tenant, actor="a", run_id="r", intent_id="i4")).refused
    assert sorted((await counter(ports, tenant)).holds) == ["i1", "i3"]  # the release was not undone


async def test_concurrent_changes_of_a_hot_key_share_their_writes(ports: Ports, tenant: str) -> None:
    """Candidates of one tenant arriving together: one compare-and-set per batch, still exact."""
    cap = Limit(name="hot", scope="tenant", max_in_flight=30)
    kv = CountingKV(await budgets(ports))
    ledger = LimitLedger(kv)  # type: ignore[arg-type]
    admissions = await asyncio.gather(*(
        ledger.admit([cap], tenant=tenant, actor="a", run_id="r", intent_id=f"i{n}") for n in range(60)
    ))
    assert sum(a.refused is None for a in admissions) == 30
    assert {a.refused.reason for a in admissions if a.refused} == {"rate.in-flight"}
    # One at a time this is 61 round trips (a read, then a write per candidate).
    assert kv.calls <= 6, kv.calls
    held = [f"i{n}" for n, a in enumerate(admissions) if a.refused is None]
    calls = kv.calls
    await asyncio.gather(*(ledger.release(list(a.holds), f"i{n}") for n, a in enumerate(admissions)
                           if a.refused is None))
    assert kv.calls - calls <= 3
    assert (await counter(ports, tenant)).holds == {} and len(held) == 30


async def test_a_cancelled_writer_leaves_the_changes_behind_it_to_the_next(
    ports: Ports, tenant: str,
) -> None:
    """The caller whose write is in flight is cancelled: the changes batched behind it still land."""
    cap = Limit(name="cancel", scope="tenant", max_in_flight=10)
    slow = asyncio.Event()

    class SlowKV(CountingKV):
        def __getattr__(self, name: str) -> object:
            attr = super().__getattr__(name)
            if name != "update":
                return attr
            async def held_up(*args: object, **kwargs: object) -> object:
                await slow.wait()
                return await attr(*args, **kwargs)  # type: ignore[operator]
            return held_up

    ledger = LimitLedger(SlowKV(await budgets(ports)))  # type: ignore[arg-type]
    first = asyncio.create_task(ledger.admit([cap], tenant=tenant, actor="a", run_id="r", intent_id="i0"))
    await asyncio.sleep(0.05)  # its create (an update of nothing) is held up
    rest = [asyncio.create_task(ledger.admit([cap], tenant=tenant, actor="a", run_id="r", intent_id=f"i{n}"))
            for n in range(1, 5)]
    await asyncio.sleep(0.01)
    first.cancel()
    slow.set()
    admissions = await asyncio.wait_for(asyncio.gather(*rest), 10)
    assert all(a.refused is None for a in admissions)
    assert sorted((await counter(ports, tenant)).holds) == ["i1", "i2", "i3", "i4"]


async def test_an_admission_that_waited_is_dated_when_it_is_written(ports: Ports, tenant: str) -> None:
    """A candidate's write of a tenant's counter waits ten seconds (behind a write in flight, a
    leader election) while another replica admits one of the run within its rate: the
    waiting one arrives when it is written, not ten seconds early, and is admitted."""
    rate = Limit(name="rate", scope="run", per_s=5, burst=3, max_in_flight=16)
    now = [1000.0]
    waited, other = LimitLedger((await budgets(ports)), lambda: now[0]), LimitLedger((await budgets(ports)), lambda: now[0])
    async with waited._lock(flood_key(tenant)):  # its write of the key is held up
        late = asyncio.create_task(waited.admit([rate], tenant=tenant, actor="u", run_id="r",
                                                intent_id="late"))
        await asyncio.sleep(0.05)
        now[0] = 1010.0
        assert (await other.admit([rate], tenant=tenant, actor="u", run_id="r",
                                  intent_id="meanwhile")).refused is None
    admission = await asyncio.wait_for(late, 10)
    assert admission.refused is None
    assert sorted((await counter(ports, tenant)).holds) == ["late", "meanwhile"]


async def test_a_new_tenants_first_admission_is_one_create(ports: Ports, tenant: str) -> None:
    kv = CountingKV(await budgets(ports))
    ledger = LimitLedger(kv, js=ports.js)  # type: ignore[arg-type]
    admission = await ledger.admit([run_cap()], tenant=tenant, actor="a", run_id="r", intent_id="i0")
    assert admission.holds == (flood_key(tenant),)
    assert kv.calls == 1  # no read of a key nobody wrote: the write itself is the check


async def test_a_key_another_replica_wrote_is_read_after_the_refused_create(
    ports: Ports, tenant: str,
) -> None:
    cap = run_cap()
    first = LimitLedger((await budgets(ports)), js=ports.js)
    assert (await first.admit([cap], tenant=tenant, actor="a", run_id="r", intent_id="i0")).holds
    kv = CountingKV(await budgets(ports))
    second = LimitLedger(kv, js=ports.js)  # type: ignore[arg-type]
    refused = await second.admit([cap], tenant=tenant, actor="a", run_id="r", intent_id="i1")
    assert refused.refused is not None and refused.refused.reason == "rate.in-flight"
    assert kv.calls == 1  # the refused create; the key was then read from the leader
    await first.release([flood_key(tenant)], "i0")
    assert (await second.admit([cap], tenant=tenant, actor="a", run_id="r", intent_id="i1")).holds
    assert list((await counter(ports, tenant)).holds) == ["i1"]  # the other's was never written over


class LaggingKV(CountingKV):
    """A bucket whose direct gets come from a replica that has applied nothing yet."""

    def __getattr__(self, name: str) -> object:
        if name == "get":
            async def nothing(*args: object, **kwargs: object) -> object:
                self.calls += 1
                raise KeyNotFoundError
            return nothing
        return super().__getattr__(name)


async def test_a_lagging_replica_cannot_hide_a_key_another_replica_wrote(ports: Ports, tenant: str) -> None:
    cap = run_cap()
    first = LimitLedger((await budgets(ports)), js=ports.js)
    assert (await first.admit([cap], tenant=tenant, actor="a", run_id="r", intent_id="i0")).holds
    second = LimitLedger(LaggingKV(await budgets(ports)), js=ports.js)  # type: ignore[arg-type]
    refused = await second.admit([cap], tenant=tenant, actor="a", run_id="r", intent_id="i1")
    assert refused.refused is not None and refused.refused.reason == "rate.in-flight"


async def test_a_hold_left_by_a_crash_is_released_by_a_process_that_never_saw_it(
    ports: Ports, tenant: str,
) -> None:
    """Admitted, then the process died before the intent ended: the hold is released from
    the record by another process, which reads the key (nothing to release from nothing)."""
    crashed = LimitLedger((await budgets(ports)), js=ports.js)
    (key,) = (await crashed.admit([run_cap()], tenant=tenant, actor="a", run_id="r", intent_id="i0")).holds
    kv = CountingKV(await budgets(ports))
    await LimitLedger(kv, js=ports.js).release([key], "i0")  # type: ignore[arg-type]
    assert kv.calls == 2  # a read, then the write
    assert (await counter(ports, tenant)).holds == {}


async def test_a_deleted_key_is_written_again(ports: Ports, tenant: str) -> None:
    key = flood_key(tenant)
    await (await budgets(ports)).put(key, msgspec.json.encode(FloodState(holds={"old": Hold(1e12, "a", "r")})))
    await (await budgets(ports)).delete(key)
    ledger = LimitLedger(await budgets(ports))  # no leader to ask: the marker's revision is read
    assert (await ledger.admit([run_cap()], tenant=tenant, actor="a", run_id="r", intent_id="i0")).holds
    assert list((await counter(ports, tenant)).holds) == ["i0"]
