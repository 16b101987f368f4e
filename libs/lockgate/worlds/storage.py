"""The storage every simulated world shares: one SQLite database a directory, many processes.

An adapter worker, a test and the CLI may open the same world at once: the database
runs in write-ahead-log mode, every operation is one transaction, and a write takes
the write lock first (``BEGIN IMMEDIATE``) so concurrent writers serialize instead of
losing updates. WAL with ``synchronous = NORMAL`` survives a process crash (the fault
the worlds simulate); only a power loss may lose the last writes, which a simulated
world can afford.
"""

from __future__ import annotations

import hashlib
import hmac
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lockgate.core.errors import LockgateError

DB_FILE = "world.db"


class WorldError(LockgateError):
    """Root of a simulated world's refusals; each subclass names its stable ``reason``."""

    reason = "world.error"

    def __init__(self, message: str) -> None:
        super().__init__(message, code=self.reason)


def credential_hash(credential: str) -> str:
    """What a world stores of its credential: never the credential itself."""
    return hashlib.sha256(credential.encode()).hexdigest()


class WorldStore:
    """Connections to one world's database, created with ``schema`` on first use."""

    def __init__(self, directory: Path, schema: str, *, what: str) -> None:
        self.directory = directory
        self._schema = schema
        self._what = what

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.directory / DB_FILE, timeout=30.0, isolation_level=None)
        db.row_factory = sqlite3.Row
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = NORMAL")
        db.executescript(self._schema)
        return db

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, holding the database's write lock from its start."""
        self.directory.mkdir(parents=True, exist_ok=True)
        db = self._connect()
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                if db.in_transaction:
                    db.rollback()
                raise
            if db.in_transaction:
                db.commit()
        finally:
            db.close()

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A connection for reading.

        Raises:
            FileNotFoundError: the world was never seeded.
        """
        if not (self.directory / DB_FILE).exists():
            raise FileNotFoundError(f"no {self._what} in {self.directory} (seed it first)")
        db = self._connect()
        try:
            yield db
        finally:
            db.close()

    @staticmethod
    def authenticate(db: sqlite3.Connection, credential: str, refusal: type[LockgateError]) -> None:
        """Check the caller's credential against the stored hash, in constant time.

        Raises:
            refusal: the credential is wrong.
        """
        row = db.execute("SELECT value FROM meta WHERE key = 'credential_sha256'").fetchone()
        if row is None or not hmac.compare_digest(credential_hash(credential), row[0]):
            raise refusal("the world refused the credential")
