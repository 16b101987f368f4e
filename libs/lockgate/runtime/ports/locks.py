"""The locks port: per-resource locks, taken and released by the intent that holds them.

``ResourceLocks`` keeps them in ``LG_LOCKS``: one compare-and-set to take, one to release. A lock is the key's value (the holder's intent id); a free lock is a key with no value
or with a delete marker. Every write names the revision it expects the key to be at,
so two executors never both take a lock. A key's revision is remembered by the process
that wrote it last: taking a lock this process released a moment ago (the common case:
one executor, resources used again and again) is one write, releasing the lock it took
is one write. A key this process never wrote, or last wrote longer ago than the bucket
keeps a message, is most likely no key at all: taking it is a create, one write too.
Only when another process wrote the key in between does taking it cost a read. Locks
expire with the bucket's ``max_age`` (``LOCK_TTL_S``), so one left by a crashed executor
frees itself even if nothing releases it from the record.
"""

from __future__ import annotations

import contextlib
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

from nats.js import JetStreamContext
from nats.js.errors import APIError, KeyNotFoundError
from nats.js.kv import KeyValue

from lockgate.core.bounded import keep
from lockgate.eventstore.jetstream import CONFLICT_CODES
from lockgate.runtime.ports.buckets import leader_entry
from lockgate.runtime.topology import LOCK_TTL_S, LOCKS_BUCKET

#: JetStream's "wrong last sequence": the key moved since the revision named. A
#: replicated bucket (R3) may answer 10164 instead, the same refusal without the number.
_WRONG_LAST = CONFLICT_CODES
#: Keys whose last revision and value a process remembers (oldest forgotten).
_REVISIONS_KEPT = 65_536
#: How long after the bucket's ``max_age`` a message is taken to be gone: the server
#: removes expired messages on a timer, not at the instant they expire.
_EXPIRY_SLACK_S = 5.0


class Locks(Protocol):
    """Resource locks: at most one holder per key; a lock expires after ``LOCK_TTL_S``.

    A broker that does not answer raises ``nats.errors.Error``.
    """

    async def take(self, key: str, holder: bytes) -> bool:
        """Take the lock for ``holder``; ``False`` while another holds it (taking a lock
        ``holder`` holds already succeeds)."""
        ...

    async def release(self, key: str, holder: bytes, *, sweep: bool = False) -> None:
        """Free the lock if ``holder`` holds it; a lock another holds is left alone.
        ``sweep``: most likely freed long ago by another process (ask the leader at once)."""
        ...

    async def holder(self, key: str) -> bytes | None:
        """Who holds the lock now (``None``: free), as the bucket's leader has it."""
        ...


class _Moved(Exception):
    """The key is not at the revision a write expected."""


