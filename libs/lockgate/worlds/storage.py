"""The storage every simulated world shares: one SQLite database a directory, many processes.

An adapter worker, a test and the CLI may open the same world at once: the database
runs in write-ahead-log mode, every operation is one transaction, and a write takes
the write lock first (``BEGIN IMMEDIATE``) so concurrent writers serialize instead of
losing updates. WAL with ``synchronous = NORMAL`` survives a process crash (the fault
the worlds simulate); only a power loss may lose the last writes, which a simulated
world can afford.

Each thread keeps its connection (an adapter's calls run on a few worker threads):
opening SQLite and running the schema on every call cost more than the call itself.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TypeVar

from lockgate.core.errors import LockgateError

DB_FILE = "world.db"


@contextmanager
def seeding(directory: Path) -> Iterator[None]:
    """Hold the directory's seed lock: whether a world is seeded, and seeding it, is one
    step for every process that opens it (two replicas of an adapter start together;
    the repository world's seed also writes a checkout outside the database, which two
    seeds at once tore apart)."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".seed.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


W = TypeVar("W")


def opened_or_seeded(
    directory: Path, write: Callable[[], AbstractContextManager[sqlite3.Connection]], opened: W,
    seed: Callable[[], W],
) -> W:
    """``opened`` when the world in ``directory`` has its seed, else ``seed()``: under the
    seed lock, so of replicas starting together exactly one seeds."""
    with seeding(directory):
        with write() as db:
            seeded = db.execute("SELECT 1 FROM meta WHERE key = 'credential_sha256'").fetchone()
        return opened if seeded else seed()


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
        self._local = threading.local()

    def _connect(self) -> sqlite3.Connection:
        """This thread's connection, opened (and the schema made) on its first use."""
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is not None:
            return db
        db = sqlite3.connect(self.directory / DB_FILE, timeout=30.0, isolation_level=None)
        db.row_factory = sqlite3.Row
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = NORMAL")
        db.executescript(self._schema)
        self._local.db = db
        return db

    def _drop(self) -> None:
        """Forget this thread's connection (the database went away under it)."""
        db = getattr(self._local, "db", None)
        self._local.db = None
        if db is not None:
            db.close()

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, holding the database's write lock from its start."""
        self.directory.mkdir(parents=True, exist_ok=True)
        if not (self.directory / DB_FILE).exists():
            self._drop()  # removed since: a connection would write to a file nobody sees
        db = self._connect()
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            if db.in_transaction:
                db.rollback()
            raise
        if db.in_transaction:
            db.commit()

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A connection for reading.

        Raises:
            FileNotFoundError: the world was never seeded.
        """
        if not (self.directory / DB_FILE).exists():
            self._drop()
            raise FileNotFoundError(f"no {self._what} in {self.directory} (seed it first)")
        db = self._connect()
        try:
            yield db
        finally:
            if db.in_transaction:
                db.rollback()  # a read leaves nothing open on a connection that is kept

    @staticmethod
    def authenticate(db: sqlite3.Connection, credential: str, refusal: type[LockgateError]) -> None:
        """Check the caller's credential against the stored hash, in constant time.

        Raises:
            refusal: the credential is wrong.
        """
        row = db.execute("SELECT value FROM meta WHERE key = 'credential_sha256'").fetchone()
        if row is None or not hmac.compare_digest(credential_hash(credential), row[0]):
            raise refusal("the world refused the credential")
