"""Started by root, PostgreSQL runs as its own user: a data directory that user cannot
reach is refused up front, with what to do, not with initdb's bare "Permission denied"."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

from lockgate.runtime.postgres import PostgresUnavailable, _reachable

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="only root hands the server to another user")


def _nobody() -> pwd.struct_passwd:
    return pwd.getpwnam("nobody")


def test_a_closed_parent_is_named(tmp_path: Path) -> None:
    closed = tmp_path / "closed"
    (closed / "var").mkdir(parents=True)
    closed.chmod(0o700)
    with pytest.raises(PostgresUnavailable, match=r"chmod o\+x .*closed"):
        _reachable(closed / "var", _nobody())


def test_an_open_path_passes(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    for d in tmp_path.parents:
        if not d.stat().st_mode & 0o001:
            pytest.skip(f"{d} is closed to others on this machine")
    _reachable(tmp_path, _nobody())