class ResourceLocks:
    """Take and release resource locks with compare-and-set writes."""

    def __init__(
        self, js: JetStreamContext, kv: KeyValue, bucket: str = LOCKS_BUCKET, *,
        max_age_s: float | None = LOCK_TTL_S, clock_s: Callable[[], float] = time.monotonic,
    ) -> None:
        """``max_age_s``: how long the bucket keeps a message (``None``: for ever)."""
        self._js = js
        self._kv = kv
        self._bucket = bucket
        self._prefix = f"$KV.{bucket}."
        self._max_age_s = max_age_s
        self._clock_s = clock_s
        #: key → (revision, value, when) as this process last wrote or read it.
        self._known: OrderedDict[str, tuple[int, bytes, float]] = OrderedDict()

    async def take(self, key: str, holder: bytes) -> bool:
        """Take the lock for ``holder``; ``False`` while another holds it.

        Taking a lock ``holder`` already holds succeeds (a redelivered gate).
        """
        known = self._known.get(key)
        expect: int | None = None
        if known is None or self._gone(known):
            # Never written here, or what was is gone: a create (expected revision 0)
            # succeeds exactly when the key has no message, so nothing is read first.
            # When it has one after all (another executor wrote it), the create is
            # refused and the key is read.
            expect = 0
        elif known[1] in (b"", holder):
            # Free (or ours) when last seen: the write succeeds only if it still is.
            expect = known[0]
        if expect is not None:
            try:
                await self._write(key, holder, expect=expect)
                return True
            except _Moved:
                pass
        revision, value = await self._read(key)
        if value:
            return value == holder
        try:
            await self._write(key, holder, expect=revision)
        except _Moved:
            return False  # another took it between the read and the write
        return True

    async def release(self, key: str, holder: bytes, *, sweep: bool = False) -> None:
        """Free the lock if ``holder`` holds it; a lock another holds is left alone.

        ``sweep``: the lock was most likely freed long ago, by another process, so the
        bucket's leader is asked at once (one round trip; a replica's answer would have
        to be confirmed with it anyway).
        """
        known = self._known.get(key)
        if known is not None and known[1] == holder and not self._gone(known):
            try:
                await self._write(key, b"", expect=known[0], delete=True)
                return
            except _Moved:
                pass
        # A sweep skips the replica's read: it would most likely disagree, and be asked again.
        revision, value = (0, b"") if sweep else await self._read(key)
        if value != holder:
            # A replica behind the leader may not have this holder's take yet (another
            # executor replica took it): left to expire, the lock would stall the
            # resource for its TTL. Only the leader's answer is believed here.
            found = await leader_entry(self._js, self._bucket, key)
            if found is None or found.value != holder:
                return
            revision = found.revision
        # Moved meanwhile: released already (the lock durable and the fast path both got here).
        with contextlib.suppress(_Moved):
            await self._write(key, b"", expect=revision, delete=True)

    async def holder(self, key: str) -> bytes | None:
        """Who holds the lock now (``None``: free), as the bucket's leader has it."""
        found = await leader_entry(self._js, self._bucket, key)
        return found.value if found is not None and found.value else None

    async def _read(self, key: str) -> tuple[int, bytes]:
        """The key's revision (0 when it has none) and value (empty when free)."""
        try:
            entry = await self._kv.get(key)
        except KeyNotFoundError as exc:
            marker = getattr(exc, "entry", None)
            revision = int(marker.revision) if marker is not None and marker.revision else 0
            self._remember(key, revision, b"")
            return revision, b""
        revision, value = int(entry.revision or 0), entry.value or b""
        self._remember(key, revision, value)
        return revision, value

    async def _write(self, key: str, value: bytes, *, expect: int, delete: bool = False) -> None:
        headers = {"Nats-Expected-Last-Subject-Sequence": str(expect)}
        if delete:
            headers["KV-Operation"] = "DEL"
        try:
            ack = await self._js.publish(self._prefix + key, value, headers=headers)
        except APIError as exc:
            if exc.err_code in _WRONG_LAST:
                self._known.pop(key, None)
                raise _Moved from None
            raise
        self._remember(key, int(ack.seq), b"" if delete else value)

    def _remember(self, key: str, revision: int, value: bytes) -> None:
        keep(self._known, key, (revision, value, self._clock_s()), _REVISIONS_KEPT)

    def _gone(self, known: tuple[int, bytes, float]) -> bool:
        """True when the revision remembered has expired from the bucket since: it was
        written before it was remembered, so it is older than the time since then."""
        return self._max_age_s is not None and (
            self._clock_s() - known[2] > self._max_age_s + _EXPIRY_SLACK_S)


class MemoryLocks:
    """The fake ``Locks``: holders in a dict; a lock taken longer ago than ``max_age_s`` is free."""

    def __init__(self, *, max_age_s: float | None = LOCK_TTL_S,
                 clock_s: Callable[[], float] = time.monotonic) -> None:
        self._max_age_s = max_age_s
        self._clock_s = clock_s
        #: key → (holder, when taken).
        self._held: dict[str, tuple[bytes, float]] = {}

    async def take(self, key: str, holder: bytes) -> bool:
        """Take the lock for ``holder``; ``False`` while another holds it."""
        current = await self.holder(key)
        if current not in (None, holder):
            return False
        self._held[key] = (holder, self._clock_s())
        return True

    async def release(self, key: str, holder: bytes, *, sweep: bool = False) -> None:
        """Free the lock if ``holder`` holds it."""
        if await self.holder(key) == holder:
            del self._held[key]

    async def holder(self, key: str) -> bytes | None:
        """Who holds the lock now (``None``: free, or expired)."""
        held = self._held.get(key)
        if held is None:
            return None
        if self._max_age_s is not None and self._clock_s() - held[1] > self._max_age_s:
            del self._held[key]
            return None
        return held[0]
