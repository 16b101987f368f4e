"""The whole system as real processes on a private broker, once per test module."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest

from lockgate.client.sdk import Gateway
from lockgate.testing.system import System
from lockgate.worlds.casenotes.world import World


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    """nats-server, the six services and the case-notes adapter, each its own process."""
    s = System(tmp_path_factory.mktemp("system"))
    try:
        asyncio.run(s.start())
        yield s
        # Every service did only what its row of the role table grants it.
        assert s.violations() == []
    finally:
        s.stop()


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
    gateway = await system.person("reviewer-alice")
    try:
        yield gateway
    finally:
        await gateway.close()


@pytest.fixture
async def operator(system: System) -> AsyncIterator[Gateway]:
    """Ops, an operator of every tenant."""
    gateway = await system.person("operator-ops")
    try:
        yield gateway
    finally:
        await gateway.close()


@pytest.fixture
def world(system: System) -> World:
    """The case-notes world the adapter acts on, read from the test process."""
    return World(system.world_dir)
