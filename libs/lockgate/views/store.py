"""The views' store: SQL tables kept by the projector, on SQLite or PostgreSQL.

Each backend is the ``eventsourcing`` library's tracking recorder for that database
(``SQLiteTrackingRecorder``, ``PostgresTrackingRecorder``) with Lockgate's tables
added: an event's rows and the tracking of its stream position are written in one
transaction (``apply``), and the library's single-row tracking refuses a position
that is not past the last one, so a crash between two events, or an event handed
over twice, can neither skip nor double-apply anything.

The SQL is written once with ``?`` placeholders; the PostgreSQL backend turns them
into ``%s``. Timestamps are ISO-8601 UTC text, which sorts the same on both.
"""

from __future__ import annotations

import fcntl
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar
from urllib.parse import unquote, urlparse

import msgspec
from eventsourcing.persistence import InfrastructureFactory, Tracking, TrackingRecorder
from eventsourcing.sqlite import SQLiteTrackingRecorder

from lockgate.core.errors import LockgateError
from lockgate.views.rows import (
    ENDED,
    NEEDS_A_PERSON,
    REFUSALS,
    BudgetTotal,
    BudgetUse,
    DenialCount,
    EventRow,
    IntentRow,
    ReviewRow,
    RunRow,
    ShadowFlipCount,
    ShadowRow,
    TimelineRow,
    timeline_row,
)

#: The tracking's application name: the position tracked is in the events stream. A
#: partitioned deployment tracks one position per partition, under its stream's name.
SOURCE = "LG_EVENTS"


def total(positions: Mapping[str, int | None]) -> int | None:
    """The views' position over every source: the sum of theirs (``None``: none applied
    yet), beside the streams' last sequences summed; their difference is the lag."""
    known = [p for p in positions.values() if p is not None]
    return sum(known) if known else None


def views_position(views: Views, sources: Sequence[str] = (SOURCE,)) -> int | None:
    """How far the views are over ``sources`` (``total`` of their tracked positions)."""
    return total({name: views.max_tracking_id(name) for name in sources})
#: The shape of the derived tables. They are not migrated: on a store of another shape
#: they are dropped and the projector folds the permanent record into them again.
SHAPE = "6"
_DERIVED_TABLES = ("lg_intents", "lg_reviews", "lg_budget_uses", "lg_shadow_decisions")

