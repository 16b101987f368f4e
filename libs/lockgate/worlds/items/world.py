"""Two ``create_item`` servers behind one schema: a private-draft server and a publisher.

Both servers take the same request (space, title, body) and differ in everything
that matters once the response may be lost:

- **server P** creates a *private draft*, keyed by the caller's idempotency key: a
  repeated key returns the same draft and writes nothing, so a retry is harmless.
- **server Q** *publishes* at once and notifies every subscriber of the space. It is
  not idempotent — every call is a new publication and a new round of notifications —
  but it records the caller's client reference, so a caller can ask afterwards
  whether its publication happened (``find_publication``).

The world lives in a directory so several processes (an adapter worker, a test, the
CLI) can share it: one SQLite database (``world.db``, write-ahead log); every
operation is one transaction, and a write takes the write lock first
(``BEGIN IMMEDIATE``) so concurrent writers serialize instead of losing updates.

Faults are armed in the same database, so a test in one process can arm them for the
adapter worker in another (``World.inject``); each armed fault is consumed by one call:

=======================  ===================================================================
fault                    what happens
=======================  ===================================================================
``drop_response``        the world call commits (effect, or refusal), then raises
                         ``ResponseLost``: the caller never learns what happened
``crash_after_send``     the adapter dies (exit 137) right after its send boundary,
                         before calling the world
``crash_after_commit``   the world commits, then the adapter dies before reporting
``fail_before_send``     the adapter gives up before its send boundary
``query_unavailable``    a query by identity gets no answer (``finding: unknown``): an
                         unknown outcome stays unknown, for an operator to settle
``stall_before_write``   the adapter's write, past its send boundary, stalls until after
                         the attempt's deadline before it reaches the server (a process
                         frozen between its crossing and its write): by then the outcome
                         is unknown and a retry may have written; the server refuses the
                         late write (``WriteTooLate``)
=======================  ===================================================================

Both servers take the latest moment a write may take effect (``not_after``, the
attempt's deadline as the adapter SDK hands it over) and refuse one that reaches them
later, without writing: so an attempt the executor no longer waits for cannot land
beside the retry a query found it absent for.

Only ``drop_response`` is consumed by the world itself; the adapter takes the others
with ``take_fault``. ``lockgate world fault items <fault> --server P|Q`` arms one.

Demo seed (``World.seed``):

==================  =========  ================================================
space               tenant     state
==================  =========  ================================================
``space-1``         tenant-a   open; 3 subscribers
``space-archived``  tenant-a   archived: takes no new items
``space-9``         tenant-b   open; 1 subscriber
==================  =========  ================================================

Actors: ``user-42`` (tenant-a, may create items), ``user-13`` (tenant-a, may not),
``user-77`` (tenant-b, may). Every operation presents the world's credential (demo
value ``DEMO_CREDENTIAL``); only its SHA-256 is stored, and neither appears in a
ledger or in anything returned.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lockgate.core.canonical import digest_bytes
from lockgate.worlds.items import world_tables as tables
from lockgate.worlds.items.world_errors import (
    REASONS,
    InvalidCredential,
    ItemsWorldError,
    NotAuthorized,
    ResponseLost,
    SpaceArchived,
    SpaceNotFound,
    TenantMismatch,
    WriteTooLate,
)
from lockgate.worlds.items.world_seed import DEMO_ACTORS, DEMO_SPACES, DEMO_SUBSCRIBERS
from lockgate.worlds.storage import WorldStore, credential_hash, opened_or_seeded

if TYPE_CHECKING:
    # Only its type: the CLI hands the output in (a world does not depend on the CLI).
    from lockgate.client.output import Output

__all__ = [
    "DEMO_CREDENTIAL", "FAULTS", "REASONS", "SERVERS", "Clock", "InvalidCredential",
    "ItemsWorldError", "NotAuthorized", "ResponseLost", "SpaceArchived", "SpaceNotFound",
    "TenantMismatch", "World", "WriteTooLate", "print_ledger",
]


DEMO_CREDENTIAL = "items-world-demo-secret-2c9d"

#: The two servers: P prepares private drafts, Q publishes.
SERVERS: tuple[str, ...] = ("P", "Q")
#: Faults ``World.inject`` can arm. ``query_unavailable`` makes the next queries by
#: identity inconclusive, so an unknown outcome stays unknown until an operator settles it.
FAULTS: tuple[str, ...] = (
    "drop_response",
    "crash_after_send",
    "crash_after_commit",
    "fail_before_send",
    "query_unavailable",
    "stall_before_write",
)

Clock = Callable[[], datetime]


def _now() -> datetime:
    return datetime.now(UTC)


def _check_server(server: str) -> None:
    if server not in SERVERS:
        raise ValueError(f"unknown server {server!r}; known: {', '.join(SERVERS)}")


class World:
    """One items world on disk, shared by every process that opens its directory."""

    def __init__(self, directory: Path | str, *, clock: Clock = _now) -> None:
        self.directory = Path(directory)
        self._store = WorldStore(self.directory, tables.SCHEMA, what="items world")
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
            for table in tables.TABLES:
                db.execute(f"DELETE FROM {table}")  # fixed names, not input
            db.execute(
                "DELETE FROM sqlite_sequence WHERE name IN ('drafts', 'publications', 'notifications')"
            )
            db.execute("INSERT INTO meta VALUES ('credential_sha256', ?)", (credential_hash(credential),))
            db.executemany("INSERT INTO spaces VALUES (?, ?, ?, 1)", DEMO_SPACES)
            db.executemany("INSERT INTO actors VALUES (?, ?, ?)", DEMO_ACTORS)
            db.executemany("INSERT INTO subscribers VALUES (?, ?)", DEMO_SUBSCRIBERS)
            db.executemany("INSERT INTO invocations VALUES (?, 0)", [(s,) for s in SERVERS])
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

    def space_facts(
        self, credential: str, tenant: str, actor: str, space_id: str
    ) -> dict[str, str | int | bool]:
        """Return what is true of the space now, as seen by ``actor`` of ``tenant``.

        Raises:
            InvalidCredential: wrong credential.
        """
        with self._read() as db:
            self._authenticate(db, credential)
            space = tables.space_row(db, space_id)
            if space is None:
                return {"exists": False, "tenant": "", "status": "", "actor_may_create": False,
                        "sensitive": False, "version": 0}
            return {
                "exists": True,
                "tenant": space["tenant"],
                "status": space["status"],
                "actor_may_create": tables.may_create(db, tenant, actor, space),
                "sensitive": False,
                "version": space["version"],
            }

    def create_draft(
        self,
        credential: str,
        tenant: str,
        actor: str,
        space_id: str,
        title: str,
        body: str,
        idempotency_key: str,
        intent_id: str,
        not_after: datetime | None = None,
    ) -> dict[str, str]:
        """Server P: create a private draft, once per ``idempotency_key`` (per tenant).

        A repeated key returns the first draft's receipt and writes nothing. Nobody is
        notified and the space's version does not move: a draft is private.

        Returns:
            The receipt: ``draft_id``, ``space_id``, ``idempotency_key``.

        Raises:
            InvalidCredential, SpaceNotFound, TenantMismatch, NotAuthorized, SpaceArchived,
            WriteTooLate: nothing was written.
            ResponseLost: an injected ``drop_response``; the call committed.
        """

        def create(db: sqlite3.Connection) -> dict[str, str]:
            self._authenticate(db, credential)
            self._in_time(not_after)
            existing = db.execute(
                "SELECT * FROM drafts WHERE tenant = ? AND idempotency_key = ?",
                (tenant, idempotency_key),
            ).fetchone()
            if existing is not None:
                return tables.draft_receipt(existing)
            tables.check_may_create(db, tenant, actor, space_id)
            (count,) = db.execute("SELECT COUNT(*) FROM drafts").fetchone()
            draft_id = f"draft-{count + 1:06d}"
            db.execute(
                "INSERT INTO drafts (draft_id, space_id, tenant, actor, title, body,"
                " idempotency_key, intent_id, title_digest, body_digest, at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (draft_id, space_id, tenant, actor, title, body, idempotency_key, intent_id,
                 digest_bytes(title.encode()), digest_bytes(body.encode()),
                 self._clock().isoformat()),
            )
            return {"draft_id": draft_id, "space_id": space_id,
                    "idempotency_key": idempotency_key}

        return self._invoke("P", create)

    def publish(
        self,
        credential: str,
        tenant: str,
        actor: str,
        space_id: str,
        title: str,
        body: str,
        client_ref: str,
        intent_id: str,
        not_after: datetime | None = None,
    ) -> dict[str, str]:
        """Server Q: publish an item now and notify every subscriber of the space.

        Not idempotent: every call is a new publication and a new notification per
        subscriber, whatever ``client_ref`` says. The reference is only recorded, so
        ``find_publication`` can answer later. Publishing moves the space's version.

        Returns:
            The receipt: ``publication_id``, ``space_id``, ``client_ref``, ``notified``
            (how many subscribers were notified), as strings.

        Raises:
            InvalidCredential, SpaceNotFound, TenantMismatch, NotAuthorized, SpaceArchived,
            WriteTooLate: nothing was written.
            ResponseLost: an injected ``drop_response``; the call committed.
        """

        def publish(db: sqlite3.Connection) -> dict[str, str]:
            self._authenticate(db, credential)
            self._in_time(not_after)
            tables.check_may_create(db, tenant, actor, space_id)
            at = self._clock().isoformat()
            title_digest = digest_bytes(title.encode())
            (count,) = db.execute("SELECT COUNT(*) FROM publications").fetchone()
            publication_id = f"pub-{count + 1:06d}"
            subscribers = [
                s for (s,) in db.execute(
                    "SELECT subscriber FROM subscribers WHERE space_id = ? ORDER BY subscriber",
                    (space_id,),
                )
            ]
            db.execute(
                "INSERT INTO publications (publication_id, space_id, tenant, actor, title, body,"
                " client_ref, intent_id, title_digest, body_digest, notified, at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (publication_id, space_id, tenant, actor, title, body, client_ref, intent_id,
                 title_digest, digest_bytes(body.encode()), len(subscribers), at),
            )
            (sent,) = db.execute("SELECT COUNT(*) FROM notifications").fetchone()
            db.executemany(
                "INSERT INTO notifications (notification_id, publication_id, subscriber,"
                " space_id, tenant, actor, client_ref, intent_id, title_digest, at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (f"ntf-{sent + n:06d}", publication_id, subscriber, space_id, tenant, actor,
                     client_ref, intent_id, title_digest, at)
                    for n, subscriber in enumerate(subscribers, start=1)
                ],
            )
            db.execute("UPDATE spaces SET version = version + 1 WHERE space_id = ?", (space_id,))
            return {"publication_id": publication_id, "space_id": space_id,
                    "client_ref": client_ref, "notified": str(len(subscribers))}

        return self._invoke("Q", publish)

    def find_draft(self, credential: str, tenant: str, idempotency_key: str) -> dict[str, str] | None:
        """Return the receipt of the draft created with this key, or None.

        Raises:
            InvalidCredential: wrong credential.
        """
        with self._read() as db:
            self._authenticate(db, credential)
            row = db.execute(
                "SELECT * FROM drafts WHERE tenant = ? AND idempotency_key = ?",
                (tenant, idempotency_key),
            ).fetchone()
            return None if row is None else tables.draft_receipt(row)

    def find_publication(
        self, credential: str, tenant: str, client_ref: str
    ) -> dict[str, str] | None:
        """Return the receipt of the first publication with this client reference, or None.

        Q does not deduplicate, so there may be more than one; ``publications()`` shows all.

        Raises:
            InvalidCredential: wrong credential.
        """
        with self._read() as db:
            self._authenticate(db, credential)
            row = db.execute(
                "SELECT * FROM publications WHERE tenant = ? AND client_ref = ? ORDER BY seq",
                (tenant, client_ref),
            ).fetchone()
            if row is None:
                return None
            return {"publication_id": row["publication_id"], "space_id": row["space_id"],
                    "client_ref": row["client_ref"], "notified": str(row["notified"])}

    # -- fault injection (tests, operators) --------------------------------------------

    def inject(self, server: str, fault: str, times: int = 1) -> None:
        """Arm ``fault`` for the next ``times`` calls of ``server`` (added to any armed).

        Raises:
            ValueError: unknown server or fault, or ``times`` < 1.
        """
        _check_server(server)
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; known: {', '.join(FAULTS)}")
        if times < 1:
            raise ValueError("times must be at least 1")
        with self._write() as db:
            db.execute(
                "INSERT INTO faults VALUES (?, ?, ?) ON CONFLICT (server, fault)"
                " DO UPDATE SET remaining = remaining + excluded.remaining",
                (server, fault, times),
            )

    def take_fault(self, server: str, fault: str) -> bool:
        """Consume one armed ``fault`` of ``server``; True if one was armed.

        Atomic across processes: of two callers racing for the last one, one gets it.
        """
        _check_server(server)
        with self._read() as db:
            # A cheap look without the write lock first: nearly every call finds nothing.
            armed = db.execute(
                "SELECT 1 FROM faults WHERE server = ? AND fault = ? AND remaining > 0",
                (server, fault),
            ).fetchone()
        if armed is None:
            return False
        with self._write() as db:
            return tables.take_fault(db, server, fault)

    def faults(self) -> list[dict[str, str | int]]:
        """Return the faults still armed: ``server``, ``fault``, ``remaining``."""
        with self._read() as db:
            rows = db.execute(
                "SELECT server, fault, remaining FROM faults WHERE remaining > 0"
                " ORDER BY server, fault"
            ).fetchall()
            return [dict(row) for row in rows]

    def clear_faults(self) -> None:
        """Disarm every fault."""
        with self._write() as db:
            db.execute("DELETE FROM faults")

    # -- inspection (tests, CLI) -------------------------------------------------------

    def drafts(self) -> list[dict[str, str]]:
        """Return every draft server P created, oldest first."""
        return self._rows(
            "SELECT draft_id, space_id, tenant, actor, idempotency_key, intent_id, title_digest,"
            " body_digest, at FROM drafts ORDER BY seq"
        )

    def publications(self) -> list[dict[str, str]]:
        """Return every publication server Q made, oldest first (duplicates included)."""
        return self._rows(
            "SELECT publication_id, space_id, tenant, actor, client_ref, intent_id, title_digest,"
            " body_digest, CAST(notified AS TEXT) AS notified, at FROM publications ORDER BY seq"
        )

    def notifications(self) -> list[dict[str, str]]:
        """Return every notification server Q sent, oldest first."""
        return self._rows(
            "SELECT notification_id, publication_id, subscriber, space_id, tenant, actor,"
            " client_ref, intent_id, title_digest, at FROM notifications ORDER BY seq"
        )

    def invocations(self, server: str) -> int:
        """How often ``server``'s write operation was called, by any process, failures included."""
        _check_server(server)
        with self._read() as db:
            row = db.execute("SELECT count FROM invocations WHERE server = ?", (server,)).fetchone()
            return 0 if row is None else int(row[0])

    def items(self, space_id: str) -> list[str]:
        """Return the titles published to a space, oldest first (drafts are private)."""
        with self._read() as db:
            rows = db.execute(
                "SELECT title FROM publications WHERE space_id = ? ORDER BY seq", (space_id,)
            )
            return [title for (title,) in rows]

    # -- storage -----------------------------------------------------------------------

    def _invoke(
        self, server: str, operation: Callable[[sqlite3.Connection], dict[str, str]]
    ) -> dict[str, str]:
        """Run one write operation of ``server``: counted, fault-aware, one transaction."""
        refusal: ItemsWorldError | None = None
        receipt: dict[str, str] = {}
        with self._write() as db:
            # Every call counts, refused ones too: tests count how often the world was reached.
            db.execute("UPDATE invocations SET count = count + 1 WHERE server = ?", (server,))
            dropped = tables.take_fault(db, server, "drop_response")
            try:
                receipt = operation(db)
            except ItemsWorldError as exc:
                refusal = exc  # it wrote nothing; the count and the fault still commit
        if dropped:
            raise ResponseLost(server) from refusal
        if refusal is not None:
            raise refusal
        return receipt

    def _in_time(self, not_after: datetime | None) -> None:
        """Refuse a write that reached the server after ``not_after`` (the world's clock)."""
        if not_after is not None and self._clock() > not_after:
            raise WriteTooLate(f"the write was due by {not_after.isoformat()}")

    def _rows(self, query: str) -> list[dict[str, str]]:
        with self._read() as db:
            return [dict(row) for row in db.execute(query).fetchall()]

    def _write(self) -> AbstractContextManager[sqlite3.Connection]:
        return self._store.write()

    def _read(self) -> AbstractContextManager[sqlite3.Connection]:
        return self._store.read()

    @staticmethod
    def _authenticate(db: sqlite3.Connection, credential: str) -> None:
        WorldStore.authenticate(db, credential, InvalidCredential)


def print_ledger(directory: Path | str, output: Output) -> None:
    """Print every draft, publication and notification of the world: a table, or JSON lines.

    Each entry carries ``ledger``: ``draft``, ``publication`` or ``notification``.
    """
    world = World(directory)
    ledgers: list[tuple[str, list[dict[str, str]]]] = [
        ("draft", world.drafts()),
        ("publication", world.publications()),
        ("notification", world.notifications()),
    ]
    entries: list[dict[str, Any]] = [{"ledger": name, **row} for name, rows in ledgers for row in rows]
    output.rows({"LEDGER": "ledger", "AT": _second,
                 "ID": lambda e: e.get("draft_id") or e.get("notification_id") or e.get("publication_id"),
                 "SPACE": "space_id", "TENANT": "tenant", "ACTOR": "actor", "INTENT": "intent_id"},
                entries, empty="nothing written yet")


def _second(entry: Mapping[str, Any]) -> str:
    return str(entry.get("at") or "")[:19].replace("T", " ")
