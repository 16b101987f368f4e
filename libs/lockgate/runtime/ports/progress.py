"""The progress port: what a run has done so far that later decisions weigh.

Two counters per run in the ``LG_PROGRESS`` bucket, both changed by compare-and-set so that
replicas counting at once all count: policy's denials of one consequence (on which facts:
the same consequence denied again and again on the same facts stalls), and the completed
effects of one capability (``context.prior_effects`` in a policy).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Protocol

import msgspec
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue

from lockgate.intent.aggregate import EffectIntent
from lockgate.runtime.ports.buckets import compare_and_set

__all__ = ["KvProgress", "MemoryProgress", "Progress", "effects_key", "progress_key"]

_NOT_KEY = re.compile(r"[^-_=a-zA-Z0-9]")
#: Intent ids kept to make counting an effect idempotent under redelivery.
_RECENT = 64
#: Compare-and-set tries of a denial's count (a count lost beats a decision held up).
_DENIAL_TRIES = 5
#: Compare-and-set tries of an effect's count.
_EFFECT_TRIES = 8


class _Effects(msgspec.Struct):
    count: int = 0
    recent: list[str] = msgspec.field(default_factory=list)


def _denials_after(seen_facts: str, seen_denials: int, facts: str) -> int:
    """Denials in a row once one more on ``facts`` is counted: on other facts it is the first."""
    return seen_denials + 1 if seen_facts == facts else 1


def _effects_after(count: int, recent: list[str], intent_id: str) -> tuple[int, list[str]] | None:
    """The effects' count and recent ids once ``intent_id``'s is counted (``None``: it was)."""
    if intent_id in recent:
        return None
    return count + 1, [*recent, intent_id][-_RECENT:]


def progress_key(tenant: str, run_id: str, consequence: str) -> str:
    """Key of one consequence's denials in one run (the digest names the consequence)."""
    return f"{tenant}.{run_id}.{consequence.removeprefix('sha256:')}"


def effects_key(tenant: str, run_id: str, capability: str) -> str:
    """Key of a run's completed effects of one capability."""
    return f"{tenant}.{run_id}.effects.{_NOT_KEY.sub('_', capability)}"


class Progress(Protocol):
    """A run's denials per consequence and completed effects per capability.

    A broker that does not answer raises ``nats.errors.Error``.
    """

    async def denials(self, tenant: str, run_id: str, consequence: str) -> tuple[str, int] | None:
        """The digest of the facts the consequence was last denied on, and how many times in a
        row on those facts (``None``: never denied in the run)."""
        ...

    async def count_denial(self, tenant: str, run_id: str, consequence: str, facts: str) -> None:
        """Count one more denial of the consequence on the facts digested ``facts`` (a denial
        on other facts starts again at one). Best effort: a count that keeps conflicting is lost."""
        ...

    async def prior_effects(self, tenant: str, run_id: str, capability: str) -> int:
        """How many effects of ``capability`` the run completed."""
        ...

    async def count_effect(self, intent: EffectIntent) -> None:
        """Count the intent's completed effect in its run (once, however often told)."""
        ...


class KvProgress:
    """``Progress`` over the ``LG_PROGRESS`` bucket."""

    def __init__(self, kv: KeyValue) -> None:
        self._kv = kv

    async def denials(self, tenant: str, run_id: str, consequence: str) -> tuple[str, int] | None:
        """The facts of the consequence's last denials and how many."""
        try:
            entry = await self._kv.get(progress_key(tenant, run_id, consequence))
        except KeyNotFoundError:
            return None
        seen = msgspec.json.decode(entry.value or b"{}", type=dict[str, str | int])
        return str(seen.get("facts", "")), int(seen.get("denials", 0))

    async def count_denial(self, tenant: str, run_id: str, consequence: str, facts: str) -> None:
        """Count one more denial of the consequence on ``facts``."""
        def change(data: bytes) -> bytes:
            seen = msgspec.json.decode(data, type=dict[str, str | int])
            denials = _denials_after(str(seen.get("facts", "")), int(seen.get("denials", 0)), facts)
            return msgspec.json.encode({"facts": facts, "denials": denials})

        await self._update(progress_key(tenant, run_id, consequence), change, _DENIAL_TRIES)

    async def prior_effects(self, tenant: str, run_id: str, capability: str) -> int:
        """How many effects of ``capability`` the run completed."""
        try:
            entry = await self._kv.get(effects_key(tenant, run_id, capability))
        except KeyNotFoundError:
            return 0
        return msgspec.json.decode(entry.value or b"{}", type=_Effects).count

    async def count_effect(self, intent: EffectIntent) -> None:
        """Count the intent's completed effect in its run (once)."""
        def change(data: bytes) -> bytes | None:
            seen = msgspec.json.decode(data, type=_Effects)
            counted = _effects_after(seen.count, seen.recent, intent.intent_id)
            return None if counted is None else msgspec.json.encode(_Effects(*counted))

        await self._update(effects_key(intent.tenant, intent.run_id, intent.tool), change, _EFFECT_TRIES)

    async def _update(self, key: str, change: Callable[[bytes], bytes | None], tries: int) -> None:
        """Write ``change`` of the key's value (``{}`` when absent) by compare-and-set, so that
        replicas counting at once all count; ``None`` from ``change``: nothing to write. After
        ``tries`` lost races the count is given up (a count lost beats a decision held up)."""
        await compare_and_set(self._kv, key, lambda data: change(data or b"{}"), tries)


class MemoryProgress:
    """The fake ``Progress``: the counters in dicts."""

    def __init__(self) -> None:
        #: progress key → (facts digest, denials in a row).
        self.denied: dict[str, tuple[str, int]] = {}
        #: effects key → (count, recent intent ids).
        self.effects: dict[str, tuple[int, list[str]]] = {}

    async def denials(self, tenant: str, run_id: str, consequence: str) -> tuple[str, int] | None:
        """The facts of the consequence's last denials and how many."""
        return self.denied.get(progress_key(tenant, run_id, consequence))

    async def count_denial(self, tenant: str, run_id: str, consequence: str, facts: str) -> None:
        """Count one more denial of the consequence on ``facts``."""
        key = progress_key(tenant, run_id, consequence)
        seen_facts, seen_denials = self.denied.get(key, ("", 0))
        self.denied[key] = (facts, _denials_after(seen_facts, seen_denials, facts))

    async def prior_effects(self, tenant: str, run_id: str, capability: str) -> int:
        """How many effects of ``capability`` the run completed."""
        return self.effects.get(effects_key(tenant, run_id, capability), (0, []))[0]

    async def count_effect(self, intent: EffectIntent) -> None:
        """Count the intent's completed effect in its run (once)."""
        key = effects_key(intent.tenant, intent.run_id, intent.tool)
        counted = _effects_after(*self.effects.get(key, (0, [])), intent.intent_id)
        if counted is not None:
            self.effects[key] = counted
