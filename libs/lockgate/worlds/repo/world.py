"""A simulated repository: files at revisions, a workspace checkout, artifacts, and a review board.

The world lives in a directory so several processes (an adapter worker, a test, the
CLI) can share it: one SQLite database (``world.db``, write-ahead log) holds the
revisions (each a tree of files and symlinks over content-addressed blobs), the
artifacts prepared from them (summaries, patches), and a ledger of every operation;
``workspace/`` beside it is the head revision checked out, with its symlinks real.

What the world offers, and what each keeps:

======================  ================================================================
operation               ledger
======================  ================================================================
``read_file``           ``reads``: one row per intent key (a repeat returns the first)
``prepare_summary``     ``summaries`` by artifact digest (the same file at the same
                        revision is the same artifact), ``summary_requests`` by key
``prepare_patch``       ``patches`` by artifact digest, ``patch_requests`` by key
``record_test_run``     ``test_runs``: the command, where and how it ran, by key
``publish_summary``     ``board_posts``: the external review board. Not idempotent:
                        every call is a new post; the client reference is only
                        recorded, so ``find_post`` can answer afterwards
======================  ================================================================

Revisions are linear; the head and the one before it are served (``KEPT_REVISIONS``),
anything older is *stale*: its tree is kept for the record but no longer read.

Demo seed (``World.seed``): repository ``repo-1`` of ``tenant-a``; revisions ``r1``
(stale), ``r2``, ``r3`` (head). Files: ``README.md``, ``docs/report.md``,
``docs/guide.md``, ``reports/q3-incident.md``, ``reports/confidential/salaries.md``,
``tests/test_docs.py`` (a tiny pytest suite over the workspace). Symlinks:
``docs/latest.md`` -> ``../reports/q3-incident.md`` and ``shared`` -> ``reports`` (both
inside), ``docs/passwd`` -> ``/etc/passwd``, ``docs/outside.md`` -> ``../../outside.md``
and ``etc`` -> ``/etc`` (out of the workspace). Actors: ``user-42`` (tenant-a, member),
``user-13`` (tenant-a, not a member), ``user-77`` (tenant-b, member of nothing here).
Every operation presents the world's credential (demo value ``DEMO_CREDENTIAL``); only
its SHA-256 is stored.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from lockgate.core.canonical import digest
from lockgate.worlds.repo import world_tables as tables
from lockgate.worlds.repo.artifacts import is_confidential, patch_artifact, summarize
from lockgate.worlds.repo.paths import Entry, escapes
from lockgate.worlds.repo.world_errors import (
    REASONS,
    ArtifactNotFound,
    InvalidCredential,
    NotAMember,
    PathNotFound,
    PostTooLate,
    RepoNotFound,
    RepoWorldError,
    RevisionStale,
    RevisionUnknown,
    TenantMismatch,
)
from lockgate.worlds.repo.world_seed import DEMO_ACTORS, DEMO_REVISIONS
from lockgate.worlds.repo.world_tables import KEPT_REVISIONS
from lockgate.worlds.storage import WorldStore, credential_hash, opened_or_seeded

if TYPE_CHECKING:
    # Only its type: the CLI hands the output in (a world does not depend on the CLI).
    from lockgate.client.output import Output

__all__ = [
    "BOARD", "DEMO_CREDENTIAL", "KEPT_REVISIONS", "OPERATIONS", "REASONS", "REPO_ID",
    "ArtifactNotFound", "Clock", "InvalidCredential", "NotAMember", "PathNotFound", "PostTooLate",
    "RepoNotFound", "RepoWorldError", "RevisionStale", "RevisionUnknown", "TenantMismatch", "World",
    "is_confidential", "patch_artifact", "print_ledger", "summarize",
]


DEMO_CREDENTIAL = "repo-world-demo-secret-5e1b"
REPO_ID = "repo-1"
#: The external destination summaries are published to.
BOARD = "external-review-board"


#: The operations ``invocations`` counts.
OPERATIONS: tuple[str, ...] = (
    "read_file", "prepare_summary", "prepare_patch", "run_tests", "publish_summary",
)

Clock = Callable[[], datetime]
_T = TypeVar("_T")


def _now() -> datetime:
    return datetime.now(UTC)


class World:
    """One repository world on disk, shared by every process that opens its directory."""

    def __init__(self, directory: Path | str, *, clock: Clock = _now) -> None:
        self.directory = Path(directory)
        self._store = WorldStore(self.directory, tables.SCHEMA, what="repository world")
        self._clock = clock

    @property
    def workspace(self) -> Path:
        """The head revision checked out, symlinks and all."""
        return self.directory / "workspace"

    # -- lifecycle ---------------------------------------------------------------------

    @classmethod
    def seed(
        cls, directory: Path | str, *, credential: str = DEMO_CREDENTIAL, clock: Clock = _now
    ) -> World:
        """Write the demo seed into ``directory`` (replacing any state there) and open it."""
        world = cls(directory, clock=clock)
        world.directory.mkdir(parents=True, exist_ok=True)
        at = clock().isoformat()
        with world._write() as db:
            for table in tables.TABLES:
                db.execute(f"DELETE FROM {table}")  # fixed names, not input
            db.execute("DELETE FROM sqlite_sequence")
            db.executemany("INSERT INTO meta VALUES (?, ?)", [
                ("credential_sha256", credential_hash(credential)),
                ("repo_id", REPO_ID), ("tenant", "tenant-a"),
            ])
            db.executemany("INSERT INTO actors VALUES (?, ?, ?)", DEMO_ACTORS)
            db.executemany("INSERT INTO invocations VALUES (?, 0)", [(op,) for op in OPERATIONS])
            parent = ""
            for rev_id, message, files, links in DEMO_REVISIONS:
                tables.insert_revision(db, rev_id, parent, message, files, links, at)
                parent = rev_id
            tables.prune(db)
        shutil.rmtree(world.workspace, ignore_errors=True)
        world.checkout(world.head(), world.workspace, drop_escaping=False)
        return world

    @classmethod
    def open_or_seed(
        cls, directory: Path | str, *, credential: str = DEMO_CREDENTIAL, clock: Clock = _now
    ) -> World:
        """Open the world in ``directory``, seeding it first when it has no state."""
        world = cls(directory, clock=clock)
        return opened_or_seeded(world.directory, world._write, world,
                                lambda: cls.seed(directory, credential=credential, clock=clock))

    def commit(self, message: str, files: Mapping[str, str],
               symlinks: Mapping[str, str] | None = None) -> str:
        """Make a new head revision: the head's tree with ``files`` and ``symlinks`` set.

        Older revisions beyond ``KEPT_REVISIONS`` become stale; the checkout follows.
        Returns the new revision's id.
        """
        with self._write() as db:
            head = tables.head(db)
            tree = tables.tree(db, head)
            merged_files = {p: tables.text_of(db, e.blob) for p, e in tree.items() if e.kind == "file"}
            merged_links = {p: e.target for p, e in tree.items() if e.kind == "symlink"}
            merged_files.update(files)
            merged_links.update(symlinks or {})
            (count,) = db.execute("SELECT COUNT(*) FROM revisions").fetchone()
            rev_id = f"r{count + 1}"
            tables.insert_revision(db, rev_id, head, message, merged_files, merged_links,
                             self._clock().isoformat())
            tables.prune(db)
        shutil.rmtree(self.workspace, ignore_errors=True)
        self.checkout(rev_id, self.workspace, drop_escaping=False)
        return rev_id

    # -- what normalization asks -------------------------------------------------------

    def repository(self, credential: str) -> dict[str, str]:
        """The repository's id and tenant.

        Raises:
            InvalidCredential: wrong credential.
        """
        with self._read() as db:
            self._authenticate(db, credential)
            rows = dict(db.execute("SELECT key, value FROM meta WHERE key IN ('repo_id', 'tenant')"))
            return {"repo_id": rows["repo_id"], "tenant": rows["tenant"]}

    def head(self) -> str:
        """The head revision's id."""
        with self._read() as db:
            return tables.head(db)

    def revision_status(self, rev_id: str) -> str:
        """``head``, ``served`` (an older revision still read), ``stale`` or ``unknown``."""
        with self._read() as db:
            row = db.execute("SELECT retained FROM revisions WHERE rev_id = ?", (rev_id,)).fetchone()
            if row is None:
                return "unknown"
            if rev_id == tables.head(db):
                return "head"
            return "served" if row["retained"] else "stale"

    def tree(self, rev_id: str) -> dict[str, Entry]:
        """The revision's tree: path -> file or symlink (empty for an unknown revision)."""
        with self._read() as db:
            return tables.tree(db, rev_id)

    def blob(self, blob: str) -> str:
        """A file's text by its blob digest.

        Raises:
            PathNotFound: no such blob.
        """
        with self._read() as db:
            return tables.text_of(db, blob)

    def summary(self, credential: str, tenant: str, artifact: str) -> dict[str, Any] | None:
        """The summary artifact of ``tenant`` with this digest, or None.

        Raises:
            InvalidCredential: wrong credential.
        """
        with self._read() as db:
            self._authenticate(db, credential)
            row = db.execute("SELECT content FROM summaries WHERE digest = ? AND tenant = ?",
                             (artifact, tenant)).fetchone()
            return None if row is None else dict(json.loads(row["content"]))

    def facts(self, credential: str, tenant: str, actor: str) -> dict[str, str | int | bool]:
        """What is true of the repository for ``actor`` of ``tenant``: exists, tenant, membership.

        Raises:
            InvalidCredential: wrong credential.
        """
        with self._read() as db:
            self._authenticate(db, credential)
            repo_tenant = db.execute("SELECT value FROM meta WHERE key = 'tenant'").fetchone()[0]
            who = db.execute("SELECT tenant, member FROM actors WHERE actor = ?", (actor,)).fetchone()
            member = bool(who is not None and who["member"] and who["tenant"] == tenant == repo_tenant)
            return {"exists": True, "tenant": repo_tenant, "actor_is_member": member,
                    "head": tables.head(db)}

    # -- operations --------------------------------------------------------------------

    def read_file(self, credential: str, tenant: str, actor: str, rev_id: str, path: str,
                  idempotency_key: str, intent_id: str) -> dict[str, str]:
        """Read the file at ``path`` (a real path, symlinks resolved) at ``rev_id``, once per key.

        Returns:
            The receipt: ``read_id``, ``revision``, ``path``, ``blob``.

        Raises:
            InvalidCredential, TenantMismatch, NotAMember, RevisionUnknown, RevisionStale,
            PathNotFound: nothing was read.
        """
        def read(db: sqlite3.Connection) -> dict[str, str]:
            existing = db.execute("SELECT * FROM reads WHERE tenant = ? AND idempotency_key = ?",
                                  (tenant, idempotency_key)).fetchone()
            if existing is not None:
                return tables.read_receipt(existing)
            blob = tables.served_file(db, rev_id, path)
            (count,) = db.execute("SELECT COUNT(*) FROM reads").fetchone()
            read_id = f"read-{count + 1:06d}"
            db.execute(
                "INSERT INTO reads (read_id, rev_id, path, blob, tenant, actor, idempotency_key,"
                " intent_id, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (read_id, rev_id, path, blob, tenant, actor, idempotency_key, intent_id,
                 self._clock().isoformat()),
            )
            return {"read_id": read_id, "revision": rev_id, "path": path, "blob": blob}

        return self._invoke("read_file", credential, tenant, actor, read)

    def prepare_summary(self, credential: str, tenant: str, actor: str, rev_id: str, path: str,
                        idempotency_key: str, intent_id: str) -> dict[str, Any]:
        """Store the summary of ``path`` at ``rev_id`` (once per file and revision) and return it.

        Returns:
            The summary (``summarize``) with ``artifact``, its digest.

        Raises:
            as ``read_file``.
        """
        def prepare(db: sqlite3.Connection) -> dict[str, Any]:
            blob = tables.served_file(db, rev_id, path)
            summary = summarize(path, rev_id, tables.text_of(db, blob))
            artifact = digest({"kind": "summary", "blob": blob, **summary})
            at = self._clock().isoformat()
            db.execute(
                "INSERT INTO summaries (digest, tenant, rev_id, path, blob, content, at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (digest) DO NOTHING",
                (artifact, tenant, rev_id, path, blob, json.dumps(summary, sort_keys=True), at),
            )
            db.execute(
                "INSERT INTO summary_requests VALUES (?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (tenant, idempotency_key) DO NOTHING",
                (tenant, idempotency_key, artifact, actor, intent_id, at),
            )
            return {**summary, "artifact": artifact}

        return self._invoke("prepare_summary", credential, tenant, actor, prepare)

    def prepare_patch(self, credential: str, tenant: str, actor: str, base_rev: str, path: str,
                      content: str, idempotency_key: str, intent_id: str) -> dict[str, str]:
        """Store the patch making ``path`` read ``content`` on ``base_rev`` (the head), by its digest.

        Returns:
            The patch (``patch_artifact``): ``digest``, ``base_revision``, ``path``, ``diff``.

        Raises:
            as ``read_file``; ``RevisionStale`` when ``base_rev`` is no longer the head.
        """
        def prepare(db: sqlite3.Connection) -> dict[str, str]:
            if base_rev != tables.head(db):
                tables.served_file(db, base_rev, path)  # unknown or stale say so first
                raise RevisionStale(f"{base_rev} is no longer the head")
            blob = tables.served_file(db, base_rev, path)
            patch = patch_artifact(base_rev, path, tables.text_of(db, blob), content)
            at = self._clock().isoformat()
            db.execute(
                "INSERT INTO patches (digest, tenant, base_rev, path, diff, new_blob, at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (digest) DO NOTHING",
                (patch["digest"], tenant, base_rev, path, patch["diff"], patch["new_blob"], at),
            )
            db.execute(
                "INSERT INTO patch_requests VALUES (?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (tenant, idempotency_key) DO NOTHING",
                (tenant, idempotency_key, patch["digest"], actor, intent_id, at),
            )
            return patch

        return self._invoke("prepare_patch", credential, tenant, actor, prepare)

    def record_test_run(self, credential: str, tenant: str, actor: str, rev_id: str,
                        command: str, path: str, outcome: Mapping[str, Any],
                        idempotency_key: str, intent_id: str) -> dict[str, Any]:
        """Record how a test run went (``outcome``: the sandbox's decision and the exit), once per key.

        Returns:
            ``run_id`` and the outcome first recorded under the key.
        """
        def record(db: sqlite3.Connection) -> dict[str, Any]:
            existing = db.execute("SELECT * FROM test_runs WHERE tenant = ? AND idempotency_key = ?",
                                  (tenant, idempotency_key)).fetchone()
            if existing is not None:
                return {"run_id": existing["run_id"], **json.loads(existing["outcome"])}
            (count,) = db.execute("SELECT COUNT(*) FROM test_runs").fetchone()
            run_id = f"run-{count + 1:06d}"
            db.execute(
                "INSERT INTO test_runs (run_id, tenant, actor, rev_id, command, path, outcome,"
                " idempotency_key, intent_id, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (run_id, tenant, actor, rev_id, command, path, json.dumps(dict(outcome), sort_keys=True),
                 idempotency_key, intent_id, self._clock().isoformat()),
            )
            return {"run_id": run_id, **outcome}

        return self._invoke("run_tests", credential, tenant, actor, record)

    def publish_summary(self, credential: str, tenant: str, actor: str, artifact: str,
                        client_ref: str, intent_id: str,
                        not_after: datetime | None = None) -> dict[str, str]:
        """Post a summary artifact to the external review board, now.

        Not idempotent: every call is a new post, whatever ``client_ref`` says; the
        reference is only recorded, so ``find_post`` can answer later. A post that
        arrives after ``not_after`` (the attempt's deadline, as the adapter SDK hands it
        over) is refused: by then a query may have found it absent and a retry posted.

        Returns:
            The receipt: ``post_id``, ``board``, ``artifact``, ``client_ref``.

        Raises:
            InvalidCredential, TenantMismatch, NotAMember, ArtifactNotFound, PostTooLate:
                nothing was posted.
        """
        def publish(db: sqlite3.Connection) -> dict[str, str]:
            if not_after is not None and self._clock() > not_after:
                raise PostTooLate(f"the post was due by {not_after.isoformat()}")
            row = db.execute("SELECT content FROM summaries WHERE digest = ? AND tenant = ?",
                             (artifact, tenant)).fetchone()
            if row is None:
                raise ArtifactNotFound(f"no summary {artifact!r}")
            title = str(json.loads(row["content"])["title"])
            (count,) = db.execute("SELECT COUNT(*) FROM board_posts").fetchone()
            post_id = f"post-{count + 1:06d}"
            db.execute(
                "INSERT INTO board_posts (post_id, board, artifact, title, tenant, actor,"
                " client_ref, intent_id, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (post_id, BOARD, artifact, title, tenant, actor, client_ref, intent_id,
                 self._clock().isoformat()),
            )
            return {"post_id": post_id, "board": BOARD, "artifact": artifact,
                    "client_ref": client_ref}

        return self._invoke("publish_summary", credential, tenant, actor, publish)

    # -- queries by identity -----------------------------------------------------------

    def find(self, credential: str, operation: str, tenant: str, key: str) -> dict[str, str] | None:
        """The receipt of ``operation`` done under ``key`` (a client reference for a post), or None.

        Raises:
            InvalidCredential: wrong credential.
            ValueError: unknown operation.
        """
        queries = {
            "read_file": "SELECT read_id, rev_id AS revision, path, blob FROM reads"
                         " WHERE tenant = ? AND idempotency_key = ?",
            "prepare_summary": "SELECT digest AS artifact FROM summary_requests"
                               " WHERE tenant = ? AND idempotency_key = ?",
            "prepare_patch": "SELECT digest FROM patch_requests WHERE tenant = ? AND idempotency_key = ?",
            "run_tests": "SELECT run_id, rev_id AS revision, command, path FROM test_runs"
                         " WHERE tenant = ? AND idempotency_key = ?",
            "publish_summary": "SELECT post_id, board, artifact, client_ref FROM board_posts"
                               " WHERE tenant = ? AND client_ref = ? ORDER BY seq",
        }
        if operation not in queries:
            raise ValueError(f"unknown operation {operation!r}")
        with self._read() as db:
            self._authenticate(db, credential)
            row = db.execute(queries[operation], (tenant, key)).fetchone()
            return None if row is None else {k: str(v) for k, v in dict(row).items()}

    # -- checkouts ---------------------------------------------------------------------

    def checkout(self, rev_id: str, dest: Path, *, drop_escaping: bool = True) -> int:
        """Write the revision's tree under ``dest`` (files and real symlinks).

        With ``drop_escaping`` a symlink that leads out of the workspace is left out
        (a sandbox's copy); returns how many were.
        """
        with self._read() as db:
            tree = tables.tree(db, rev_id)
            files = {p: tables.text_of(db, e.blob) for p, e in tree.items() if e.kind == "file"}
        dest.mkdir(parents=True, exist_ok=True)
        dropped = 0
        for path, text in files.items():
            target = dest / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        for path, entry in tree.items():
            if entry.kind != "symlink":
                continue
            if drop_escaping and escapes(tree, path):
                dropped += 1
                continue
            link = dest / path
            link.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(entry.target, link)
        return dropped

    # -- inspection (tests, CLI) -------------------------------------------------------

    def invocations(self, operation: str) -> int:
        """How often ``operation`` was called, by any process, refusals included."""
        with self._read() as db:
            row = db.execute("SELECT count FROM invocations WHERE operation = ?", (operation,)).fetchone()
            return 0 if row is None else int(row[0])

    def reads(self) -> list[dict[str, str]]:
        """Every read, oldest first."""
        return self._rows("SELECT read_id, rev_id, path, blob, tenant, actor, idempotency_key,"
                          " intent_id, at FROM reads ORDER BY seq")

    def summaries(self) -> list[dict[str, str]]:
        """Every summary artifact, oldest first."""
        return self._rows("SELECT digest, tenant, rev_id, path, blob, at FROM summaries ORDER BY seq")

    def patches(self) -> list[dict[str, str]]:
        """Every patch artifact, oldest first."""
        return self._rows("SELECT digest, tenant, base_rev, path, diff, new_blob, at FROM patches"
                          " ORDER BY seq")

    def test_runs(self) -> list[dict[str, str]]:
        """Every test run, oldest first (``outcome`` as JSON)."""
        return self._rows("SELECT run_id, tenant, actor, rev_id, command, path, outcome,"
                          " idempotency_key, intent_id, at FROM test_runs ORDER BY seq")

    def board_posts(self) -> list[dict[str, str]]:
        """Every post to the external review board, oldest first (duplicates included)."""
        return self._rows("SELECT post_id, board, artifact, title, tenant, actor, client_ref,"
                          " intent_id, at FROM board_posts ORDER BY seq")

    # -- storage -----------------------------------------------------------------------

    def _invoke(self, operation: str, credential: str, tenant: str, actor: str,
                body: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run one operation: counted, authenticated, authorized, one transaction."""
        refusal: RepoWorldError | None = None
        with self._write() as db:
            # Every call counts, refused ones too: tests count how often the world was reached.
            db.execute("UPDATE invocations SET count = count + 1 WHERE operation = ?", (operation,))
            try:
                self._authenticate(db, credential)
                tables.authorize(db, tenant, actor)
                return body(db)
            except RepoWorldError as exc:
                refusal = exc  # it wrote nothing; the count still commits
        raise refusal

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
    """Print every read, artifact, test run and board post of the world: a table, or JSON lines.

    Each entry carries ``ledger``: ``read``, ``summary``, ``patch``, ``test_run`` or ``board_post``.
    """
    world = World(directory)
    ledgers: list[tuple[str, list[dict[str, str]]]] = [
        ("read", world.reads()), ("summary", world.summaries()), ("patch", world.patches()),
        ("test_run", world.test_runs()), ("board_post", world.board_posts()),
    ]
    entries = [{"ledger": name, **row} for name, rows in ledgers for row in rows]
    output.rows({"LEDGER": "ledger", "AT": _second,
                 "ID": lambda e: e.get("read_id") or e.get("run_id") or e.get("post_id") or e.get("digest"),
                 "TENANT": "tenant", "ACTOR": "actor",
                 "WHAT": lambda e: e.get("title") or e.get("command") or e.get("path"),
                 "INTENT": "intent_id"}, entries, empty="nothing written yet")


def _second(entry: Mapping[str, Any]) -> str:
    return str(entry.get("at") or "")[:19].replace("T", " ")