_TABLES = (
    """CREATE TABLE IF NOT EXISTS lg_events (
        sequence BIGINT PRIMARY KEY, tenant TEXT NOT NULL, intent_id TEXT NOT NULL,
        version INTEGER NOT NULL, event_type TEXT NOT NULL, event_id TEXT NOT NULL,
        recorded_at TEXT NOT NULL, data TEXT NOT NULL, UNIQUE (intent_id, version))""",
    """CREATE TABLE IF NOT EXISTS lg_intents (
        intent_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, run_id TEXT NOT NULL,
        actor TEXT NOT NULL, call_id TEXT NOT NULL, tool TEXT NOT NULL,
        effect_class TEXT NOT NULL, destination TEXT NOT NULL, state TEXT NOT NULL,
        reason TEXT, model_status TEXT NOT NULL, attempts INTEGER NOT NULL,
        attempt_stage TEXT, review_id TEXT, version INTEGER NOT NULL,
        created_at TEXT NOT NULL, updated_at TEXT NOT NULL, last_sequence BIGINT NOT NULL,
        archived BOOLEAN NOT NULL, turn_id TEXT NOT NULL, follows TEXT NOT NULL,
        follows_how TEXT NOT NULL, lineage TEXT NOT NULL, lineage_root TEXT NOT NULL,
        provider TEXT NOT NULL, model TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS lg_intents_by_predecessor ON lg_intents (follows)",
    "CREATE INDEX IF NOT EXISTS lg_intents_by_position ON lg_intents (last_sequence)",
    "CREATE INDEX IF NOT EXISTS lg_intents_by_state ON lg_intents (state, last_sequence)",
    "CREATE INDEX IF NOT EXISTS lg_intents_by_run ON lg_intents (tenant, run_id, created_at)",
    "CREATE INDEX IF NOT EXISTS lg_intents_by_tenant ON lg_intents (tenant, last_sequence)",
    "CREATE INDEX IF NOT EXISTS lg_intents_by_age ON lg_intents (archived, updated_at)",
    """CREATE TABLE IF NOT EXISTS lg_reviews (
        review_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, intent_id TEXT NOT NULL,
        status TEXT NOT NULL, tool TEXT NOT NULL, summary TEXT NOT NULL, digest TEXT NOT NULL,
        policy_revision TEXT NOT NULL, contract_revision TEXT NOT NULL,
        requested_at TEXT NOT NULL, expires_at TEXT NOT NULL, decided_by TEXT,
        decided_at TEXT, reason TEXT, action TEXT NOT NULL, visible_to TEXT NOT NULL,
        shown TEXT NOT NULL, preconditions TEXT NOT NULL, recovery TEXT NOT NULL,
        edited_into TEXT)""",
    "CREATE INDEX IF NOT EXISTS lg_reviews_by_status ON lg_reviews (status, requested_at)",
    "CREATE INDEX IF NOT EXISTS lg_reviews_by_intent ON lg_reviews (intent_id)",
    """CREATE TABLE IF NOT EXISTS lg_budget_uses (
        tenant TEXT NOT NULL, intent_id TEXT NOT NULL, budget TEXT NOT NULL,
        status TEXT NOT NULL, updated_at TEXT NOT NULL, PRIMARY KEY (intent_id, budget))""",
    "CREATE INDEX IF NOT EXISTS lg_budget_uses_by_budget ON lg_budget_uses (tenant, budget)",
    """CREATE TABLE IF NOT EXISTS lg_shadow_decisions (
        intent_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, run_id TEXT NOT NULL, tool TEXT NOT NULL,
        decided_at TEXT NOT NULL, active_revision TEXT NOT NULL, active_outcome TEXT NOT NULL,
        active_reasons TEXT NOT NULL, active_determining TEXT NOT NULL,
        shadow_revision TEXT NOT NULL, shadow_outcome TEXT NOT NULL, shadow_reasons TEXT NOT NULL,
        shadow_determining TEXT NOT NULL, flip TEXT NOT NULL, policy TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS lg_shadow_by_revision ON lg_shadow_decisions (shadow_revision, decided_at)",
)

#: Columns that hold JSON (a row field that is a list or a mapping).
_JSON_COLUMNS = frozenset({"shown", "preconditions", "recovery", "active_reasons", "active_determining",
                           "shadow_reasons", "shadow_determining"})

_INTENT_COLUMNS = tuple(IntentRow.__struct_fields__)
_REVIEW_COLUMNS = tuple(ReviewRow.__struct_fields__)
_EVENT_COLUMNS = tuple(EventRow.__struct_fields__)
_SHADOW_COLUMNS = tuple(ShadowRow.__struct_fields__)

_UPSERT_INTENT = (
    f"INSERT INTO lg_intents ({', '.join(_INTENT_COLUMNS)}) "
    f"VALUES ({', '.join('?' for _ in _INTENT_COLUMNS)}) ON CONFLICT (intent_id) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in _INTENT_COLUMNS if c != "intent_id")
)
_INSERT_EVENT = (
    f"INSERT INTO lg_events ({', '.join(_EVENT_COLUMNS)}) "
    f"VALUES ({', '.join('?' for _ in _EVENT_COLUMNS)})"
)
_UPSERT_SHADOW = (
    f"INSERT INTO lg_shadow_decisions ({', '.join(_SHADOW_COLUMNS)}) "
    f"VALUES ({', '.join('?' for _ in _SHADOW_COLUMNS)}) ON CONFLICT (intent_id) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in _SHADOW_COLUMNS if c != "intent_id")
)
_INSERT_REVIEW = (
    f"INSERT INTO lg_reviews ({', '.join(_REVIEW_COLUMNS)}) "
    f"VALUES ({', '.join('?' for _ in _REVIEW_COLUMNS)}) ON CONFLICT (review_id) DO NOTHING"
)

R = TypeVar("R", bound=msgspec.Struct)


class ViewsError(LockgateError):
    """The views' store cannot be opened or is not what this code expects."""


@dataclass(frozen=True)
class Change:
    """Everything one event changes in the views, written with its tracking."""

    event: EventRow
    intent: IntentRow
    #: A review the event opens (the intent's other waiting reviews are superseded).
    opened: ReviewRow | None = None
    #: The intent's current review's new status and fields.
    review: tuple[str, str, dict[str, str | None]] | None = None
    #: The intent's budget shares, each with its status now.
    budgets: tuple[BudgetUse, ...] = ()
    #: A decision's shadow row (the intent's latest wins); ``decided`` with none: its row goes.
    shadow: ShadowRow | None = None
    decided: bool = False


class Views(Protocol):
    """What the projector writes and every query reads."""

    def apply(self, change: Change, tracking: Tracking) -> None:
        """Write ``change`` and ``tracking`` in one transaction."""

    def apply_many(self, changes: Sequence[Change], tracking: Tracking) -> None:
        """Write consecutive ``changes`` and the last one's ``tracking`` in one transaction."""

    def max_tracking_id(self, application_name: str) -> int | None:
        """The last stream position applied (``None``: nothing yet)."""

    def events_of(self, intent_id: str) -> list[EventRow]:
        """Every event of one intent, in order (its timeline)."""

    def timeline(self, intent_id: str) -> list[TimelineRow]:
        """Every event of one intent, in order, its fields read out of the stored JSON."""

    def intent(self, intent_id: str) -> IntentRow | None:
        """One intent's row."""

    def intents(self, *, tenant: str | None = None, state: str | None = None,
                run_id: str | None = None, model_status: str | None = None,
                before: int | None = None, limit: int = 100) -> list[IntentRow]:
        """Intents, newest change first; ``before``: a ``last_sequence`` to page from."""

    def reviews(self, *, tenant: str | None = None, status: str | None = "waiting",
                intent_id: str | None = None, limit: int = 100) -> list[ReviewRow]:
        """Reviews, oldest request first (the queue when ``status`` is ``waiting``)."""

    def needing_a_person(self, *, tenant: str | None = None, limit: int = 100) -> list[IntentRow]:
        """Intents whose outcome is unknown, or that wait for an operator."""

    def denials(self, *, tenant: str | None = None) -> list[DenialCount]:
        """Intents ended refused, counted by state and reason."""

    def budgets(self, *, tenant: str | None = None) -> list[BudgetTotal]:
        """Each budget counter's shares by status."""

    def runs(self, *, tenant: str | None = None, limit: int = 100) -> list[RunRow]:
        """Runs with their candidates, the most recently active first."""

    def shadow_decisions(self, *, revision: str | None = None, tenant: str | None = None,
                         flipped_only: bool = False, limit: int = 100) -> list[ShadowRow]:
        """Intents' latest decisions beside a shadow bundle's (``revision``: that bundle's),
        newest first; ``flipped_only``: those whose outcomes differ."""

    def shadow_flips(self, *, revision: str | None = None,
                     tenant: str | None = None) -> list[ShadowFlipCount]:
        """The shadow bundle's flips, counted by capability, flip and policy, most first."""

    def lineage(self, intent_id: str) -> list[IntentRow]:
        """The lineage ``intent_id`` belongs to: from its first candidate, each followed by
        those that follow it (depth first, in the order they came)."""

    def state_counts(self) -> dict[str, int]:
        """How many intents are in each state."""

    def ended_before(self, cutoff: str, *, limit: int = 100) -> list[IntentRow]:
        """Ended intents not archived, last changed before ``cutoff`` (oldest first)."""

    def refold_pending(self) -> bool:
        """Whether the derived tables wait to be folded again from the record."""

    def intent_ids_after(self, after: str, *, limit: int = 500) -> list[str]:
        """Ids of the intents the record holds, in id order, after ``after``."""

    def refolded(self, changes: Sequence[Change], *, done: bool = False) -> None:
        """Write refolded changes (the record and tracking stay as they are)."""

    def archived_since(self, since: str, *, limit: int = 100) -> list[IntentRow]:
        """Archived intents marked since ``since`` (to finish a purge a crash cut short)."""

    def close(self) -> None:
        """Release connections."""


class _SQLViews:
    """The SQL of the views, shared by both backends (which supply ``_tx`` and ``_sql``)."""

    # Both come from the library's recorder the backend also derives from.
    datastore: Any
    _insert_tracking: Callable[[Any, Tracking], None]

    def _sql(self, statement: str) -> str:
        return statement

    @contextmanager
    def _tx(self, *, commit: bool) -> Iterator[Any]:
        with self.datastore.transaction(commit=commit) as cursor:
            yield cursor

    def close(self) -> None:
        self.datastore.close()

    def prepare(self) -> None:
        """Create the tables; on a store of another ``SHAPE``, rebuild what is derived.

        The events table is the permanent record (the hot store may no longer hold what
        it holds), so it is never dropped: the derived tables are, and a refold of the
        record into them is left pending for the projector (``refold_pending``).
        """
        with self._tx(commit=True) as c:
            c.execute(self._sql(
                "CREATE TABLE IF NOT EXISTS lg_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)"))
            c.execute(self._sql("SELECT value FROM lg_meta WHERE name = 'shape'"))
            row = c.fetchone()
            if row is not None and str(row["value"]) != SHAPE:
                for table in _DERIVED_TABLES:
                    c.execute(self._sql(f"DROP TABLE IF EXISTS {table}"))
                self._meta(c, "refold", "pending")
        self.create_table()  # type: ignore[attr-defined]  # the library recorder's
        with self._tx(commit=True) as c:
            self._meta(c, "shape", SHAPE)

    def _meta(self, c: Any, name: str, value: str) -> None:
        c.execute(self._sql(
            "INSERT INTO lg_meta (name, value) VALUES (?, ?) "
            "ON CONFLICT (name) DO UPDATE SET value = excluded.value"), (name, value))

    def refold_pending(self) -> bool:
        with self._tx(commit=False) as c:
            c.execute(self._sql("SELECT value FROM lg_meta WHERE name = 'refold'"))
            row = c.fetchone()
        return row is not None and str(row["value"]) == "pending"

    def intent_ids_after(self, after: str, *, limit: int = 500) -> list[str]:
        with self._tx(commit=False) as c:
            c.execute(self._sql("SELECT DISTINCT intent_id FROM lg_events WHERE intent_id > ? "
                                "ORDER BY intent_id LIMIT ?"), (after, max(1, limit)))
            return [str(row["intent_id"]) for row in c.fetchall()]

    def refolded(self, changes: Sequence[Change], *, done: bool = False) -> None:
        with self._tx(commit=True) as c:
            for change in changes:
                self._derived(c, change)
            if done:
                self._meta(c, "refold", "done")

    def apply(self, change: Change, tracking: Tracking) -> None:
        self.apply_many([change], tracking)

    def apply_many(self, changes: Sequence[Change], tracking: Tracking) -> None:
        with self._tx(commit=True) as c:
            for change in changes:
                c.execute(self._sql(_INSERT_EVENT), _values(change.event, _EVENT_COLUMNS))
                self._derived(c, change)
            self._insert_tracking(c, tracking)

    def _derived(self, c: Any, change: Change) -> None:
        """Write what ``change`` changes besides the record itself."""
        c.execute(self._sql(_UPSERT_INTENT), _values(change.intent, _INTENT_COLUMNS))
        intent_id = change.intent.intent_id
        if change.opened is not None:
            c.execute(self._sql(
                "UPDATE lg_reviews SET status = 'superseded' "
                "WHERE intent_id = ? AND status = 'waiting'"), (intent_id,))
            c.execute(self._sql(_INSERT_REVIEW), _values(change.opened, _REVIEW_COLUMNS))
        if change.review is not None:
            review_id, status, fields = change.review
            sets = ", ".join(f"{k} = ?" for k in fields)
            c.execute(self._sql(f"UPDATE lg_reviews SET status = ?, {sets} WHERE review_id = ?"),
                      (status, *fields.values(), review_id))
        if change.intent.state != "awaiting_approval":
            c.execute(self._sql(
                "UPDATE lg_reviews SET status = 'closed' WHERE intent_id = ? AND status = 'waiting'"),
                (intent_id,))
        for use in change.budgets:
            c.execute(self._sql(
                "INSERT INTO lg_budget_uses (tenant, intent_id, budget, status, updated_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (intent_id, budget) DO UPDATE SET "
                "status = excluded.status, updated_at = excluded.updated_at"),
                (use.tenant, use.intent_id, use.budget, use.status, use.updated_at))
        if change.shadow is not None:
            c.execute(self._sql(_UPSERT_SHADOW), _values(change.shadow, _SHADOW_COLUMNS))
        elif change.decided:
            c.execute(self._sql("DELETE FROM lg_shadow_decisions WHERE intent_id = ?"), (intent_id,))

    def _rows(self, cls: type[R], statement: str, params: Sequence[Any] = ()) -> list[R]:
        with self._tx(commit=False) as c:
            c.execute(self._sql(statement), tuple(params))
            fetched = c.fetchall()
        return [msgspec.convert(_fields(row), cls, strict=False) for row in fetched]

    def events_of(self, intent_id: str) -> list[EventRow]:
        return self._rows(EventRow, "SELECT * FROM lg_events WHERE intent_id = ? ORDER BY version",
                          (intent_id,))

    def timeline(self, intent_id: str) -> list[TimelineRow]:
        return [timeline_row(row) for row in self.events_of(intent_id)]

    def intent(self, intent_id: str) -> IntentRow | None:
        rows = self._rows(IntentRow, "SELECT * FROM lg_intents WHERE intent_id = ?", (intent_id,))
        return rows[0] if rows else None

    def intents(self, *, tenant: str | None = None, state: str | None = None,
                run_id: str | None = None, model_status: str | None = None,
                before: int | None = None, limit: int = 100) -> list[IntentRow]:
        where, params = _where(tenant=tenant, state=state, run_id=run_id,
                               model_status=model_status)
        if before is not None:
            where.append("last_sequence < ?")
            params.append(before)
        return self._rows(IntentRow, f"SELECT * FROM lg_intents {_and(where)} "
                          "ORDER BY last_sequence DESC LIMIT ?", (*params, _bounded(limit)))

    def reviews(self, *, tenant: str | None = None, status: str | None = "waiting",
                intent_id: str | None = None, limit: int = 100) -> list[ReviewRow]:
        where, params = _where(tenant=tenant, status=status, intent_id=intent_id)
        return self._rows(ReviewRow, f"SELECT * FROM lg_reviews {_and(where)} "
                          "ORDER BY requested_at, review_id LIMIT ?", (*params, _bounded(limit)))

    def needing_a_person(self, *, tenant: str | None = None, limit: int = 100) -> list[IntentRow]:
        where, params = _where(tenant=tenant)
        where.append(f"state IN ({', '.join('?' for _ in NEEDS_A_PERSON)})")
        return self._rows(IntentRow, f"SELECT * FROM lg_intents {_and(where)} "
                          "ORDER BY updated_at LIMIT ?",
                          (*params, *NEEDS_A_PERSON, _bounded(limit)))

    def denials(self, *, tenant: str | None = None) -> list[DenialCount]:
        where, params = _where(tenant=tenant)
        where.append(f"state IN ({', '.join('?' for _ in REFUSALS)})")
        return self._rows(
            DenialCount,
            "SELECT tenant, state, COALESCE(reason, '') AS reason, CAST(COUNT(*) AS INTEGER) AS intents, "
            f"MAX(updated_at) AS last_at FROM lg_intents {_and(where)} "
            "GROUP BY tenant, state, COALESCE(reason, '') ORDER BY intents DESC, reason",
            (*params, *REFUSALS))

    def budgets(self, *, tenant: str | None = None) -> list[BudgetTotal]:
        where, params = _where(tenant=tenant)
        return self._rows(
            BudgetTotal,
            "SELECT tenant, budget, "
            "CAST(SUM(CASE WHEN status = 'reserved' THEN 1 ELSE 0 END) AS INTEGER) AS reserved, "
            "CAST(SUM(CASE WHEN status = 'consumed' THEN 1 ELSE 0 END) AS INTEGER) AS consumed, "
            "CAST(SUM(CASE WHEN status = 'released' THEN 1 ELSE 0 END) AS INTEGER) AS released "
            f"FROM lg_budget_uses {_and(where)} GROUP BY tenant, budget ORDER BY tenant, budget",
            params)

    def runs(self, *, tenant: str | None = None, limit: int = 100) -> list[RunRow]:
        where, params = _where(tenant=tenant)
        return self._rows(
            RunRow,
            "SELECT tenant, run_id, MIN(actor) AS actor, CAST(COUNT(*) AS INTEGER) AS candidates, "
            "CAST(SUM(CASE WHEN state = 'completed' THEN 1 ELSE 0 END) AS INTEGER) AS executed, "
            "MIN(created_at) AS first_at, MAX(updated_at) AS last_at "
            f"FROM lg_intents {_and(where)} GROUP BY tenant, run_id "
            "ORDER BY last_at DESC LIMIT ?", (*params, _bounded(limit)))

    def shadow_decisions(self, *, revision: str | None = None, tenant: str | None = None,
                         flipped_only: bool = False, limit: int = 100) -> list[ShadowRow]:
        where, params = _where(shadow_revision=revision, tenant=tenant)
        if flipped_only:
            where.append("flip <> ''")
        return self._rows(ShadowRow, f"SELECT * FROM lg_shadow_decisions {_and(where)} "
                          "ORDER BY decided_at DESC, intent_id LIMIT ?", (*params, _bounded(limit)))

    def shadow_flips(self, *, revision: str | None = None,
                     tenant: str | None = None) -> list[ShadowFlipCount]:
        where, params = _where(shadow_revision=revision, tenant=tenant)
        where.append("flip <> ''")
        return self._rows(
            ShadowFlipCount,
            "SELECT tool, flip, policy, CAST(COUNT(*) AS INTEGER) AS count "
            f"FROM lg_shadow_decisions {_and(where)} GROUP BY tool, flip, policy "
            "ORDER BY count DESC, tool, flip, policy", params)

    def lineage(self, intent_id: str) -> list[IntentRow]:
        first = self.intent(intent_id)
        seen: set[str] = set()
        while first is not None and first.follows and first.follows not in seen and len(seen) < 256:
            seen.add(first.intent_id)
            earlier = self.intent(first.follows)
            if earlier is None:
                break
            first = earlier
        if first is None:
            return []
        chain: list[IntentRow] = []
        stack, visited = [first], set()
        while stack and len(chain) < 1000:
            row = stack.pop()
            if row.intent_id in visited:
                continue
            visited.add(row.intent_id)
            chain.append(row)
            after = self._rows(IntentRow, "SELECT * FROM lg_intents WHERE follows = ? "
                               "ORDER BY created_at", (row.intent_id,))
            stack.extend(reversed(after))
        return chain

    def ended_before(self, cutoff: str, *, limit: int = 100) -> list[IntentRow]:
        where = f"state IN ({', '.join('?' for _ in ENDED)}) AND NOT archived AND updated_at < ?"
        return self._rows(IntentRow, f"SELECT * FROM lg_intents WHERE {where} "
                          "ORDER BY updated_at LIMIT ?", (*ENDED, cutoff, _bounded(limit)))

    def archived_since(self, since: str, *, limit: int = 100) -> list[IntentRow]:
        return self._rows(IntentRow, "SELECT * FROM lg_intents WHERE archived AND updated_at >= ? "
                          "ORDER BY updated_at LIMIT ?", (since, _bounded(limit)))

    def state_counts(self) -> dict[str, int]:
        with self._tx(commit=False) as c:
            c.execute(self._sql("SELECT state, COUNT(*) AS n FROM lg_intents GROUP BY state"))
            return {str(row["state"]): int(row["n"]) for row in c.fetchall()}


def _values(row: msgspec.Struct, columns: Sequence[str]) -> tuple[Any, ...]:
    return tuple(msgspec.json.encode(getattr(row, c)).decode() if c in _JSON_COLUMNS
                 else getattr(row, c) for c in columns)


def _fields(row: Any) -> dict[str, Any]:
    return {k: msgspec.json.decode(v) if k in _JSON_COLUMNS and isinstance(v, str) else v
            for k, v in dict(row).items()}


def _where(**equal: str | None) -> tuple[list[str], list[Any]]:
    where = [f"{column} = ?" for column, value in equal.items() if value is not None]
    return where, [value for value in equal.values() if value is not None]


def _and(where: list[str]) -> str:
    return f"WHERE {' AND '.join(where)}" if where else ""


def _bounded(limit: int) -> int:
    return max(1, min(int(limit), 1000))


class SQLiteViews(_SQLViews, SQLiteTrackingRecorder):
    """The views in one SQLite file (the embedded default, under ``var/``)."""

    def construct_create_table_statements(self) -> list[str]:
        return [*super().construct_create_table_statements(), *_TABLES]


def _postgres_views() -> type[TrackingRecorder]:
    """The PostgreSQL backend (imported only when configured: psycopg is optional)."""
    from eventsourcing.postgres import PostgresTrackingRecorder
    from psycopg.sql import SQL

    class PostgresViews(_SQLViews, PostgresTrackingRecorder):
        """The views in a PostgreSQL schema (``LOCKGATE_VIEWS_URL=postgresql://...``)."""

        def __init__(self, datastore: Any, **kwargs: Any) -> None:
            super().__init__(datastore, **kwargs)
            self.sql_create_statements.extend(SQL(self._sql(s)).format() for s in _TABLES)

        def _sql(self, statement: str) -> str:
            return _PLACEHOLDER.sub("%s", statement)

    return PostgresViews


_PLACEHOLDER = re.compile(r"\?")


def sqlite_path(var_dir: Path) -> Path:
    """Where the embedded default keeps its views."""
    return var_dir / "views.sqlite"


def open_views(url: str = "", *, var_dir: Path | None = None) -> Views:
    """Open (and create the tables of) the views at ``url``.

    ``url`` is ``postgresql://user:password@host:port/dbname``, or
    ``sqlite:///path/to/file``, or empty for ``<var_dir>/views.sqlite``.

    Raises:
        ViewsError: the URL is not one of those, or the database cannot be opened.
    """
    env: dict[str, str]
    view_class: type[TrackingRecorder]
    if url.startswith(("postgresql://", "postgres://")):
        parsed = urlparse(url)
        env = {
            "PERSISTENCE_MODULE": "eventsourcing.postgres",
            "POSTGRES_DBNAME": unquote(parsed.path.lstrip("/")),
            "POSTGRES_HOST": parsed.hostname or "127.0.0.1",
            "POSTGRES_PORT": str(parsed.port or 5432),
            "POSTGRES_USER": unquote(parsed.username or ""),
            "POSTGRES_PASSWORD": unquote(parsed.password or ""),
        }
        view_class = _postgres_views()
    elif url.startswith("sqlite:///") or not url:
        if url:
            path = Path(url.removeprefix("sqlite:///"))
        elif var_dir is not None:
            path = sqlite_path(var_dir)
        else:
            raise ViewsError("no views URL and no var directory to keep them in")
        path.parent.mkdir(parents=True, exist_ok=True)
        env = {"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(path),
               "SQLITE_LOCK_TIMEOUT": "10"}
        view_class = SQLiteViews
    else:
        raise ViewsError(f"views URL {url.split(':', 1)[0]!r}: expected postgresql:// or sqlite:///")
    env["CREATE_TABLE"] = "no"  # prepare() creates them, after checking the shape
    try:
        recorder = InfrastructureFactory.construct(env=env).tracking_recorder(view_class)
    except Exception as exc:  # the library raises several types for "cannot open"
        raise ViewsError(f"cannot open the views: {exc}") from exc
    # Several processes open the views at once (projector, archiver, console, a CLI):
    # on a new store each would create the tables and insert the library's tracking
    # migration row, and all but one would fail on it. One prepares at a time (a lock
    # beside a SQLite file); and one that lost a race anyway finds the tables made.
    for attempt in range(3):
        try:
            with _preparing(env.get("SQLITE_DBNAME")):
                recorder.prepare()  # type: ignore[attr-defined]
            break
        except Exception as exc:  # noqa: BLE001 - the library's several "cannot" types
            if attempt == 2:
                raise ViewsError(f"cannot open the views: {exc}") from exc
            time.sleep(0.2 * (attempt + 1))
    views: Views = recorder  # type: ignore[assignment]
    return views


@contextmanager
def _preparing(sqlite_file: str | None) -> Iterator[None]:
    """Hold an exclusive lock beside a SQLite file while its tables are made (else nothing)."""
    if not sqlite_file:
        yield
        return
    fd = os.open(f"{sqlite_file}.prepare", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
