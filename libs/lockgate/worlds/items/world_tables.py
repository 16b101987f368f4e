"""The items world's SQLite tables, and the checks and fault taking its operations share.

Each function takes the open connection of the operation it serves (one transaction);
``lockgate.worlds.items.world`` is the only caller.
"""

from __future__ import annotations

import sqlite3

from lockgate.worlds.items.world_errors import (
    NotAuthorized,
    SpaceArchived,
    SpaceNotFound,
    TenantMismatch,
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS spaces (
    space_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, status TEXT NOT NULL,
    version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS actors (
    actor TEXT PRIMARY KEY, tenant TEXT NOT NULL, may_create INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS subscribers (
    space_id TEXT NOT NULL, subscriber TEXT NOT NULL, PRIMARY KEY (space_id, subscriber));
CREATE TABLE IF NOT EXISTS drafts (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, draft_id TEXT UNIQUE NOT NULL,
    space_id TEXT NOT NULL, tenant TEXT NOT NULL, actor TEXT NOT NULL,
    title TEXT NOT NULL, body TEXT NOT NULL, idempotency_key TEXT NOT NULL,
    intent_id TEXT NOT NULL, title_digest TEXT NOT NULL, body_digest TEXT NOT NULL,
    at TEXT NOT NULL, UNIQUE (tenant, idempotency_key));
CREATE TABLE IF NOT EXISTS publications (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, publication_id TEXT UNIQUE NOT NULL,
    space_id TEXT NOT NULL, tenant TEXT NOT NULL, actor TEXT NOT NULL,
    title TEXT NOT NULL, body TEXT NOT NULL, client_ref TEXT NOT NULL,
    intent_id TEXT NOT NULL, title_digest TEXT NOT NULL, body_digest TEXT NOT NULL,
    notified INTEGER NOT NULL, at TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS publications_by_ref ON publications (tenant, client_ref);
CREATE TABLE IF NOT EXISTS notifications (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, notification_id TEXT UNIQUE NOT NULL,
    publication_id TEXT NOT NULL, subscriber TEXT NOT NULL, space_id TEXT NOT NULL,
    tenant TEXT NOT NULL, actor TEXT NOT NULL, client_ref TEXT NOT NULL,
    intent_id TEXT NOT NULL, title_digest TEXT NOT NULL, at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS invocations (server TEXT PRIMARY KEY, count INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS faults (
    server TEXT NOT NULL, fault TEXT NOT NULL, remaining INTEGER NOT NULL,
    PRIMARY KEY (server, fault));
"""

TABLES = ("meta", "spaces", "actors", "subscribers", "drafts", "publications",
          "notifications", "invocations", "faults")


def take_fault(db: sqlite3.Connection, server: str, fault: str) -> bool:
    """Consume one armed fault inside the caller's write transaction."""
    cursor = db.execute(
        "UPDATE faults SET remaining = remaining - 1"
        " WHERE server = ? AND fault = ? AND remaining > 0",
        (server, fault),
    )
    return cursor.rowcount == 1


def space_row(db: sqlite3.Connection, space_id: str) -> sqlite3.Row | None:
    """The space's row, or None."""
    row: sqlite3.Row | None = db.execute(
        "SELECT * FROM spaces WHERE space_id = ?", (space_id,)
    ).fetchone()
    return row


def may_create(db: sqlite3.Connection, tenant: str, actor: str, space: sqlite3.Row) -> bool:
    """Whether ``actor`` of ``tenant`` may create items in the space."""
    who = db.execute("SELECT tenant, may_create FROM actors WHERE actor = ?", (actor,)).fetchone()
    return bool(who is not None and who["tenant"] == tenant == space["tenant"] and who["may_create"])


def check_may_create(db: sqlite3.Connection, tenant: str, actor: str, space_id: str) -> None:
    """Raise the refusal that stops ``actor`` of ``tenant`` creating an item in the space."""
    space = space_row(db, space_id)
    if space is None:
        raise SpaceNotFound(f"no space {space_id!r}")
    if space["tenant"] != tenant:
        raise TenantMismatch(f"space {space_id!r} is not in tenant {tenant!r}")
    if not may_create(db, tenant, actor, space):
        raise NotAuthorized(f"{actor!r} may not create items in {space_id!r}")
    if space["status"] != "open":
        raise SpaceArchived(f"space {space_id!r} is {space['status']}")


def draft_receipt(draft: sqlite3.Row) -> dict[str, str]:
    """The receipt of a stored draft."""
    return {"draft_id": draft["draft_id"], "space_id": draft["space_id"],
            "idempotency_key": draft["idempotency_key"]}
