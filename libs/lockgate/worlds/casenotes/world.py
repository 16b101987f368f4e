"""A simulated case system: tenants, cases, actors, notes, and a ledger of every write.

The world lives in a directory so several processes (an adapter worker, a test, the
CLI) can share it: one SQLite database (``world.db``, write-ahead log) holds cases,
actors, notes and the invocation count; every operation is one transaction, and a
write takes the database's write lock first (``BEGIN IMMEDIATE``) so concurrent
writers serialize instead of losing updates. The ledger is the notes table in write
order.

Demo seed (``World.seed``):

=================  =========  ==========================================================
case               tenant     state
=================  =========  ==========================================================
``case-123``       tenant-a   open
``case-closed``    tenant-a   closed
``case-frozen``    tenant-a   open, writes suspended
``case-contended`` tenant-a   open; its version moves before every write, as if a
                              concurrent writer always got there first, so every
                              conditional write to it is a version conflict
``case-sensitive`` tenant-a   open, sensitive: notes wait for a reviewer's approval
``case-load-NN``   tenant-a   open (``NN`` = 00..63), for load tests and benchmarks,
                              so concurrent notes need not contend for one version
``case-999``       tenant-b   open
=================  =========  ==========================================================

There is no ``case-404``. Actors: ``user-42`` (tenant-a, may add notes), ``user-13``
(tenant-a, may not), ``user-77`` (tenant-b, may). Every call presents the world's
credential (demo value ``DEMO_CREDENTIAL``); only its SHA-256 is stored, and neither
appears in the ledger or in anything returned.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lockgate.core.canonical import digest_bytes
from lockgate.worlds.storage import WorldError, WorldStore, credential_hash, opened_or_seeded

if TYPE_CHECKING:
    # Only its type: the CLI hands the output in (a world does not depend on the CLI).
    from lockgate.client.output import Output

DEMO_CREDENTIAL = "case-world-demo-secret-7f3a"
#: Open cases ``case-load-00`` .. for load tests, one per concurrent writer.
LOAD_CASES = 64


Clock = Callable[[], datetime]


class CaseWorldError(WorldError):
    """Root of the case world's refusals; ``reason`` is the stable code."""

    reason = "case.error"


class InvalidCredential(CaseWorldError):
    """The caller did not present the world's credential."""

    reason = "case.credential-invalid"


class CaseNotFound(CaseWorldError):
    """No case has this id."""

    reason = "case.not-found"


class TenantMismatch(CaseWorldError):
    """The case belongs to another tenant."""

    reason = "case.tenant-mismatch"


class CaseClosed(CaseWorldError):
    """The case is closed; it takes no more notes."""

    reason = "case.closed"


class WritesSuspended(CaseWorldError):
    """Writes to the case are suspended."""

    reason = "case.writes-suspended"


class NotAuthorized(CaseWorldError):
    """The actor may not add notes to this case."""

    reason = "case.note.not-authorized"


class VersionConflict(CaseWorldError):
    """The case's version is not the one the write was conditional on."""

    reason = "case.version-conflict"


#: Every reason code the world can raise, for the test that lists them.
REASONS: tuple[str, ...] = tuple(
    cls.reason
    for cls in (
        InvalidCredential,
        CaseNotFound,
        TenantMismatch,
        CaseClosed,
        WritesSuspended,
        NotAuthorized,
        VersionConflict,
    )
)


