"""The runs port: a run's authoritative context, its turns' catalogues, what happened in it.

Everything is in the ``LG_RUNS`` bucket: the run (written once when it opens), each turn's
catalogue key (written once), the mark that a capability executed in the run (never
unmarked) and the latest refused call of a tool in a turn (the one a correction follows).
A run, a turn and a done mark never change once written, so a process keeps them in memory.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from typing import Protocol

import msgspec
from nats.js import JetStreamContext
from nats.js.errors import InvalidKeyError, KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from lockgate.contracts.messages import RunContext
from lockgate.contracts.subjects import done_key, refused_key, run_key, turn_key
from lockgate.core.bounded import keep
from lockgate.core.ids import is_subject_token
from lockgate.runtime.ports._keys import InvalidKey, checked
from lockgate.runtime.ports.buckets import confirmed_get
from lockgate.runtime.streams import RUNS_BUCKET

__all__ = ["InvalidKey", "KvRuns", "MemoryRuns", "Runs"]

#: Runs kept in memory per process.
_RUNS_CACHED = 4096


class Runs(Protocol):
    """Runs and what their turns were offered and did.

    Ids that make no key raise ``InvalidKey`` (or ``ValueError`` from the key builders)
    where a method says so; a broker that does not answer raises ``nats.errors.Error``.
    """

    async def get(self, tenant: str, run_id: str) -> RunContext | None:
        """The run's context, or ``None`` when no such run was opened (ids that make no key
        included). A run opened a moment ago is found even on a replica behind its leader."""
        ...

    async def open(self, run: RunContext) -> None:
        """Store the run's context (a run opened again is stored again, the same)."""
        ...

    async def open_turn(self, tenant: str, run_id: str, turn_id: str, catalogue_key: str) -> bool:
        """Name the catalogue a turn is offered; ``False`` when the turn was opened before
        (its catalogue stays the one it was opened with).

        Raises:
            InvalidKey: ids that make no key.
        """
        ...

    async def turn(self, tenant: str, run_id: str, turn_id: str) -> str | None:
        """The catalogue key a turn was opened with (``None``: no such turn).

        Raises:
            InvalidKey: ids that make no key.
        """
        ...

    async def mark_done(self, tenant: str, run_id: str, capability: str) -> None:
        """Mark ``capability`` executed in the run (idempotent; never unmarked).

        Raises:
            InvalidKey: ids that make no key.
        """
        ...

    async def done(self, tenant: str, run_id: str, capability: str) -> bool:
        """True when ``capability`` was marked executed in the run.

        Raises:
            InvalidKey: ids that make no key.
        """
        ...

    async def mark_refused(self, tenant: str, run_id: str, turn_id: str, tool: str,
                           intent_id: str) -> None:
        """Remember ``intent_id`` as the latest refused call of ``tool`` in the turn.

        Raises:
            InvalidKey: ids that make no key.
        """
        ...

    async def refused(self, tenant: str, run_id: str, turn_id: str, tool: str) -> str | None:
        """The latest refused call of ``tool`` in the turn (its intent id), if any.

        Raises:
            InvalidKey: ids that make no key.
        """
        ...


