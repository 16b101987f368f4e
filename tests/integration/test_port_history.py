"""One contract for the history port: the in-memory fake and the LG_PROGRESS bucket.

A decision reads the documents it weighs and holds its intent in them at the revisions it
read; a document changed in between is ``HistoryMoved``. Authorizations and ends are
changed by compare-and-set retried, so several at once all count. Every test names a tenant,
actor and run of its own (the bucket is shared by the session).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest
from nats.errors import TimeoutError as NatsTimeoutError

from lockgate.authz.history import EXECUTED, NOTHING, REFUSED, WINDOWS, Authorized, Held
from lockgate.core.ids import random_id
from lockgate.runtime.context import Ports
from lockgate.runtime.ports.history import HistoryMoved, MemoryHistory, run_key, window_key
from lockgate.testing.intents import T0

PAY = Held("bank.pay", "publish", amount=700)


@dataclass(frozen=True)
class Run:
    """A run of its own: its tenant, actor and id."""

    tenant: str
    actor: str
    run_id: str


@pytest.fixture
def run() -> Run:
    return Run(f"t-{random_id()}", f"a-{random_id()}", f"r-{random_id()}")


async def test_a_decision_on_a_moved_history_is_told_to_decide_again(ports: Ports, run: Run) -> None:
    first = await ports.history.read(run.tenant, run.run_id, run.actor, "i1", T0, windows=False)
    second = await ports.history.read(run.tenant, run.run_id, run.actor, "i2", T0, windows=False)
    assert await ports.history.admit(first, "i1", PAY) == [run_key(run.tenant, run.run_id)]
    with pytest.raises(HistoryMoved):
        await ports.history.admit(second, "i2", PAY)
    again = await ports.history.read(run.tenant, run.run_id, run.actor, "i2", T0, windows=False)
    assert again.facts.run.amount == 700  # the first call's hold, in flight
    await ports.history.admit(again, "i2", PAY)
    mine = await ports.history.read(run.tenant, run.run_id, run.actor, "i1", T0, windows=False)
    assert mine.facts.run.amount == 700  # the other's, never its own


async def test_a_moved_window_moves_the_decision_too(ports: Ports, run: Run) -> None:
    other_run = f"r-{random_id()}"
    mine = await ports.history.read(run.tenant, run.run_id, run.actor, "i1", T0, windows=True)
    theirs = await ports.history.read(run.tenant, other_run, run.actor, "i2", T0, windows=True)
    await ports.history.admit(theirs, "i2", PAY)  # the same actor, in another run, this hour
    with pytest.raises(HistoryMoved):
        await ports.history.admit(mine, "i1", PAY)
    again = await ports.history.read(run.tenant, run.run_id, run.actor, "i1", T0, windows=True)
    history = again.facts.context()
    assert history["run"]["amount"] == 0 and history["actor_hour"]["amount"] == 700
    assert history["tenant_day"]["publish"] == 1


async def test_an_admission_told_again_holds_once(ports: Ports, run: Run) -> None:
    for _ in range(2):  # a redelivered decision reads again and admits again
        reading = await ports.history.read(run.tenant, run.run_id, run.actor, "i1", T0, windows=True)
        keys = await ports.history.admit(reading, "i1", PAY)
    other = await ports.history.read(run.tenant, run.run_id, run.actor, "i2", T0, windows=True)
    history = other.facts.context()
    assert history["run"]["amount"] == 700 and history["actor_hour"]["publish"] == 1
    assert sorted(keys) == sorted([run_key(run.tenant, run.run_id),
                                   *(window_key(n, run.tenant, run.actor, T0) for n in WINDOWS)])


async def admitted(ports: Ports, run: Run, intent_id: str, held: Held = PAY) -> list[str]:
    reading = await ports.history.read(run.tenant, run.run_id, run.actor, intent_id, T0, windows=True)
    return await ports.history.admit(reading, intent_id, held)


@pytest.mark.parametrize("ended", [EXECUTED, NOTHING, REFUSED])
async def test_an_end_settles_the_run_and_every_window_it_was_held_in(
    ports: Ports, run: Run, ended: str,
) -> None:
    keys = await admitted(ports, run, "i1")
    for _ in range(2):  # told again
        await ports.history.end(run.tenant, run.run_id, keys, "i1", "bank.pay", "publish", ended)
    stranger = Run(run.tenant, f"a-{random_id()}", f"r-{random_id()}")
    seen = await ports.history.read(stranger.tenant, run.run_id, stranger.actor, "i9", T0, windows=True)
    history = seen.facts.context()
    counted = 1 if ended == EXECUTED else 0
    assert history["run"]["publish"] == history["tenant_hour"]["publish"] == counted
    assert history["run"]["amount"] == history["tenant_day"]["amount"] == 700 * counted
    assert history["actor_hour"]["effects"] == 0  # another actor's window
    assert history["refused_count"]["publish"] == (1 if ended == REFUSED else 0)
    assert history["executed"] == (["bank.pay"] if ended == EXECUTED else [])


async def test_an_end_settles_only_the_windows_it_names(ports: Ports, run: Run) -> None:
    keys = await admitted(ports, run, "i1")
    run_only = [run_key(run.tenant, run.run_id)]
    await ports.history.end(run.tenant, run.run_id, run_only, "i1", "bank.pay", "publish", NOTHING)
    seen = await ports.history.read(run.tenant, run.run_id, run.actor, "i9", T0, windows=True)
    assert seen.facts.run.amount == 0
    assert seen.facts.context()["actor_hour"]["amount"] == 700  # still held there
    await ports.history.end(run.tenant, run.run_id, keys, "i1", "bank.pay", "publish", NOTHING)
    seen = await ports.history.read(run.tenant, run.run_id, run.actor, "i9", T0, windows=True)
    assert seen.facts.context()["actor_hour"]["amount"] == 0


async def test_authorizations_at_once_all_count(ports: Ports, run: Run) -> None:
    n = 8
    await asyncio.gather(*(ports.history.authorize(run.tenant, run.run_id, Authorized(
        f"i{k}", f"mail.read.{k}", "read", True, (f"class-{k}",), (), approved=True)) for k in range(n)))
    await asyncio.gather(*(ports.history.authorize(run.tenant, run.run_id, Authorized(
        f"w{k}", "mail.send", "publish", False, (), (f"to-{k}@example.com",), False)) for k in range(n)))
    seen = await ports.history.read(run.tenant, run.run_id, run.actor, "x", T0, windows=False)
    history = seen.facts.context()
    assert history["untrusted"] and len(history["untrusted_from"]) == n
    assert len(history["data_classes_read"]) == n and len(history["destinations"]) == n
    assert history["approvals"] == n


async def test_ends_at_once_all_count(ports: Ports, run: Run) -> None:
    keys = {}
    for k in range(6):  # admitted one after the other, as decisions that re-read would be
        keys[f"i{k}"] = await admitted(ports, run, f"i{k}", Held("bank.pay", "publish", 100))
    await asyncio.gather(*(ports.history.end(run.tenant, run.run_id, held, intent_id, "bank.pay",
                                             "publish", EXECUTED) for intent_id, held in keys.items()))
    seen = await ports.history.read(run.tenant, run.run_id, run.actor, "x", T0, windows=True)
    history = seen.facts.context()
    assert history["run"]["publish"] == history["actor_day"]["publish"] == 6
    assert history["run"]["amount"] == history["tenant_hour"]["amount"] == 600


async def test_a_decision_told_to_decide_again_leaves_no_hold_behind(ports: Ports, run: Run) -> None:
    """The run's record and the actor's windows come before the tenant's: they were held
    when the tenant's window was found moved, and are given back."""
    mine = await ports.history.read(run.tenant, run.run_id, run.actor, "i1", T0, windows=True)
    colleague = Run(run.tenant, f"a-{random_id()}", f"r-{random_id()}")
    await admitted(ports, colleague, "i2", Held("bank.pay", "publish", 1))
    with pytest.raises(HistoryMoved):
        await ports.history.admit(mine, "i1", PAY)
    seen = await ports.history.read(run.tenant, run.run_id, run.actor, "i9", T0, windows=True)
    history = seen.facts.context()
    assert history["run"]["amount"] == history["actor_hour"]["amount"] == 0
    assert history["tenant_hour"]["amount"] == 1  # the colleague's
    again = await ports.history.read(run.tenant, run.run_id, run.actor, "i1", T0, windows=True)
    await ports.history.admit(again, "i1", PAY)  # decided again: held once, everywhere
    seen = await ports.history.read(run.tenant, run.run_id, run.actor, "i9", T0, windows=True)
    assert seen.facts.run.amount == 700 and seen.facts.context()["tenant_day"]["amount"] == 701


class FailingOnce(MemoryHistory):
    """A history whose broker fails on the ``fail_at``-th write, once."""

    def __init__(self, fail_at: int) -> None:
        super().__init__()
        self.writes = 0
        self.fail_at = fail_at

    async def _put(self, key: str, value: bytes, revision: int | None) -> bool:
        self.writes += 1
        if self.writes == self.fail_at:
            raise NatsTimeoutError
        return await super()._put(key, value, revision)


async def test_a_broker_failing_midway_through_an_admission_leaves_no_hold(run: Run) -> None:
    history = FailingOnce(fail_at=3)  # the run's record and the actor's hour written first
    reading = await history.read(run.tenant, run.run_id, run.actor, "i1", T0, windows=True)
    with pytest.raises(NatsTimeoutError):
        await history.admit(reading, "i1", PAY)
    seen = await history.read(run.tenant, run.run_id, run.actor, "i9", T0, windows=True)
    assert seen.facts.run.amount == 0 and seen.facts.context()["actor_hour"]["amount"] == 0
