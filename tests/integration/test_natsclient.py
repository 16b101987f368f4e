"""Publishes of one loop turn share a socket write, and arrive whole and in order."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import nats
import nats.aio.msg
import pytest
from nats.aio.client import Client

from lockgate.runtime.natsclient import coalesce_writes
from lockgate.runtime.natsserver import NatsServer


@pytest.fixture
def coalescing() -> Iterator[None]:
    was = coalesce_writes(False)
    yield
    coalesce_writes(was)


async def staggered_writes(nc: Client, subject: str, n: int) -> int:
    """Publish from ``n`` tasks, task ``i`` after ``i`` loop turns; count socket writes."""
    transport = nc._transport  # noqa: SLF001 - counting what reaches the socket
    assert transport is not None
    writes = 0
    write = transport.writelines

    def counted(data: list[bytes]) -> None:
        nonlocal writes
        writes += 1
        write(data)

    transport.writelines = counted  # type: ignore[method-assign]

    async def publisher(i: int) -> None:
        for _ in range(i):
            await asyncio.sleep(0)
        await nc.publish(subject, str(i).encode())

    await nc.flush()
    writes = 0
    await asyncio.gather(*(publisher(i) for i in range(n)))
    await nc.flush()
    transport.writelines = write  # type: ignore[method-assign]
    return writes


async def test_publishes_of_neighbouring_turns_share_writes_and_arrive_in_order(
    nats_server: NatsServer, coalescing: None,
) -> None:
    nc = await nats.connect(nats_server.url)
    got: list[bytes] = []

    async def heard(msg: nats.aio.msg.Msg) -> None:
        got.append(msg.data)

    sub = await nc.subscribe("probe.writes", cb=heard)
    try:
        alone = await staggered_writes(nc, "probe.writes", 20)
        assert coalesce_writes(True)
        together = await staggered_writes(nc, "probe.writes", 20)
        await asyncio.sleep(0.2)
        assert together * 3 < alone * 2, (together, alone)  # neighbouring turns share a write
        assert got == [str(i).encode() for i in range(20)] * 2
    finally:
        coalesce_writes(False)
        await sub.unsubscribe()
        await nc.close()
