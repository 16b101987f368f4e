"""The capabilities port: what adapters registered (their contracts and last heartbeats).

``CapabilityRegistry`` reads them from the ``LG_CAPABILITIES`` bucket (cached for a moment);
``MemoryCapabilities`` is the fake a test registers contracts with.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

import msgspec
from nats.js import JetStreamContext
from nats.js.errors import KeyNotFoundError, NoKeysError
from nats.js.kv import KeyValue

from lockgate.contracts.capability import CapabilityContract
from lockgate.contracts.messages import Describe
from lockgate.contracts.subjects import capability_key
from lockgate.core.ids import is_capability_name
from lockgate.runtime.streams import CAPABILITIES_BUCKET

__all__ = ["Capabilities", "CapabilityRegistry", "MemoryCapabilities"]


class Capabilities(Protocol):
    """Registered capabilities by name. A broker that does not answer raises ``nats.errors.Error``."""

    async def registration(self, capability: str) -> Describe | None:
        """The adapter's registration of ``capability`` (``None``: unknown, or no capability name)."""
        ...

    async def get(self, capability: str) -> CapabilityContract | None:
        """The registered contract of ``capability`` (``None``: unknown)."""
        ...

    async def names(self) -> list[str]:
        """Every registered capability name, sorted."""
        ...


class MemoryCapabilities:
    """The fake ``Capabilities``: registrations in a dict."""

    def __init__(self, *contracts: CapabilityContract) -> None:
        self.registered: dict[str, Describe] = {}
        for contract in contracts:
            self.register(Describe(contract=contract, adapter="memory"))

    def register(self, described: Describe) -> None:
        """Register (or register again) an adapter's capability."""
        self.registered[described.contract.name] = described

    def unregister(self, capability: str) -> None:
        """Forget ``capability`` (its registration expired)."""
        self.registered.pop(capability, None)

    async def registration(self, capability: str) -> Describe | None:
        """The registration of ``capability``."""
        if not is_capability_name(capability):
            return None
        return self.registered.get(capability)

    async def get(self, capability: str) -> CapabilityContract | None:
        """The registered contract of ``capability``."""
        described = await self.registration(capability)
        return described.contract if described else None

    async def names(self) -> list[str]:
        """Every registered capability name, sorted."""
        return sorted(self.registered)


#: Pauses before asking again when the bucket's key listing comes back empty.
EMPTY_RETRIES_S = (0.01, 0.05)


class CapabilityRegistry:
    """Contracts by capability name, cached for ``ttl_s`` seconds."""

    def __init__(self, kv: KeyValue, *, ttl_s: float = 2.0, js: JetStreamContext | None = None) -> None:
        self._kv = kv
        self._js = js
        self._ttl_s = ttl_s
        self._cache: dict[str, tuple[float, Describe | None]] = {}

    async def registration(self, capability: str) -> Describe | None:
        """The adapter's registration of ``capability``: contract and last heartbeat.

        A name outside the capability grammar is never registered and never looked up.
        """
        if not is_capability_name(capability):
            return None
        now = time.monotonic()
        cached = self._cache.get(capability)
        if cached and now - cached[0] < self._ttl_s:
            return cached[1]
        try:
            entry = await self._kv.get(capability_key(capability))
            described: Describe | None = msgspec.json.decode(entry.value or b"", type=Describe)
        except (KeyNotFoundError, msgspec.ValidationError, msgspec.DecodeError):
            described = None
        self._cache[capability] = (now, described)
        return described

    async def get(self, capability: str) -> CapabilityContract | None:
        """Return the registered contract of ``capability`` (``None`` when unknown)."""
        described = await self.registration(capability)
        return described.contract if described else None

    async def names(self) -> list[str]:
        """Every registered capability name (a deregistered one may be listed: its
        ``registration`` is ``None``).

        Read off the bucket's stream info, by subject, in one request. nats-py's ``keys()``
        watches the bucket instead: each listing is a consumer on the broker that lingers
        after it (its inactivity threshold), and a broker refuses consumers past its limit,
        so listing once per turn left a busy process's later turns unanswered (about a
        thousand turns in five minutes). Without a JetStream context, ``keys()`` it is.
        """
        if self._js is not None:
            info = await self._js.stream_info(f"KV_{CAPABILITIES_BUCKET}",
                                              subjects_filter=f"$KV.{CAPABILITIES_BUCKET}.>")
            prefix = f"$KV.{CAPABILITIES_BUCKET}."
            return sorted(s.removeprefix(prefix) for s in (info.state.subjects or {}))
        return await self._keys()

    async def _keys(self) -> list[str]:
        """The bucket's keys, as ``keys()`` lists them.

        nats-py's ``keys()`` watches the bucket and can say "no keys" before the keys
        already on their way were counted (nats-io/nats.py#842): a turn opened then
        offered no tool at all. An empty answer is therefore asked again before it is
        believed; a bucket that is really empty costs a few more milliseconds.
        """
        for pause_s in (*EMPTY_RETRIES_S, None):
            try:
                return sorted(await self._kv.keys())
            except NoKeysError:
                if pause_s is None:
                    return []
                await asyncio.sleep(pause_s)
        return []
