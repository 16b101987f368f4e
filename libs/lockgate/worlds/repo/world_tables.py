"""The repository world's SQLite tables, and the reads and checks every operation shares.

Each function takes the open connection of the operation it serves (one transaction);
``lockgate.worlds.repo.world`` is the only caller.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping

from lockgate.core.canonical import digest_bytes
from lockgate.worlds.repo.paths import Entry
from lockgate.worlds.repo.world_errors import (
    NotAMember,
    PathNotFound,
    RepoNotFound,
    RevisionStale,
    RevisionUnknown,
    TenantMismatch,
)

#: Revisions served: the head and the ones before it, up to this many in all.
KEPT_REVISIONS = 2


SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS actors (
    actor TEXT PRIMARY KEY, tenant TEXT NOT NULL, member INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS revisions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, rev_id TEXT UNIQUE NOT NULL, parent TEXT NOT NULL,
    message TEXT NOT NULL, retained INTEGER NOT NULL, at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS blobs (digest TEXT PRIMARY KEY, content BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS entries (
    rev_id TEXT NOT NULL, path TEXT NOT NULL, kind TEXT NOT NULL, blob TEXT NOT NULL,
    target TEXT NOT NULL, PRIMARY KEY (rev_id, path));
CREATE TABLE IF NOT EXISTS reads (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, read_id TEXT UNIQUE NOT NULL, rev_id TEXT NOT NULL,
    path TEXT NOT NULL, blob TEXT NOT NULL, tenant TEXT NOT NULL, actor TEXT NOT NULL,
    idempotency_key TEXT NOT NULL, intent_id TEXT NOT NULL, at TEXT NOT NULL,
    UNIQUE (tenant, idempotency_key));
CREATE TABLE IF NOT EXISTS summaries (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, digest TEXT UNIQUE NOT NULL, tenant TEXT NOT NULL,
    rev_id TEXT NOT NULL, path TEXT NOT NULL, blob TEXT NOT NULL, content TEXT NOT NULL,
    at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS summary_requests (
    tenant TEXT NOT NULL, idempotency_key TEXT NOT NULL, digest TEXT NOT NULL,
    actor TEXT NOT NULL, intent_id TEXT NOT NULL, at TEXT NOT NULL,
    PRIMARY KEY (tenant, idempotency_key));
CREATE TABLE IF NOT EXISTS patches (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, digest TEXT UNIQUE NOT NULL, tenant TEXT NOT NULL,
    base_rev TEXT NOT NULL, path TEXT NOT NULL, diff TEXT NOT NULL, new_blob TEXT NOT NULL,
    at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS patch_requests (
    tenant TEXT NOT NULL, idempotency_key TEXT NOT NULL, digest TEXT NOT NULL,
    actor TEXT NOT NULL, intent_id TEXT NOT NULL, at TEXT NOT NULL,
    PRIMARY KEY (tenant, idempotency_key));
CREATE TABLE IF NOT EXISTS test_runs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT UNIQUE NOT NULL, tenant TEXT NOT NULL,
    actor TEXT NOT NULL, rev_id TEXT NOT NULL, command TEXT NOT NULL, path TEXT NOT NULL,
    outcome TEXT NOT NULL, idempotency_key TEXT NOT NULL, intent_id TEXT NOT NULL,
    at TEXT NOT NULL, UNIQUE (tenant, idempotency_key));
CREATE TABLE IF NOT EXISTS board_posts (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, post_id TEXT UNIQUE NOT NULL, board TEXT NOT NULL,
    artifact TEXT NOT NULL, title TEXT NOT NULL, tenant TEXT NOT NULL, actor TEXT NOT NULL,
    client_ref TEXT NOT NULL, intent_id TEXT NOT NULL, at TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS posts_by_ref ON board_posts (tenant, client_ref);
CREATE TABLE IF NOT EXISTS invocations (operation TEXT PRIMARY KEY, count INTEGER NOT NULL);
"""

