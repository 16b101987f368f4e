"""The cluster harness keeps its promise of PostgreSQL views: without the binaries it stops at once,
saying so, and never runs the cluster suite or bench on SQLite behind their backs."""

from __future__ import annotations

from pathlib import Path

import pytest

from lockgate.operations import postgres
from lockgate.testing import cluster as harness
from lockgate.testing.cluster import ClusterSystem


class NoNode:
    """A cluster node that must not start."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("a node started though the views cannot be on PostgreSQL")


async def test_without_postgresql_nothing_starts_and_one_line_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(postgres, "available", lambda: False)
    monkeypatch.setattr(harness, "LocalCluster", NoNode)
    system = ClusterSystem(tmp_path)
    with pytest.raises(postgres.PostgresUnavailable) as raised:
        await system.start()
    message = str(raised.value)
    assert "\n" not in message and "apt-get install postgresql" in message
    assert (system.cluster, system.views, system.processes) == (None, None, {})
    assert "LOCKGATE_VIEWS_URL" not in system.extra_env
