"""The history port: a run's history (``lockgate.authz.history``) kept in the ``LG_PROGRESS`` bucket.

One document per run (``RunRecord``) and one per window (``Tally``: an actor's or a
tenant's hour or day), each changed only by compare-and-set. A decision reads the
documents it weighs (``read``) and, when it admits the intent, holds it in each of them
at the revisions it read (``admit``): a document changed in between raises
``HistoryMoved``, and the decision is made again on the new history. So two calls
decided at the same moment see each other, whichever replica decides them.

The keys an intent is held under are recorded on its decision (``PolicyDecided.reservations``,
beside its budgets' holds), so its end settles exactly those (``end``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol, TypeVar

import msgspec
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from lockgate.authz.history import (
    WINDOWS,
    Authorized,
    Held,
    HistoryFacts,
    RunRecord,
    Tally,
    admit_in_run,
    authorize_in_run,
    end_in_run,
    hold,
    settle,
    unhold,
    unhold_in_run,
)

__all__ = ["HISTORY_PREFIX", "History", "HistoryMoved", "KvHistory", "MemoryHistory", "Reading",
           "is_history_key", "run_key", "window_key"]

#: Every history key starts so (``PolicyDecided.reservations`` tells them from budgets' by it).
HISTORY_PREFIX = "history."
_NOT_KEY = re.compile(r"[^-_=a-zA-Z0-9]")
#: Compare-and-set tries of a change that is not tied to a read (authorization, an end).
_TRIES = 16

_Doc = TypeVar("_Doc", RunRecord, Tally)


class HistoryMoved(Exception):  # noqa: N818 -- a signal to decide again, not an error
    """A history document changed since it was read: decide again on the new one."""


def _token(value: str) -> str:
    return _NOT_KEY.sub("_", value)


def run_key(tenant: str, run_id: str) -> str:
    """Key of a run's record."""
    return f"{HISTORY_PREFIX}{_token(tenant)}.run.{_token(run_id)}"


def window_key(name: str, tenant: str, actor: str, now: datetime) -> str:
    """Key of the window ``name`` (``actor_hour``, ...) that ``now`` falls in, for this actor."""
    scope, length = WINDOWS[name]
    bucket = f"{name}{int(now.timestamp() // length)}"
    who = f"actor.{_token(actor)}" if scope == "actor" else "tenant"
    return f"{HISTORY_PREFIX}{_token(tenant)}.{who}.{bucket}"


def is_history_key(key: str) -> bool:
    """Whether a reservation names a history document (else a budget's counter)."""
    return key.startswith(HISTORY_PREFIX)


@dataclass(frozen=True)
class Reading:
    """The history one decision was made on: its facts, and each document's revision."""

    facts: HistoryFacts
    run: str
    revisions: Mapping[str, int | None] = field(default_factory=dict)
    documents: Mapping[str, RunRecord | Tally] = field(default_factory=dict)


class History(Protocol):
    """A run's history and its windows' tallies.

    A broker that does not answer raises ``nats.errors.Error``.
    """

    async def read(self, tenant: str, run_id: str, actor: str, intent_id: str, now: datetime, *,
                   windows: bool) -> Reading:
        """The run's history as of now, without ``intent_id``'s own hold (with the actor's and
        tenant's windows only when ``windows``)."""
        ...

    async def admit(self, reading: Reading, intent_id: str, held: Held) -> list[str]:
        """Hold the admitted intent in every document read, at the revisions read; return
        their keys (the intent's reservations).

        Raises:
            HistoryMoved: one of them changed since; read and decide again.
        """
        ...

    async def authorize(self, tenant: str, run_id: str, authorized: Authorized) -> None:
        """Note that the gate let ``authorized`` go (untrusted content, data read, destinations)."""
        ...

    async def end(self, tenant: str, run_id: str, keys: Sequence[str], intent_id: str,
                  capability: str, effect_class: str, ended: str) -> None:
        """Settle the intent's end in the run's record and in the documents ``keys`` name."""
        ...


