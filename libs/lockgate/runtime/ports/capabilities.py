"""The capabilities port: what adapters registered (their contracts and last heartbeats).

``CapabilityRegistry`` (``lockgate.contracts.registry``) reads them from ``LG_CAPABILITIES``;
``MemoryCapabilities`` is the fake a test registers contracts with.
"""

from __future__ import annotations

from typing import Protocol

from lockgate.contracts.capability import CapabilityContract
from lockgate.contracts.messages import Describe
from lockgate.contracts.registry import CapabilityRegistry
from lockgate.core.ids import is_capability_name

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
