"""The whole system as real processes on a private broker, once per test module."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from lockgate.client.sdk import Gateway
from lockgate.testing.system import System, running
from lockgate.worlds.casenotes.world import World


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    """nats-server, the six services and the case-notes adapter, each its own process."""
    with running(System(tmp_path_factory.mktemp("system"))) as s:
        yield s


@pytest.fixture
async def gw(system: System) -> AsyncIterator[Gateway]:
    """Tenant A's agent runtime, and the trusted host that opens its runs: two users."""
    gateway = await system.gateway("tenant-a")
    try:
        yield gateway
    finally:
        await gateway.close()


@pytest.fixture
async def reviewer(system: System) -> AsyncIterator[Gateway]:
    """Alice, a reviewer of every tenant."""
    async with await system.person("reviewer-alice") as gateway:
        yield gateway


@pytest.fixture
async def operator(system: System) -> AsyncIterator[Gateway]:
    """Ops, an operator of every tenant."""
    async with await system.person("operator-ops") as gateway:
        yield gateway


@pytest.fixture
def world(system: System) -> World:
    """The case-notes world the adapter acts on, read from the test process."""
    return World(system.world_dir)