_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS cases (
    case_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, status TEXT NOT NULL,
    writes_suspended INTEGER NOT NULL, contended INTEGER NOT NULL,
    sensitive INTEGER NOT NULL, version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS actors (
    actor TEXT PRIMARY KEY, tenant TEXT NOT NULL, may_add_note INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS notes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, note_id TEXT UNIQUE NOT NULL,
    case_id TEXT NOT NULL, tenant TEXT NOT NULL, actor TEXT NOT NULL, text TEXT NOT NULL,
    version INTEGER NOT NULL, idempotency_key TEXT NOT NULL, intent_id TEXT NOT NULL,
    note_digest TEXT NOT NULL, at TEXT NOT NULL, UNIQUE (tenant, idempotency_key));
"""


def _demo_cases() -> list[tuple[str, str, str, int, int, int]]:
    """(case, tenant, status, writes_suspended, contended, sensitive) of the demo seed."""
    return [
        ("case-123", "tenant-a", "open", 0, 0, 0),
        ("case-closed", "tenant-a", "closed", 0, 0, 0),
        ("case-frozen", "tenant-a", "open", 1, 0, 0),
        ("case-contended", "tenant-a", "open", 0, 1, 0),
        ("case-sensitive", "tenant-a", "open", 0, 0, 1),
        *[(f"case-load-{n:02d}", "tenant-a", "open", 0, 0, 0) for n in range(LOAD_CASES)],
        ("case-999", "tenant-b", "open", 0, 0, 0),
    ]


_DEMO_ACTORS = [("user-42", "tenant-a", 1), ("user-13", "tenant-a", 0), ("user-77", "tenant-b", 1)]



def _now() -> datetime:
    return datetime.now(UTC)


class World:
    """One case world on disk, shared by every process that opens its directory."""

    def __init__(self, directory: Path | str, *, clock: Clock = _now) -> None:
        self.directory = Path(directory)
        self._store = WorldStore(self.directory, _SCHEMA, what="case world")
        self._clock = clock

    # -- lifecycle ---------------------------------------------------------------------

    @classmethod
    def seed(
        cls, directory: Path | str, *, credential: str = DEMO_CREDENTIAL, clock: Clock = _now
    ) -> World:
        """Write the demo seed into ``directory`` (replacing any state there) and open it."""
        world = cls(directory, clock=clock)
        world.directory.mkdir(parents=True, exist_ok=True)
        with world._write() as db:
            db.executescript(
                "DELETE FROM meta; DELETE FROM cases; DELETE FROM actors; DELETE FROM notes;"
                "DELETE FROM sqlite_sequence WHERE name = 'notes';"
            )
            db.executemany("INSERT INTO meta VALUES (?, ?)",
                           [("credential_sha256", credential_hash(credential)), ("invocations", "0")])
            db.executemany("INSERT INTO cases VALUES (?, ?, ?, ?, ?, ?, 1)", _demo_cases())
            db.executemany("INSERT INTO actors VALUES (?, ?, ?)", _DEMO_ACTORS)
        return world

    @classmethod
    def open_or_seed(
        cls, directory: Path | str, *, credential: str = DEMO_CREDENTIAL, clock: Clock = _now
    ) -> World:
        """Open the world in ``directory``, seeding it first when it has no state."""
        world = cls(directory, clock=clock)
        return opened_or_seeded(world.directory, world._write, world,
                                lambda: cls.seed(directory, credential=credential, clock=clock))

    # -- operations --------------------------------------------------------------------

    def case_facts(self, credential: str, tenant: str, actor: str, case_id: str) -> dict[str, Any]:
        """Return what is true of the case now, as seen by ``actor`` of ``tenant``.

        Raises:
            InvalidCredential: wrong credential.
        """
        with self._read() as db:
            self._authenticate(db, credential)
            case = _case(db, case_id)
            if case is None:
                return {
                    "exists": False,
                    "tenant": "",
                    "status": "",
                    "writes_suspended": False,
                    "version": 0,
                    "actor_may_add_note": False,
                    "sensitive": False,
                }
            return {
                "exists": True,
                "tenant": case["tenant"],
                "status": case["status"],
                "writes_suspended": bool(case["writes_suspended"]),
                "version": case["version"],
                "actor_may_add_note": _may_add_note(db, tenant, actor, case),
                "sensitive": bool(case["sensitive"]),
            }

    def add_note(
        self,
        credential: str,
        tenant: str,
        actor: str,
        case_id: str,
        note: str,
        expected_version: int,
        idempotency_key: str,
        intent_id: str,
    ) -> dict[str, str]:
        """Add ``note`` to the case if its version is still ``expected_version``.

        A repeated ``idempotency_key`` (per tenant) returns the original note's receipt
        and writes nothing.

        Returns:
            The receipt: ``note_id``, ``case_id``, ``version`` (after the write), as strings.

        Raises:
            InvalidCredential, CaseNotFound, TenantMismatch, NotAuthorized, CaseClosed,
            WritesSuspended, VersionConflict: nothing was written.
        """
        with self._write() as db:
            # Every call counts, failed ones too: tests count how often the world was reached.
            db.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'invocations'")
            try:
                return self._add_note(
                    db, credential, tenant, actor, case_id, note, expected_version,
                    idempotency_key, intent_id,
                )
            except CaseWorldError:
                db.commit()  # the refusal writes nothing but the count
                raise

    def _add_note(
        self,
        db: sqlite3.Connection,
        credential: str,
        tenant: str,
        actor: str,
        case_id: str,
        note: str,
        expected_version: int,
        idempotency_key: str,
        intent_id: str,
    ) -> dict[str, str]:
        self._authenticate(db, credential)
        existing = db.execute(
            "SELECT * FROM notes WHERE tenant = ? AND idempotency_key = ?", (tenant, idempotency_key)
        ).fetchone()
        if existing is not None:
            return _receipt(existing)
        case = _case(db, case_id)
        if case is None:
            raise CaseNotFound(f"no case {case_id!r}")
        if case["tenant"] != tenant:
            raise TenantMismatch(f"case {case_id!r} is not in tenant {tenant!r}")
        if not _may_add_note(db, tenant, actor, case):
            raise NotAuthorized(f"{actor!r} may not add notes to {case_id!r}")
        if case["status"] != "open":
            raise CaseClosed(f"case {case_id!r} is {case['status']}")
        if case["writes_suspended"]:
            raise WritesSuspended(f"writes to case {case_id!r} are suspended")
        version = case["version"]
        if case["contended"]:
            version += 1  # the concurrent writer that always wins
            db.execute("UPDATE cases SET version = ? WHERE case_id = ?", (version, case_id))
        if version != expected_version:
            raise VersionConflict(f"case {case_id!r} is at version {version}, not {expected_version}")
        version += 1
        db.execute("UPDATE cases SET version = ? WHERE case_id = ?", (version, case_id))
        (count,) = db.execute("SELECT COUNT(*) FROM notes").fetchone()
        note_id = f"note-{count + 1:06d}"
        db.execute(
            "INSERT INTO notes (note_id, case_id, tenant, actor, text, version, idempotency_key,"
            " intent_id, note_digest, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (note_id, case_id, tenant, actor, note, version, idempotency_key, intent_id,
             digest_bytes(note.encode()), self._clock().isoformat()),
        )
        return {"note_id": note_id, "case_id": case_id, "version": str(version)}

    def find_note(self, credential: str, tenant: str, idempotency_key: str) -> dict[str, str] | None:
        """Return the receipt of the note written with this key, or None.

        Raises:
            InvalidCredential: wrong credential.
        """
        with self._read() as db:
            self._authenticate(db, credential)
            row = db.execute(
                "SELECT * FROM notes WHERE tenant = ? AND idempotency_key = ?",
                (tenant, idempotency_key),
            ).fetchone()
            return None if row is None else _receipt(row)

    # -- inspection (tests, CLI) -------------------------------------------------------

    def ledger(self) -> list[dict[str, str]]:
        """Return every write the world accepted, oldest first."""
        with self._read() as db:
            rows = db.execute(
                "SELECT case_id, tenant, actor, note_digest, intent_id, idempotency_key, note_id, at"
                " FROM notes ORDER BY seq"
            ).fetchall()
            return [dict(row) for row in rows]

    @property
    def invocations(self) -> int:
        """How many times ``add_note`` was called, by any process, failed calls included."""
        with self._read() as db:
            (value,) = db.execute("SELECT value FROM meta WHERE key = 'invocations'").fetchone()
            return int(value)

    def notes(self, case_id: str) -> list[str]:
        """Return the texts of the notes on a case, oldest first."""
        with self._read() as db:
            rows = db.execute("SELECT text FROM notes WHERE case_id = ? ORDER BY seq", (case_id,))
            return [text for (text,) in rows]

    # -- storage -----------------------------------------------------------------------

    def _write(self) -> AbstractContextManager[sqlite3.Connection]:
        return self._store.write()

    def _read(self) -> AbstractContextManager[sqlite3.Connection]:
        return self._store.read()

    @staticmethod
    def _authenticate(db: sqlite3.Connection, credential: str) -> None:
        WorldStore.authenticate(db, credential, InvalidCredential)

def _case(db: sqlite3.Connection, case_id: str) -> sqlite3.Row | None:
    row: sqlite3.Row | None = db.execute("SELECT * FROM cases WHERE case_id = ?", (case_id,)).fetchone()
    return row


def _may_add_note(db: sqlite3.Connection, tenant: str, actor: str, case: sqlite3.Row) -> bool:
    who = db.execute("SELECT tenant, may_add_note FROM actors WHERE actor = ?", (actor,)).fetchone()
    return bool(who is not None and who["tenant"] == tenant == case["tenant"] and who["may_add_note"])


def _receipt(note: sqlite3.Row) -> dict[str, str]:
    return {"note_id": note["note_id"], "case_id": note["case_id"], "version": str(note["version"])}


def print_ledger(directory: Path | str, output: Output) -> None:
    """Print the ledger of the world in ``directory``: a table, or a JSON line per entry."""
    output.rows({"AT": _second, "CASE": "case_id", "TENANT": "tenant", "ACTOR": "actor",
                 "NOTE": "note_id", "INTENT": "intent_id"}, World(directory).ledger(),
                empty="no note written yet")


def _second(entry: Mapping[str, Any]) -> str:
    return str(entry.get("at") or "")[:19].replace("T", " ")
