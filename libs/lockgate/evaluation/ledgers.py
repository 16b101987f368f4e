"""The demo worlds' ledgers as one list of writes, each naming its intent and its key.

A write is what an adapter did to a world on an intent's behalf: a row of a world's
ledger naming the intent (``intent_id``) and the idempotency key or client reference it
was written under (the intent key of an authorized attempt). Rows that are no write of
their own are left out: the items world's notifications are a publication's fan-out,
the repository's summary and patch artifacts are stored by digest beside the request
rows that name their intents.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from lockgate.worlds.storage import DB_FILE

#: A write: ``world``, ``ledger``, ``intent_id``, ``idempotency_key``.
Write = dict[str, str]


def _rows(world: str, ledger: str, rows: list[dict[str, str]], key: str = "idempotency_key"
          ) -> list[Write]:
    return [{"world": world, "ledger": ledger, "intent_id": str(r.get("intent_id", "")),
             "idempotency_key": str(r.get(key, ""))} for r in rows]


def case_writes(directory: Path) -> list[Write]:
    """Every note the case-notes world holds."""
    from lockgate.worlds.casenotes.world import World

    return _rows("case", "notes", World(directory).ledger())


def items_writes(directory: Path) -> list[Write]:
    """Every draft and publication of the two create_item servers."""
    from lockgate.worlds.items.world import World

    world = World(directory)
    return (_rows("items", "drafts", world.drafts())
            + _rows("items", "publications", world.publications(), key="client_ref"))


def repo_writes(directory: Path) -> list[Write]:
    """Every read, prepared artifact request, test run and board post of the repository."""
    from lockgate.worlds.repo.world import World

    world = World(directory)
    # The request rows name their intents (the artifacts do not); the world has no
    # accessor for them, so they are read from its database, read-only.
    db = sqlite3.connect(f"file:{directory / DB_FILE}?mode=ro", uri=True)
    db.row_factory = sqlite3.Row
    try:
        summaries = [dict(r) for r in db.execute(
            "SELECT intent_id, idempotency_key FROM summary_requests ORDER BY at").fetchall()]
        patches = [dict(r) for r in db.execute(
            "SELECT intent_id, idempotency_key FROM patch_requests ORDER BY at").fetchall()]
    finally:
        db.close()
    return (_rows("repo", "reads", world.reads()) + _rows("repo", "summary_requests", summaries)
            + _rows("repo", "patch_requests", patches) + _rows("repo", "test_runs", world.test_runs())
            + _rows("repo", "board_posts", world.board_posts(), key="client_ref"))


_READERS: dict[str, Callable[[Path], list[Write]]] = {
    "case": case_writes, "items": items_writes, "repo": repo_writes,
}


def world_writes(dirs: dict[str, Path]) -> list[Write]:
    """The writes of every world in ``dirs`` (``case``, ``items``, ``repo`` → its directory);
    a world whose directory does not exist has none."""
    writes: list[Write] = []
    for name, directory in sorted(dirs.items()):
        if name in _READERS and (directory / DB_FILE).exists():
            writes += _READERS[name](directory)
    return writes
