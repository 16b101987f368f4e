"""Resource locks on a real bucket: how many round trips a take costs, and that a key
written elsewhere (another executor, a predecessor that crashed) is never taken over."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StorageType
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue

from lockgate.core.ids import random_id
from lockgate.runtime.ports.locks import ResourceLocks

#: The bucket's max_age in these tests: short, so that expiry can be waited for.
MAX_AGE_S = 1.0


class Counting:
    """A JetStream context or bucket, counting the calls named."""

    def __init__(self, inner: Any, *names: str) -> None:
        self.inner = inner
        self.names = names
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name not in self.names:
            return attr

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            return await attr(*args, **kwargs)
        return counted


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def bucket(nc: Client) -> AsyncIterator[tuple[JetStreamContext, KeyValue, str]]:
    js = nc.jetstream()
    name = f"LOCKS_{random_id()[:8]}"
    kv = await js.create_key_value(KeyValueConfig(
        bucket=name, history=1, ttl=MAX_AGE_S, storage=StorageType.MEMORY, direct=True))
    yield js, kv, name
    await js.delete_key_value(name)


def executor(bucket: tuple[JetStreamContext, KeyValue, str], clock: Clock | None = None,
             ) -> tuple[ResourceLocks, Counting, Counting]:
    """One executor's locks, with its writes (publishes) and reads (gets) counted."""
    js, kv, name = bucket
    writes, reads = Counting(js, "publish"), Counting(kv, "get")
    locks = ResourceLocks(writes, reads, name, max_age_s=MAX_AGE_S,  # type: ignore[arg-type]
                          clock_s=clock or Clock())
    return locks, writes, reads


async def holder(kv: KeyValue, key: str) -> bytes:
    try:
        return (await kv.get(key)).value or b""
    except KeyNotFoundError:
        return b""


async def test_a_lock_nobody_took_yet_is_one_create(bucket: Any) -> None:
    locks, writes, reads = executor(bucket)
    assert await locks.take("case-1", b"intent-1")
    assert (writes.calls, reads.calls) == (["publish"], [])
    await locks.release("case-1", b"intent-1")
    assert await locks.take("case-1", b"intent-2")  # released here: one write, no read
    assert (len(writes.calls), reads.calls) == (3, [])
    assert await holder(bucket[1], "case-1") == b"intent-2"


async def test_a_lock_another_executor_holds_is_not_taken(bucket: Any) -> None:
    other, _, _ = executor(bucket)
    assert await other.take("case-1", b"intent-1")
    locks, writes, reads = executor(bucket)
    # The create is refused (the key exists), the read finds it held: not ours.
    assert not await locks.take("case-1", b"intent-2")
    assert (writes.calls, reads.calls) == (["publish"], ["get"])
    assert await holder(bucket[1], "case-1") == b"intent-1"
    await other.release("case-1", b"intent-1")
    # Released by the other executor (a delete marker): taken after a read.
    assert await locks.take("case-1", b"intent-2")
    assert await holder(bucket[1], "case-1") == b"intent-2"
    # ... and the other one now finds it held, however old what it remembers.
    assert not await other.take("case-1", b"intent-3")


async def test_a_lock_taken_before_a_crash_is_the_same_intents_again(bucket: Any) -> None:
    """The executor took the lock and died before its append: a new one (nothing in
    memory) finds the intent holding it, gives it to that intent's redelivered gate and
    to no other, and frees it from the record."""
    crashed, _, _ = executor(bucket)
    assert await crashed.take("case-1", b"intent-1")
    restarted, _, _ = executor(bucket)
    assert not await restarted.take("case-1", b"intent-2")
    assert await restarted.take("case-1", b"intent-1")
    await restarted.release("case-1", b"intent-1")
    assert await holder(bucket[1], "case-1") == b""


async def test_a_lock_last_written_longer_ago_than_the_bucket_keeps_is_one_create(
    bucket: Any
) -> None:
    clock = Clock()
    locks, writes, reads = executor(bucket, clock)
    assert await locks.take("case-1", b"intent-1")
    await locks.release("case-1", b"intent-1")
    await until_gone(bucket[0], bucket[2], "case-1")
    clock.now += 60.0
    writes.calls.clear()
    # Without the clock, the write naming the remembered revision would be refused and
    # the key read: three round trips instead of one.
    assert await locks.take("case-1", b"intent-2")
    assert (writes.calls, reads.calls) == (["publish"], [])
    assert await holder(bucket[1], "case-1") == b"intent-2"


async def test_an_old_memory_of_a_key_another_executor_wrote_since_takes_nothing(
    bucket: Any
) -> None:
    clock = Clock()
    locks, _, _ = executor(bucket, clock)
    assert await locks.take("case-1", b"intent-1")
    await locks.release("case-1", b"intent-1")
    await until_gone(bucket[0], bucket[2], "case-1")
    other, _, _ = executor(bucket)
    assert await other.take("case-1", b"intent-2")
    clock.now += 60.0
    assert not await locks.take("case-1", b"intent-3")  # the create is refused, then read
    assert await holder(bucket[1], "case-1") == b"intent-2"
    await other.release("case-1", b"intent-2")
    assert await locks.take("case-1", b"intent-3")


async def test_a_release_after_the_lock_expired_leaves_a_lock_another_took(bucket: Any) -> None:
    clock = Clock()
    locks, _, _ = executor(bucket, clock)
    assert await locks.take("case-1", b"intent-1")
    await until_gone(bucket[0], bucket[2], "case-1")
    other, _, _ = executor(bucket)
    assert await other.take("case-1", b"intent-2")
    clock.now += 60.0
    await locks.release("case-1", b"intent-1")
    assert await holder(bucket[1], "case-1") == b"intent-2"


async def until_gone(js: JetStreamContext, bucket: str, key: str, timeout_s: float = 10.0) -> None:
    """Wait until the bucket has expired every message of ``key``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        info = await js.stream_info(f"KV_{bucket}", subjects_filter=f"$KV.{bucket}.{key}")
        if not info.state.subjects:
            return
        assert loop.time() < deadline, "the bucket kept the key past its max_age"
        await asyncio.sleep(0.1)