class _Documents:
    """``History`` over any store of versioned documents (``_get`` and ``_put``)."""

    async def _get(self, key: str) -> tuple[bytes | None, int | None]:
        raise NotImplementedError

    async def _put(self, key: str, value: bytes, revision: int | None) -> bool:
        """Write ``value`` if the key is still at ``revision`` (``None``: absent); else ``False``."""
        raise NotImplementedError

    async def _load(self, key: str, kind: type[_Doc]) -> tuple[_Doc | None, int | None]:
        data, revision = await self._get(key)
        return (msgspec.json.decode(data, type=kind) if data else None), revision

    async def read(self, tenant: str, run_id: str, actor: str, intent_id: str, now: datetime, *,
                   windows: bool) -> Reading:
        """The run's record and, when asked, the windows' tallies."""
        key = run_key(tenant, run_id)
        record, revision = await self._load(key, RunRecord)
        revisions: dict[str, int | None] = {key: revision}
        documents: dict[str, RunRecord | Tally] = {key: record or RunRecord()}
        tallies: dict[str, Tally | None] = {}
        if windows:
            for name in WINDOWS:
                wkey = window_key(name, tenant, actor, now)
                tally, revisions[wkey] = await self._load(wkey, Tally)
                tallies[name] = tally
                documents[wkey] = tally or Tally()
        return Reading(HistoryFacts.of(record, tallies, exclude=intent_id), key, revisions, documents)

    async def admit(self, reading: Reading, intent_id: str, held: Held) -> list[str]:
        """Hold the intent in each document read, each at its revision; when one moved, take
        back the holds written before it, as when the broker fails midway (none stays behind
        a decision that is made again or paused: its keys are on no event, and no end would
        settle them)."""
        written: list[str] = []
        try:
            for key, document in reading.documents.items():
                changed = (admit_in_run(document, intent_id, held) if isinstance(document, RunRecord)
                           else hold(document, intent_id, held))
                if changed is document:
                    continue
                if not await self._put(key, msgspec.json.encode(changed), reading.revisions.get(key)):
                    raise HistoryMoved(key)
                written.append(key)
        except Exception:  # moved, or the broker failed midway: nothing admitted, nothing held
            for done in written:
                await self._unhold(done, reading.run, intent_id)
            raise
        return list(reading.documents)

    async def _unhold(self, key: str, run: str, intent_id: str) -> None:
        """Take an intent's hold out of one document (a run's record or a window's tally)."""
        if key == run:
            await self._change(key, RunRecord, lambda record: unhold_in_run(record, intent_id))
        else:
            await self._change(key, Tally, lambda tally: unhold(tally, intent_id))

    async def authorize(self, tenant: str, run_id: str, authorized: Authorized) -> None:
        """Note the authorization in the run's record."""
        await self._change(run_key(tenant, run_id), RunRecord,
                           lambda record: authorize_in_run(record, authorized))

    async def end(self, tenant: str, run_id: str, keys: Sequence[str], intent_id: str,
                  capability: str, effect_class: str, ended: str) -> None:
        """Settle the end in the run's record and each window's tally."""
        key = run_key(tenant, run_id)
        await self._change(key, RunRecord,
                           lambda record: end_in_run(record, intent_id, capability, effect_class, ended))
        for wkey in keys:
            if is_history_key(wkey) and wkey != key:
                await self._change(wkey, Tally, lambda tally: settle(tally, intent_id, ended))

    async def _change(self, key: str, kind: type[_Doc], change: Callable[[_Doc], _Doc]) -> None:
        """Apply ``change`` to the document by compare-and-set, again after a lost race."""
        for _ in range(_TRIES):
            document, revision = await self._load(key, kind)
            current = document if document is not None else kind()
            changed = change(current)
            if changed is current and document is not None:
                return
            if await self._put(key, msgspec.json.encode(changed), revision):
                return
        raise HistoryMoved(key)


class KvHistory(_Documents):
    """``History`` over the ``LG_PROGRESS`` bucket."""

    def __init__(self, kv: KeyValue) -> None:
        self._kv = kv

    async def _get(self, key: str) -> tuple[bytes | None, int | None]:
        try:
            entry = await self._kv.get(key)
        except KeyNotFoundError:
            return None, None
        return entry.value, entry.revision

    async def _put(self, key: str, value: bytes, revision: int | None) -> bool:
        try:
            if revision is None:
                await self._kv.create(key, value)
            else:
                await self._kv.update(key, value, last=revision)
        except KeyWrongLastSequenceError:
            return False
        return True


class MemoryHistory(_Documents):
    """The fake ``History``: the documents in a dict, with revisions."""

    def __init__(self) -> None:
        self.documents: dict[str, tuple[bytes, int]] = {}
        self._revision = 0

    async def _get(self, key: str) -> tuple[bytes | None, int | None]:
        found = self.documents.get(key)
        return (found[0], found[1]) if found else (None, None)

    async def _put(self, key: str, value: bytes, revision: int | None) -> bool:
        found = self.documents.get(key)
        if (found[1] if found else None) != revision:
            return False
        self._revision += 1
        self.documents[key] = (value, self._revision)
        return True
