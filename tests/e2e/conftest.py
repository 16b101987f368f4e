"""The whole system as real processes on a private broker, once per test module."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest

import lockgate.client
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
    finally:
        s.stop()


@pytest.fixture
async def gw(system: System) -> AsyncIterator[Gateway]:
    """An agent runtime's (and trusted host's) connection."""
    gateway = await lockgate.client.connect(system.url)
    try:
        yield gateway
    finally:
        await gateway.close()


@pytest.fixture
def world(system: System) -> World:
    """The case-notes world the adapter acts on, read from the test process."""
    return World(system.world_dir)
