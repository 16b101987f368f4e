"""One contract for the locks port: the in-memory fake and the LG_LOCKS bucket."""

from __future__ import annotations

from lockgate.core.ids import random_id
from lockgate.runtime.context import Ports
from lockgate.runtime.ports.locks import MemoryLocks


async def test_one_holder_at_a_time(ports: Ports) -> None:
    key = f"tenant-a.case.{random_id()}"
    assert await ports.locks.holder(key) is None
    assert await ports.locks.take(key, b"i1")
    assert await ports.locks.take(key, b"i1")  # a redelivered gate holds it still
    assert not await ports.locks.take(key, b"i2")
    assert await ports.locks.holder(key) == b"i1"


async def test_only_the_holder_releases(ports: Ports) -> None:
    key = f"tenant-a.case.{random_id()}"
    await ports.locks.take(key, b"i1")
    await ports.locks.release(key, b"i2")
    assert await ports.locks.holder(key) == b"i1"
    await ports.locks.release(key, b"i1")
    assert await ports.locks.holder(key) is None
    await ports.locks.release(key, b"i1")  # released already: nothing happens
    assert await ports.locks.take(key, b"i2")


async def test_a_sweep_frees_a_lock_this_process_never_saw_taken(ports: Ports) -> None:
    key = f"tenant-a.case.{random_id()}"
    await ports.locks.take(key, b"i1")
    await ports.locks.release(key, b"i1", sweep=True)
    assert await ports.locks.holder(key) is None


async def test_the_fake_frees_a_lock_past_its_age_as_the_bucket_does() -> None:
    now = [0.0]
    locks = MemoryLocks(max_age_s=10, clock_s=lambda: now[0])
    assert await locks.take("k", b"i1")
    now[0] = 11
    assert await locks.holder("k") is None
    assert await locks.take("k", b"i2")
