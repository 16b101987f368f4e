"""Started by root, PostgreSQL runs as its own user: a data directory that user cannot
reach is refused up front, with what to do, not with initdb's bare "Permission denied"."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from lockgate.operations.postgres import PostgresUnavailable, _reachable

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="only root hands the server to another user")


def _nobody() -> pwd.struct_passwd:
    return pwd.getpwnam("nobody")


def _enters(directory: Path, user: pwd.struct_passwd) -> bool:
    """Whether ``user`` can list ``directory``: what initdb, run as that user, needs of its parents."""
    done = subprocess.run(["ls", str(directory)], user=user.pw_uid, group=user.pw_gid,
                          capture_output=True, timeout=30)
    return done.returncode == 0


@pytest.fixture
def server_root() -> Iterator[Path]:
    """A directory where the throwaway test servers put theirs: the system's temporary directory."""
    root = Path(tempfile.mkdtemp(prefix="lockgate-reach-"))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_closed_parent_is_named(server_root: Path) -> None:
    closed = server_root / "closed"
    (closed / "var").mkdir(parents=True)
    server_root.chmod(0o755)
    closed.chmod(0o700)
    with pytest.raises(PostgresUnavailable, match=r"chmod o\+x .*closed"):
        _reachable(closed / "var", _nobody())
    assert not _enters(closed / "var", _nobody())


def test_an_open_path_passes(server_root: Path) -> None:
    (server_root / "var").mkdir()
    server_root.chmod(0o755)
    (server_root / "var").chmod(0o755)
    _reachable(server_root / "var", _nobody())
    assert _enters(server_root / "var", _nobody())
