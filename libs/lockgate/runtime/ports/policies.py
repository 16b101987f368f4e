"""The policies port: the shadow bundle beside the active one, and the log of bundle changes.

An operator starts a shadow bundle (``lockgate policy shadow DIR``): its files are kept
under one key of the ``LG_POLICY`` bucket, and every policy replica decides each request
under it too (``ShadowSource``), recording that decision beside its own. Each change
(a shadow started or stopped, a bundle promoted) is added to the log under another key
(the last ``CHANGES_KEPT``, changed by compare-and-set): the log ``lockgate policy shadow``
prints.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import Protocol

import msgspec
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from lockgate.authz.engine import BundleError, PolicyBundle
from lockgate.contracts.messages import PolicyChange
from lockgate.runtime.ports.buckets import compare_and_set
from lockgate.runtime.streams import POLICY_CHANGES_KEPT

__all__ = ["CHANGES_KEPT", "KvPolicies", "MemoryPolicies", "Policies", "PublishedBundle", "ShadowSource"]

log = logging.getLogger("lockgate.policy")

_SHADOW = "shadow"
_CHANGES = "changes"
#: Compare-and-set tries of one change of the log.
_TRIES = 8
#: Changes the log keeps.
CHANGES_KEPT = POLICY_CHANGES_KEPT


class PublishedBundle(msgspec.Struct, frozen=True, kw_only=True):
    """A bundle's files as an operator handed them over, and who did, when."""

    revision: str
    files: dict[str, str]
    by: str
    at: datetime


_LOG = msgspec.json.Decoder(list[PolicyChange])


class Policies(Protocol):
    """The shadow bundle and the changes' log.

    A broker that does not answer raises ``nats.errors.Error``.
    """

    async def shadow(self) -> PublishedBundle | None:
        """The shadow bundle, if one runs."""
        ...

    async def set_shadow(self, bundle: PublishedBundle) -> None:
        """Run ``bundle`` as the shadow (replacing any)."""
        ...

    async def clear_shadow(self) -> None:
        """Stop the shadow."""
        ...

    async def record(self, change: PolicyChange) -> None:
        """Add a change to the log."""
        ...

    async def changes(self) -> list[PolicyChange]:
        """The log, oldest first (the last ``CHANGES_KEPT``)."""
        ...


class KvPolicies:
    """``Policies`` over the ``LG_POLICY`` bucket."""

    def __init__(self, kv: KeyValue) -> None:
        self._kv = kv

    async def shadow(self) -> PublishedBundle | None:
        """The shadow bundle's key, if set."""
        try:
            entry = await self._kv.get(_SHADOW)
        except KeyNotFoundError:
            return None
        return msgspec.json.decode(entry.value, type=PublishedBundle) if entry.value else None

    async def set_shadow(self, bundle: PublishedBundle) -> None:
        """Write the shadow's key."""
        await self._kv.put(_SHADOW, msgspec.json.encode(bundle))

    async def clear_shadow(self) -> None:
        """Delete the shadow's key."""
        await self._kv.delete(_SHADOW)

    async def record(self, change: PolicyChange) -> None:
        """Add the change to the log's key, by compare-and-set (two replicas logging at once
        both log).

        Raises:
            KeyWrongLastSequenceError: it kept changing under every try.
        """
        def added(data: bytes | None) -> bytes:
            return msgspec.json.encode([*_LOG.decode(data or b"[]"), change][-CHANGES_KEPT:])

        if not await compare_and_set(self._kv, _CHANGES, added, _TRIES):
            raise KeyWrongLastSequenceError(description=f"{_CHANGES} kept changing")

    async def changes(self) -> list[PolicyChange]:
        """The log's key."""
        try:
            entry = await self._kv.get(_CHANGES)
        except KeyNotFoundError:
            return []
        return _LOG.decode(entry.value or b"[]")


class MemoryPolicies:
    """The fake ``Policies``."""

    def __init__(self) -> None:
        self.published: PublishedBundle | None = None
        self.log: list[PolicyChange] = []

    async def shadow(self) -> PublishedBundle | None:
        """The shadow set last."""
        return self.published

    async def set_shadow(self, bundle: PublishedBundle) -> None:
        """Set it."""
        self.published = bundle

    async def clear_shadow(self) -> None:
        """Unset it."""
        self.published = None

    async def record(self, change: PolicyChange) -> None:
        """Append it."""
        self.log = [*self.log, change][-CHANGES_KEPT:]

    async def changes(self) -> list[PolicyChange]:
        """The log."""
        return list(self.log)


class ShadowSource:
    """The shadow bundle to decide beside the active one: looked up at most every
    ``check_every_s``, loaded again only when its revision changes. A shadow that does not
    load (it was validated when it was set: a later schema, say) is logged and skipped."""

    def __init__(self, policies: Policies, *, check_every_s: float = 2.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._policies = policies
        self._check_every_s = check_every_s
        self._clock = clock
        self._checked: float | None = None
        self._revision = ""
        self._bundle: PolicyBundle | None = None

    async def current(self) -> PolicyBundle | None:
        """The shadow bundle now (``None``: none runs, or it cannot be had)."""
        now = self._clock()
        if self._checked is not None and now - self._checked < self._check_every_s:
            return self._bundle
        self._checked = now
        try:
            published = await self._policies.shadow()
        except Exception as exc:  # noqa: BLE001 -- a shadow never holds up a decision
            log.warning("shadow bundle not read: %s", exc)
            return self._bundle
        if published is None:
            self._revision, self._bundle = "", None
        elif published.revision != self._revision:
            self._revision = published.revision
            try:
                self._bundle = PolicyBundle.from_files(published.files)
            except BundleError as exc:
                log.error("shadow bundle %s not loaded: %s", published.revision, exc)
                self._bundle = None
        return self._bundle
