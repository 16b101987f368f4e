"""Intake's limit counters on a real bucket: exact across replicas, released from the record."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest
from nats.aio.client import Client
from nats.js.errors import NotFoundError

from lockgate.authz.config import Limit
from lockgate.authz.ledger import LimitLedger
from lockgate.authz.limits import LimitState
from lockgate.authz.source import BundleSource
from lockgate.core.ids import random_id
from lockgate.intake.handlers import IntakeHandlers
from lockgate.intent.aggregate import EffectIntent
from lockgate.intent.codec import encode_event
from lockgate.runtime.context import Ports, ports_for
from lockgate.runtime.settings import Settings
from lockgate.testing.intents import T0, History
from lockgate.testing.system import REPO


@pytest.fixture
async def ports(nc: Client) -> AsyncIterator[Ports]:
    with contextlib.suppress(NotFoundError):
        await nc.jetstream().delete_stream("LG_EVENTS")
    yield await ports_for(nc, Settings(manage_topology=True))


async def test_two_replicas_admit_exactly_the_cap(ports: Ports) -> None:
    cap = Limit(name=f"cap-{random_id()[:8]}", scope="tenant", max_in_flight=10)
    replicas = [LimitLedger(ports.budgets), LimitLedger(ports.budgets)]
    admissions = await asyncio.gather(*(
        replicas[n % 2].admit([cap], tenant="tenant-a", actor="u", run_id="r", intent_id=f"i{n}")
        for n in range(40)
    ))
    admitted = [a for a in admissions if a.refused is None]
    assert len(admitted) == 10
    assert {a.refused.reason for a in admissions if a.refused} == {"rate.in-flight"}
    (key,) = {k for a in admitted for k in a.holds}
    state = msgspec.json.decode((await ports.budgets.get(key)).value or b"", type=LimitState)
    assert len(state.holds) == 10


async def test_holds_are_released_from_the_record_whatever_the_bundle_says_now(
    ports: Ports, tmp_path: Path
) -> None:
    key = f"limit=gone-{random_id()[:8]}.tenant-a_user-42"
    await ports.budgets.put(key, msgspec.json.encode(LimitState(holds={"someone-else": 1e12})))
    h = History(holds=(key,))
    ledger = LimitLedger(ports.budgets)
    await ledger._change(key, lambda s: LimitState(s.tat, {**s.holds, h.intent_id: 1e12}))
    h.add(EffectIntent.NormalizationFailed, reason="argument.note.empty", field="note", detail="")
    history = await ports.store.append(await ports.store.load("tenant-a", h.intent_id),
                                       [encode_event(e) for e in h.events])
    # The bundle that took the hold is gone: this one has no limits at all.
    policies = tmp_path / "policies"
    shutil.copytree(REPO / "deploy" / "policies", policies)
    (policies / "bundle.yaml").write_text("pause:\n  recheck_s: 2\n")
    intake = IntakeHandlers(ports, Settings(), lambda: T0, BundleSource(policies))
    await intake.respond(history.events[-1])  # the model learns it failed; the hold goes
    state = msgspec.json.decode((await ports.budgets.get(key)).value or b"", type=LimitState)
    assert list(state.holds) == ["someone-else"]


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


async def test_a_candidate_over_the_rate_costs_no_round_trip(ports: Ports) -> None:
    rate = Limit(name=f"rate-{random_id()[:8]}", scope="actor", per_s=0.01, burst=2, max_in_flight=10)
    kv = CountingKV(ports.budgets)
    ledger = LimitLedger(kv)  # type: ignore[arg-type]
    for n in range(2):
        admission = await ledger.admit([rate], tenant="t", actor="a", run_id="r", intent_id=f"i{n}")
        assert admission.refused is None
    # The first: a get and a create. The second starts from this process's own write:
    # one update, no read.
    assert kv.calls == 3
    refused = await ledger.admit([rate], tenant="t", actor="a", run_id="r", intent_id="i2")
    assert refused.refused is not None and refused.refused.reason == "rate.limited"
    calls = kv.calls
    for n in range(50):
        again = await ledger.admit([rate], tenant="t", actor="a", run_id="r", intent_id=f"j{n}")
        assert again.refused is not None and again.refused.reason == "rate.limited"
    assert kv.calls == calls
    # Another process sees the same: its first look reads the bucket, then it knows.
    other = CountingKV(ports.budgets)
    second = LimitLedger(other)  # type: ignore[arg-type]
    assert (await second.admit([rate], tenant="t", actor="a", run_id="r", intent_id="k")).refused
    assert other.calls == 1


async def test_a_hold_released_elsewhere_admits_the_next_candidate_at_once(ports: Ports) -> None:
    cap = Limit(name=f"cap-{random_id()[:8]}", scope="run", max_in_flight=2)
    ledger = LimitLedger(ports.budgets)
    for n in range(2):
        assert (await ledger.admit([cap], tenant="t", actor="a", run_id="r", intent_id=f"i{n}")).holds
    refused = await ledger.admit([cap], tenant="t", actor="a", run_id="r", intent_id="i2")
    assert refused.refused is not None and refused.refused.reason == "rate.in-flight"
    # Released by another process (policy settling the record): the very next is admitted.
    await LimitLedger(ports.budgets).release([f"limit={cap.name}.t_r"], "i0")
    assert (await ledger.admit([cap], tenant="t", actor="a", run_id="r", intent_id="i3")).holds
    assert (await ledger.admit([cap], tenant="t", actor="a", run_id="r", intent_id="i4")).refused
    state = msgspec.json.decode((await ports.budgets.get(f"limit={cap.name}.t_r")).value or b"",
                                type=LimitState)
    assert sorted(state.holds) == ["i1", "i3"]  # the other process's release was not undone


async def test_concurrent_changes_of_a_hot_key_share_their_writes(ports: Ports) -> None:
    """Candidates of one tenant arriving together: one compare-and-set per batch, still exact."""
    cap = Limit(name=f"hot-{random_id()[:8]}", scope="tenant", max_in_flight=30)
    kv = CountingKV(ports.budgets)
    ledger = LimitLedger(kv)  # type: ignore[arg-type]
    admissions = await asyncio.gather(*(
        ledger.admit([cap], tenant="t", actor="a", run_id="r", intent_id=f"i{n}") for n in range(60)
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
    state = msgspec.json.decode((await ports.budgets.get(f"limit={cap.name}.t")).value or b"",
                                type=LimitState)
    assert state.holds == {} and len(held) == 30


async def test_a_cancelled_writer_leaves_the_changes_behind_it_to_the_next(ports: Ports) -> None:
    """The caller whose write is in flight is cancelled: the changes batched behind it still land."""
    cap = Limit(name=f"cancel-{random_id()[:8]}", scope="tenant", max_in_flight=10)
    slow = asyncio.Event()

    class SlowKV(CountingKV):
        def __getattr__(self, name: str) -> object:
            attr = super().__getattr__(name)
            if name != "create":
                return attr
            async def held_up(*args: object, **kwargs: object) -> object:
                await slow.wait()
                return await attr(*args, **kwargs)  # type: ignore[operator]
            return held_up

    ledger = LimitLedger(SlowKV(ports.budgets))  # type: ignore[arg-type]
    first = asyncio.create_task(ledger.admit([cap], tenant="t", actor="a", run_id="r", intent_id="i0"))
    await asyncio.sleep(0.05)  # its create is held up
    rest = [asyncio.create_task(ledger.admit([cap], tenant="t", actor="a", run_id="r", intent_id=f"i{n}"))
            for n in range(1, 5)]
    await asyncio.sleep(0.01)
    first.cancel()
    slow.set()
    admissions = await asyncio.wait_for(asyncio.gather(*rest), 10)
    assert all(a.refused is None for a in admissions)
    state = msgspec.json.decode((await ports.budgets.get(f"limit={cap.name}.t")).value or b"",
                                type=LimitState)
    assert sorted(state.holds) == ["i1", "i2", "i3", "i4"]
