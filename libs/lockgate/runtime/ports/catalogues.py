"""The catalogues port: turn catalogues, content-addressed by their digest.

A catalogue is stored once under its digest (``sha256:`` dropped) in ``LG_CATALOGUES`` and
never changes, so what was read once may be kept for good.
"""

from __future__ import annotations

from typing import Protocol

import msgspec
from nats.js import JetStreamContext
from nats.js.errors import InvalidKeyError
from nats.js.kv import KeyValue

from lockgate.contracts.messages import Catalogue
from lockgate.runtime.ports._keys import InvalidKey, checked
from lockgate.runtime.ports.buckets import confirmed_get
from lockgate.runtime.streams import CATALOGUES_BUCKET

__all__ = ["Catalogues", "KvCatalogues", "MemoryCatalogues"]


class Catalogues(Protocol):
    """Catalogue snapshots by key (their digest without ``sha256:``).

    A broker that does not answer raises ``nats.errors.Error``.
    """

    async def put(self, key: str, catalogue: Catalogue) -> None:
        """Store ``catalogue`` under ``key`` (the same catalogue again changes nothing).

        Raises:
            InvalidKey: ``key`` is no key of the bucket.
        """
        ...

    async def get(self, key: str) -> Catalogue | None:
        """The catalogue stored under ``key`` (``None``: none, even on the bucket's leader).

        Raises:
            InvalidKey: ``key`` is no key of the bucket.
        """
        ...


class KvCatalogues:
    """``Catalogues`` over the ``LG_CATALOGUES`` bucket."""

    def __init__(self, js: JetStreamContext, kv: KeyValue) -> None:
        self._js = js
        self._kv = kv

    async def put(self, key: str, catalogue: Catalogue) -> None:
        """Store ``catalogue`` under ``key``."""
        try:
            await self._kv.put(key, msgspec.json.encode(catalogue))
        except InvalidKeyError as exc:
            raise InvalidKey(str(exc)) from None

    async def get(self, key: str) -> Catalogue | None:
        """The catalogue stored under ``key`` (a miss asks the bucket's leader)."""
        try:
            stored = await confirmed_get(self._js, self._kv, CATALOGUES_BUCKET, key)
        except InvalidKeyError as exc:
            raise InvalidKey(str(exc)) from None
        return msgspec.json.decode(stored, type=Catalogue) if stored is not None else None


class MemoryCatalogues:
    """The fake ``Catalogues``: a dict."""

    def __init__(self) -> None:
        self.stored: dict[str, Catalogue] = {}

    async def put(self, key: str, catalogue: Catalogue) -> None:
        """Store ``catalogue`` under ``key``."""
        self.stored[checked(key)] = catalogue

    async def get(self, key: str) -> Catalogue | None:
        """The catalogue stored under ``key``."""
        return self.stored.get(checked(key))
