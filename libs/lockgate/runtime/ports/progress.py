"""The progress port: what a run has done so far that later decisions weigh.

Two counters per run in the ``LG_PROGRESS`` bucket, both changed by compare-and-set so that
replicas counting at once all count: policy's denials of one consequence (on which facts:
the same consequence denied again and again on the same facts stalls), and the completed
effects of one capability (``context.prior_effects`` in a policy).
"""

from __future__ import annotations

import re
from typing import Protocol

import msgspec
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from lockgate.intent.aggregate import EffectIntent

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
        key = progress_key(tenant, run_id, consequence)
        for _ in range(_DENIAL_TRIES):  # compare-and-set: replicas counting at once all count
            try:
                entry = await self._kv.get(key)
                seen = msgspec.json.decode(entry.value or b"{}", type=dict[str, str | int])
                revision: int | None = entry.revision
            except KeyNotFoundError:
                seen, revision = {}, None
            denials = int(seen.get("denials", 0)) + 1 if seen.get("facts") == facts else 1
            value = msgspec.json.encode({"facts": facts, "denials": denials})
            try:
                if revision is None:
                    await self._kv.create(key, value)
                else:
                    await self._kv.update(key, value, last=revision)
                return
            except KeyWrongLastSequenceError:
                continue

    async def prior_effects(self, tenant: str, run_id: str, capability: str) -> int:
        """How many effects of ``capability`` the run completed."""
        try:
            entry = await self._kv.get(effects_key(tenant, run_id, capability))
        except KeyNotFoundError:
            return 0
        return msgspec.json.decode(entry.value or b"{}", type=_Effects).count

    async def count_effect(self, intent: EffectIntent) -> None:
        """Count the intent's completed effect in its run (once)."""
        key = effects_key(intent.tenant, intent.run_id, intent.tool)
        for _ in range(_EFFECT_TRIES):
            try:
                entry = await self._kv.get(key)
                seen, revision = msgspec.json.decode(entry.value or b"{}", type=_Effects), entry.revision
            except KeyNotFoundError:
                seen, revision = _Effects(), None
            if intent.intent_id in seen.recent:
                return
            value = msgspec.json.encode(
                _Effects(seen.count + 1, [*seen.recent, intent.intent_id][-_RECENT:]))
            try:
                if revision is None:
                    await self._kv.create(key, value)
                else:
                    await self._kv.update(key, value, last=revision)
                return
            except KeyWrongLastSequenceError:
                continue


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
        seen = self.denied.get(key)
        self.denied[key] = (facts, seen[1] + 1 if seen is not None and seen[0] == facts else 1)

    async def prior_effects(self, tenant: str, run_id: str, capability: str) -> int:
        """How many effects of ``capability`` the run completed."""
        return self.effects.get(effects_key(tenant, run_id, capability), (0, []))[0]

    async def count_effect(self, intent: EffectIntent) -> None:
        """Count the intent's completed effect in its run (once)."""
        key = effects_key(intent.tenant, intent.run_id, intent.tool)
        count, recent = self.effects.get(key, (0, []))
        if intent.intent_id not in recent:
            self.effects[key] = (count + 1, [*recent, intent.intent_id][-_RECENT:])