class KvRuns:
    """``Runs`` over the ``LG_RUNS`` bucket."""

    def __init__(self, js: JetStreamContext, kv: KeyValue) -> None:
        self._js = js
        self._kv = kv
        self._runs: OrderedDict[tuple[str, str], RunContext] = OrderedDict()

    async def get(self, tenant: str, run_id: str) -> RunContext | None:
        """The run's context (kept in memory once read), or ``None``."""
        if not (is_subject_token(tenant) and is_subject_token(run_id)):
            return None
        cached = self._runs.get((tenant, run_id))
        if cached is not None:
            self._runs.move_to_end((tenant, run_id))
            return cached
        # A run opened a moment ago may not be on every replica yet: a miss asks the leader.
        value = await confirmed_get(self._js, self._kv, RUNS_BUCKET, run_key(tenant, run_id))
        if value is None:
            return None
        run = msgspec.json.decode(value, type=RunContext)
        return keep(self._runs, (tenant, run_id), run, _RUNS_CACHED)

    async def open(self, run: RunContext) -> None:
        """Store the run's context."""
        await self._kv.put(run_key(run.tenant, run.run_id), msgspec.json.encode(run))

    async def open_turn(self, tenant: str, run_id: str, turn_id: str, catalogue_key: str) -> bool:
        """Name the catalogue a turn is offered; ``False`` when it was opened before."""
        try:
            await self._kv.create(turn_key(tenant, run_id, turn_id), catalogue_key.encode())
        except KeyWrongLastSequenceError:
            return False
        except InvalidKeyError as exc:
            raise InvalidKey(str(exc)) from None
        return True

    async def turn(self, tenant: str, run_id: str, turn_id: str) -> str | None:
        """The catalogue key a turn was opened with (asked of the leader on a miss)."""
        found = await self._confirmed(turn_key(tenant, run_id, turn_id))
        return found.decode() if found is not None else None

    async def mark_done(self, tenant: str, run_id: str, capability: str) -> None:
        """Mark ``capability`` executed in the run."""
        # A create (revision 0) that another replica's mark refuses in the same round trip:
        # marks are never deleted, so ``KeyValue.create`` would look for a marker for nothing.
        try:
            with contextlib.suppress(KeyWrongLastSequenceError):
                await self._kv.update(done_key(tenant, run_id, capability), b"1", last=0)
        except InvalidKeyError as exc:
            raise InvalidKey(str(exc)) from None

    async def done(self, tenant: str, run_id: str, capability: str) -> bool:
        """True when ``capability`` was marked executed in the run (asked of the leader on a miss)."""
        return await self._confirmed(done_key(tenant, run_id, capability)) is not None

    async def mark_refused(self, tenant: str, run_id: str, turn_id: str, tool: str,
                           intent_id: str) -> None:
        """Remember ``intent_id`` as the latest refused call of ``tool`` in the turn."""
        try:
            await self._kv.put(refused_key(tenant, run_id, turn_id, tool), intent_id.encode())
        except InvalidKeyError as exc:
            raise InvalidKey(str(exc)) from None

    async def refused(self, tenant: str, run_id: str, turn_id: str, tool: str) -> str | None:
        """The latest refused call of ``tool`` in the turn (a replica's answer: a mark a moment
        old may be missed, which loses a lineage link and allows no effect)."""
        try:
            entry = await self._kv.get(refused_key(tenant, run_id, turn_id, tool))
        except KeyNotFoundError:
            return None
        except InvalidKeyError as exc:
            raise InvalidKey(str(exc)) from None
        return (entry.value or b"").decode() or None

    async def _confirmed(self, key: str) -> bytes | None:
        try:
            return await confirmed_get(self._js, self._kv, RUNS_BUCKET, key)
        except InvalidKeyError as exc:
            raise InvalidKey(str(exc)) from None


class MemoryRuns:
    """The fake ``Runs``: a dict, with the bucket's key rules."""

    def __init__(self) -> None:
        self.values: dict[str, bytes] = {}

    async def get(self, tenant: str, run_id: str) -> RunContext | None:
        """The run's context, or ``None``."""
        if not (is_subject_token(tenant) and is_subject_token(run_id)):
            return None
        value = self.values.get(run_key(tenant, run_id))
        return msgspec.json.decode(value, type=RunContext) if value is not None else None

    async def open(self, run: RunContext) -> None:
        """Store the run's context."""
        self.values[checked(run_key(run.tenant, run.run_id))] = msgspec.json.encode(run)

    async def open_turn(self, tenant: str, run_id: str, turn_id: str, catalogue_key: str) -> bool:
        """Name the catalogue a turn is offered; ``False`` when it was opened before."""
        key = checked(turn_key(tenant, run_id, turn_id))
        if key in self.values:
            return False
        self.values[key] = catalogue_key.encode()
        return True

    async def turn(self, tenant: str, run_id: str, turn_id: str) -> str | None:
        """The catalogue key a turn was opened with."""
        found = self.values.get(checked(turn_key(tenant, run_id, turn_id)))
        return found.decode() if found is not None else None

    async def mark_done(self, tenant: str, run_id: str, capability: str) -> None:
        """Mark ``capability`` executed in the run."""
        self.values.setdefault(checked(done_key(tenant, run_id, capability)), b"1")

    async def done(self, tenant: str, run_id: str, capability: str) -> bool:
        """True when ``capability`` was marked executed in the run."""
        return checked(done_key(tenant, run_id, capability)) in self.values

    async def mark_refused(self, tenant: str, run_id: str, turn_id: str, tool: str,
                           intent_id: str) -> None:
        """Remember ``intent_id`` as the latest refused call of ``tool`` in the turn."""
        self.values[checked(refused_key(tenant, run_id, turn_id, tool))] = intent_id.encode()

    async def refused(self, tenant: str, run_id: str, turn_id: str, tool: str) -> str | None:
        """The latest refused call of ``tool`` in the turn, if any."""
        found = self.values.get(checked(refused_key(tenant, run_id, turn_id, tool)))
        return found.decode() or None if found is not None else None
