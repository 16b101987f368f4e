"""The role table on three events partitions, enforced by a real nats-server.

Each role reaches every partition for what it does, and nothing else: policy appends its
decision to any partition but no other event type and nothing under the one-stream layout;
it pulls its own durable on each partition, not another service's; an agent touches no
partition; the projector reads them and cannot purge.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from nats.errors import TimeoutError as NatsTimeout

from lockgate.eventstore.partitions import Partitions
from lockgate.eventstore.subjects import event_subject
from lockgate.operations.natsserver import NatsServer
from lockgate.operations.roles import demo_users, render_accounts
from lockgate.runtime.topology import ensure_topology

PARTITIONS = Partitions(3)
USERS = demo_users(("tenant-a",), partitions=PARTITIONS)
INTENT = "0" * 32


@pytest.fixture
def server(tmp_path: Path) -> Iterator[NatsServer]:
    with NatsServer(store_dir=tmp_path / "nats", config_text=render_accounts(USERS)) as s:
        yield s


Login = Callable[[str], Awaitable[tuple[Client, list[str]]]]


@pytest.fixture
async def login(server: NatsServer) -> AsyncIterator[Login]:
    opened: list[Client] = []

    async def connect(user: str) -> tuple[Client, list[str]]:
        role, password = USERS[user]
        violations: list[str] = []

        async def on_error(exc: Exception) -> None:
            if "permissions violation" in str(exc):
                violations.append(str(exc))

        nc = await nats.connect(server.url, user=user, password=password, inbox_prefix=role.inbox_prefix,
                                error_cb=on_error, max_reconnect_attempts=0)
        opened.append(nc)
        return nc, violations

    admin, _ = await connect("admin")
    await ensure_topology(admin.jetstream(), partitions=PARTITIONS)
    yield connect
    for nc in opened:
        await nc.close()


async def refused(nc: Client, violations: list[str], subject: str, body: bytes = b"{}") -> bool:
    """Publish ``subject`` and say whether the server called it a violation within a second."""
    violations.clear()
    with contextlib.suppress(NatsTimeout, asyncio.TimeoutError):
        await nc.request(subject, body, timeout=0.5)
    await nc.flush()
    for _ in range(50):
        if any(f'"{subject.lower()}"' in v for v in violations):
            return True
        await asyncio.sleep(0.02)
    return False


async def test_policy_appends_its_decision_in_every_partition_and_nothing_else(login: Login) -> None:
    nc, violations = await login("policy")
    js = nc.jetstream()
    for p in PARTITIONS:
        decided = event_subject("tenant-a", INTENT, 1, "PolicyDecided", "allow", prefix=p.prefix)
        ack = await js.publish(decided, b"{}", headers={"Nats-Msg-Id": f"d-{p.index}"})
        assert ack.stream == p.stream
        assert await refused(nc, violations, event_subject("tenant-a", INTENT, 2, "CandidateReceived",
                                                           prefix=p.prefix))
    # The one-stream layout is no partition's: nothing is granted under it.
    assert await refused(nc, violations, event_subject("tenant-a", INTENT, 1, "PolicyDecided", "allow"))


async def test_a_service_pulls_its_own_durable_on_each_partition_only(login: Login) -> None:
    nc, violations = await login("policy")
    pull = json.dumps({"batch": 1, "no_wait": True}).encode()
    for p in PARTITIONS:
        assert not await refused(nc, violations, f"$JS.API.CONSUMER.MSG.NEXT.{p.stream}.policy", pull)
        assert await refused(nc, violations, f"$JS.API.CONSUMER.MSG.NEXT.{p.stream}.executor", pull)


async def test_the_edge_and_the_projector_reach_no_further(login: Login) -> None:
    agent, violations = await login("agent-tenant-a")
    for p in PARTITIONS:
        assert await refused(agent, violations, event_subject("tenant-a", INTENT, 1, "CandidateReceived",
                                                              prefix=p.prefix))
    projector, violations = await login("projector")
    for p in PARTITIONS:
        assert not await refused(projector, violations, f"$JS.API.DIRECT.GET.{p.stream}",
                                 b'{"seq": 1, "next_by_subj": "lg.evt.>", "batch": 1}')
        assert await refused(projector, violations, f"$JS.API.STREAM.PURGE.{p.stream}")
