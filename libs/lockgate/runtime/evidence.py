"""What policy and the final gate know besides the intent: the run, the contract, prior effects."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import msgspec
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from lockgate.authz.intents import Evidence
from lockgate.contracts.offer import alive
from lockgate.intent.aggregate import EffectIntent
from lockgate.runtime.context import Ports

_NOT_KEY = re.compile(r"[^-_=a-zA-Z0-9]")
#: Intent ids kept to make counting idempotent under redelivery.
_RECENT = 64


class _Effects(msgspec.Struct):
    count: int = 0
    recent: list[str] = msgspec.field(default_factory=list)


def effects_key(tenant: str, run_id: str, capability: str) -> str:
    """Key of a run's completed effects of one capability (in the progress bucket)."""
    return f"{tenant}.{run_id}.effects.{_NOT_KEY.sub('_', capability)}"


async def prior_effects(kv: KeyValue, tenant: str, run_id: str, capability: str) -> int:
    """How many effects of ``capability`` this run already completed."""
    try:
        entry = await kv.get(effects_key(tenant, run_id, capability))
    except KeyNotFoundError:
        return 0
    return msgspec.json.decode(entry.value or b"{}", type=_Effects).count


async def count_effect(kv: KeyValue, intent: EffectIntent) -> None:
    """Count one completed effect of the intent's run (once, however often it is told)."""
    key = effects_key(intent.tenant, intent.run_id, intent.tool)
    for _ in range(8):
        try:
            entry = await kv.get(key)
            seen, revision = msgspec.json.decode(entry.value or b"{}", type=_Effects), entry.revision
        except KeyNotFoundError:
            seen, revision = _Effects(), None
        if intent.intent_id in seen.recent:
            return
        value = msgspec.json.encode(
            _Effects(seen.count + 1, [*seen.recent, intent.intent_id][-_RECENT:])
        )
        try:
            if revision is None:
                await kv.create(key, value)
            else:
                await kv.update(key, value, last=revision)
            return
        except KeyWrongLastSequenceError:
            continue


async def gather(ports: Ports, intent: EffectIntent, *, with_prior_effects: bool,
                 now: datetime | None = None) -> Evidence:
    """The run the trusted host opened, the capability's contract, the run's prior effects,
    and whether the capability is still offered (registered, and its adapter's last
    heartbeat recent at ``now``; a registration that names no heartbeat is not judged).

    Prior effects are read only when a policy of the bundle asks for them.
    """
    prior = 0
    if with_prior_effects:
        prior = await prior_effects(ports.progress, intent.tenant, intent.run_id, intent.tool)
    registration = await ports.registry.registration(intent.tool)
    return Evidence(
        run=await ports.run(intent.tenant, intent.run_id),
        contract=registration.contract if registration else None,
        prior_effects=prior,
        offered_now=registration is not None and (
            registration.alive_at is None or alive(registration.alive_at, now or datetime.now(UTC))),
    )
