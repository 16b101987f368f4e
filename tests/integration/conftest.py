"""Fixtures the integration tests share."""

from __future__ import annotations

import pytest
from nats.aio.client import Client

from lockgate.runtime.context import MemoryPorts, Ports, ports_for
from lockgate.runtime.settings import Settings


@pytest.fixture(params=["memory", "nats"])
async def ports(request: pytest.FixtureRequest, nc: Client) -> Ports:
    """Each port's contract over both implementations: the in-memory fakes, and the broker's
    (the topology made on the test's server). A module whose ports need more (a clock, a
    registry that forgets) defines its own ``ports``."""
    if request.param == "memory":
        return MemoryPorts.create()
    return await ports_for(nc, Settings(manage_topology=True))
