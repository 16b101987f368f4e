"""Who writes the views: one projector at a time per views store, the others standing by.

The projection applies the stream in order (its tracking is one position per store, as
the library's tracking recorders keep it), so two writers on one store would race for
each position. Replicas therefore take turns: each asks for the store's lease, one
holds it and projects, the rest wait and ask again. The lease is a lock the operating
system or the database releases when its holder dies, however it dies: an exclusive
``flock`` on a file beside the SQLite database, a session-level advisory lock on
PostgreSQL. A standby takes over within one poll of the holder's death, and starts
from the position the views recorded, so nothing is applied twice or skipped.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Any, Protocol

from lockgate.views.store import sqlite_path

#: The advisory lock's key on PostgreSQL (any constant; this one spells "lockgate").
ADVISORY_KEY = 0x6C6F636B67617465


class Lease(Protocol):
    """A lock on one views store."""

    def try_acquire(self) -> bool:
        """Take the lease if nobody holds it; True when this process holds it now."""

    def release(self) -> None:
        """Give the lease up (also done by the OS or the database when the process dies)."""


class FileLease:
    """An exclusive ``flock`` on ``<views file>.lease``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def try_acquire(self) -> bool:
        if self._fd is not None:
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the lock
            self._fd = None


class AdvisoryLease:
    """``pg_try_advisory_lock`` held on a connection of its own."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._conn: Any = None

    def try_acquire(self) -> bool:
        import psycopg

        if self._conn is not None and not self._conn.closed:
            return True
        conn = psycopg.connect(self.url, autocommit=True, connect_timeout=5)
        row = conn.execute("SELECT pg_try_advisory_lock(%s)", (ADVISORY_KEY,)).fetchone()
        if row is None or not row[0]:
            conn.close()
            return False
        self._conn = conn
        return True

    def release(self) -> None:
        if self._conn is not None:
            self._conn.close()  # the session's end releases its advisory locks
            self._conn = None


def lease_for(url: str, var_dir: Path) -> Lease:
    """The lease of the views store at ``url`` (``open_views``'s URLs)."""
    if url.startswith(("postgresql://", "postgres://")):
        return AdvisoryLease(url)
    path = Path(url.removeprefix("sqlite:///")) if url else sqlite_path(var_dir)
    return FileLease(path.with_name(path.name + ".lease"))