TABLES = ("meta", "actors", "revisions", "blobs", "entries", "reads", "summaries",
           "summary_requests", "patches", "patch_requests", "test_runs", "board_posts",
           "invocations")


def insert_revision(db: sqlite3.Connection, rev_id: str, parent: str, message: str,
                    files: Mapping[str, str], links: Mapping[str, str], at: str) -> None:
    """Store a revision: its row, its files' blobs (once per content) and its tree."""
    db.execute("INSERT INTO revisions (rev_id, parent, message, retained, at) VALUES (?, ?, ?, 1, ?)",
               (rev_id, parent, message, at))
    for path, text in files.items():
        blob = digest_bytes(text.encode())
        db.execute("INSERT INTO blobs VALUES (?, ?) ON CONFLICT (digest) DO NOTHING",
                   (blob, text.encode()))
        db.execute("INSERT INTO entries VALUES (?, ?, 'file', ?, '')", (rev_id, path, blob))
    for path, target in links.items():
        db.execute("INSERT INTO entries VALUES (?, ?, 'symlink', '', ?)", (rev_id, path, target))


def prune(db: sqlite3.Connection) -> None:
    """Make every revision older than the last ``KEPT_REVISIONS`` stale."""
    db.execute(
        "UPDATE revisions SET retained = 0 WHERE seq NOT IN"
        " (SELECT seq FROM revisions ORDER BY seq DESC LIMIT ?)", (KEPT_REVISIONS,),
    )


def head(db: sqlite3.Connection) -> str:
    """The head revision's id (empty before the first)."""
    row = db.execute("SELECT rev_id FROM revisions ORDER BY seq DESC LIMIT 1").fetchone()
    return "" if row is None else str(row[0])


def tree(db: sqlite3.Connection, rev_id: str) -> dict[str, Entry]:
    """The revision's tree: path -> file or symlink."""
    rows = db.execute("SELECT path, kind, blob, target FROM entries WHERE rev_id = ?", (rev_id,))
    return {row["path"]: Entry(row["kind"], row["blob"], row["target"]) for row in rows}


def text_of(db: sqlite3.Connection, blob: str) -> str:
    """A file's text by its blob digest."""
    row = db.execute("SELECT content FROM blobs WHERE digest = ?", (blob,)).fetchone()
    if row is None:
        raise PathNotFound(f"no blob {blob!r}")
    return bytes(row[0]).decode()


def served_file(db: sqlite3.Connection, rev_id: str, path: str) -> str:
    """The blob of the file at ``path`` (a real path: no symlink) at a served revision."""
    row = db.execute("SELECT retained FROM revisions WHERE rev_id = ?", (rev_id,)).fetchone()
    if row is None:
        raise RevisionUnknown(f"no revision {rev_id!r}")
    if not row["retained"]:
        raise RevisionStale(f"revision {rev_id!r} is no longer served")
    entry = db.execute("SELECT kind, blob FROM entries WHERE rev_id = ? AND path = ?",
                       (rev_id, path)).fetchone()
    if entry is None or entry["kind"] != "file":
        raise PathNotFound(f"no file {path!r} at {rev_id}")
    return str(entry["blob"])


def authorize(db: sqlite3.Connection, tenant: str, actor: str) -> None:
    """Refuse unless ``actor`` is a member of the repository, in its tenant."""
    repo_tenant = db.execute("SELECT value FROM meta WHERE key = 'tenant'").fetchone()
    if repo_tenant is None:
        raise RepoNotFound("the world holds no repository")
    if repo_tenant[0] != tenant:
        raise TenantMismatch(f"the repository is not in tenant {tenant!r}")
    who = db.execute("SELECT tenant, member FROM actors WHERE actor = ?", (actor,)).fetchone()
    if who is None or not who["member"] or who["tenant"] != tenant:
        raise NotAMember(f"{actor!r} is not a member of the repository")


def read_receipt(row: sqlite3.Row) -> dict[str, str]:
    """The receipt of a stored read."""
    return {"read_id": row["read_id"], "revision": row["rev_id"], "path": row["path"],
            "blob": row["blob"]}
