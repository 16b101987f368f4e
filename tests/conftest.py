"""Fixtures shared by every suite: a real nats-server on an ephemeral loopback port."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client

from lockgate.runtime.natsserver import NatsServer


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """A JetStream server for the whole session, in a temporary store directory."""
    server = NatsServer(store_dir=tmp_path_factory.mktemp("nats"))
    with server:
        yield server


@pytest.fixture
async def nc(nats_server: NatsServer) -> AsyncIterator[Client]:
    """A client connection to the session's server."""
    client = await nats.connect(nats_server.url, max_reconnect_attempts=2)
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
def fresh_server(tmp_path: Path) -> Iterator[NatsServer]:
    """A server of the test's own, for tests that restart or kill it."""
    server = NatsServer(store_dir=tmp_path / "nats")
    with server:
        yield server
