"""Publishes of one loop turn share a socket write, and arrive whole and in order; requests
on a timer are answered, time out and are forgotten as nats-py's own."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator

import nats
import nats.aio.msg
import nats.errors
import pytest
from nats.aio.client import Client

from lockgate.operations.natsserver import NatsServer
from lockgate.runtime.natsclient import coalesce_writes, parse_headers_faster, timed_requests


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

    transport.writelines = counted  # type: ignore[method-assign,assignment]

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


@pytest.fixture
def timed() -> Iterator[None]:
    was = timed_requests(False)
    assert timed_requests(True)
    yield
    timed_requests(was)


async def test_requests_on_a_timer_are_answered_time_out_and_leave_nothing_behind(
    nats_server: NatsServer, timed: None,
) -> None:
    nc = await nats.connect(nats_server.url)

    async def echo(msg: nats.aio.msg.Msg) -> None:
        await msg.respond(msg.data + (msg.headers or {}).get("X-Tag", "").encode())

    async def quiet(msg: nats.aio.msg.Msg) -> None:
        return None

    subs = [await nc.subscribe("probe.echo", cb=echo), await nc.subscribe("probe.quiet", cb=quiet)]
    try:
        replies = await asyncio.gather(*(
            nc.request("probe.echo", str(i).encode(), timeout=2, headers={"X-Tag": "!"})
            for i in range(20)))
        assert [r.data for r in replies] == [f"{i}!".encode() for i in range(20)]
        # Each request's timer is its own: the later, shorter one times out first, never early,
        # while the earlier, longer one still waits.
        started = time.monotonic()
        longer = asyncio.create_task(nc.request("probe.quiet", b"", timeout=30))
        shorter = asyncio.create_task(nc.request("probe.quiet", b"", timeout=0.2))
        done, _ = await asyncio.wait([longer, shorter], timeout=30, return_when=asyncio.FIRST_COMPLETED)
        assert done == {shorter}
        assert isinstance(shorter.exception(), nats.errors.TimeoutError)
        assert time.monotonic() - started > 0.15
        longer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await longer
        with pytest.raises(nats.errors.NoRespondersError):
            await nc.request("probe.nobody", b"", timeout=2)
        cancelled = asyncio.create_task(nc.request("probe.quiet", b"", timeout=5))
        await asyncio.sleep(0.05)
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        assert nc._resp_map == {}  # noqa: SLF001 - every request left the response map
    finally:
        for sub in subs:
            await sub.unsubscribe()
        await nc.close()


@pytest.fixture
def every_change() -> Iterator[None]:
    was = (coalesce_writes(False), parse_headers_faster(False), timed_requests(False))
    assert coalesce_writes(True) and parse_headers_faster(True) and timed_requests(True)
    yield
    coalesce_writes(was[0])
    parse_headers_faster(was[1])
    timed_requests(was[2])


async def until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def test_a_client_that_lost_its_server_writes_what_it_kept_once_back(
    fresh_server: NatsServer, every_change: None,
) -> None:
    nc = await nats.connect(fresh_server.url, reconnect_time_wait=0.1, max_reconnect_attempts=-1)
    got: list[bytes] = []

    async def heard(msg: nats.aio.msg.Msg) -> None:
        got.append(msg.data)

    async def echo(msg: nats.aio.msg.Msg) -> None:
        await msg.respond(msg.data)

    await nc.subscribe("probe.kept", cb=heard)
    await nc.subscribe("probe.echo", cb=echo)
    try:
        await nc.publish("probe.kept", b"before", headers={"X-Tag": "1"})
        await until(lambda: got == [b"before"])
        fresh_server.stop()
        await until(lambda: not nc.is_connected)
        await nc.publish("probe.kept", b"during")  # kept in the buffer meanwhile
        fresh_server.start()
        await until(lambda: nc.is_connected)
        await nc.publish("probe.kept", b"after")
        await until(lambda: got == [b"before", b"during", b"after"])
        assert (await nc.request("probe.echo", b"again", timeout=5)).data == b"again"
    finally:
        await nc.close()
