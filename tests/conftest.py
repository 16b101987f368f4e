"""Fixtures shared by every suite: a real nats-server on an ephemeral loopback port, and the
one rule for a test whose prerequisite this machine lacks."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client

from lockgate.operations import postgres
from lockgate.operations.natsserver import NatsServer

#: Values of ``CI`` that mean "not a CI run"; any other (true, 1, yes, a service's name) means one.
_NOT_CI = frozenset({"", "0", "false"})


def in_ci() -> bool:
    """Whether this is a CI run: ``CI`` set to anything but empty, 0 or false."""
    return os.environ.get("CI", "").strip().lower() not in _NOT_CI


def require(condition: bool, why: str) -> None:
    """Go on if ``condition`` holds; otherwise fail in CI and skip, loudly, anywhere else.

    Every test that cannot run without something this machine may lack (a browser, PostgreSQL,
    user namespaces) decides here, so a CI run never passes by skipping what it was meant to run.
    """
    if condition:
        return
    if in_ci():
        pytest.fail(f"CI must run this test: {why}", pytrace=False)
    pytest.skip(f"NOT RUN on this machine (CI would fail here): {why}")


def require_postgres() -> None:
    """PostgreSQL's server binaries, which the tests start a throwaway server from (``require``'s rule)."""
    require(postgres.available(), "PostgreSQL's server binaries (initdb, pg_ctl) are not installed: "
            "`make test` installs them as root (apt-get install postgresql)")


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
