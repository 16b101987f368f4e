"""One contract for the policies port: the in-memory fake and the LG_POLICY bucket.

The shadow bundle is one key, set, replaced and cleared; the log of bundle changes keeps the
last ``CHANGES_KEPT`` in order, and changes logged at once (two policy replicas answering
two operators) are all kept.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from lockgate.contracts.messages import PolicyChange
from lockgate.runtime.context import Ports
from lockgate.runtime.ports.policies import CHANGES_KEPT, PublishedBundle
from lockgate.testing.intents import T0

FILES = {"a.cedar": '@id("a")\npermit (principal, action, resource);\n', "s.cedarschema": ""}


def change(n: int, action: str = "shadow") -> PolicyChange:
    return PolicyChange(action=action, revision=f"rev-{n}", active_revision="rev-0", by="ops",
                        at=T0 + timedelta(seconds=n))


async def test_the_shadow_is_set_replaced_and_cleared(ports: Ports) -> None:
    policies = ports.policies
    await policies.clear_shadow()
    assert await policies.shadow() is None
    first = PublishedBundle(revision="rev-1", files=FILES, by="ops", at=T0)
    await policies.set_shadow(first)
    assert await policies.shadow() == first
    second = PublishedBundle(revision="rev-2", files={**FILES, "b.cedar": "x"}, by="kim", at=T0)
    await policies.set_shadow(second)
    assert await policies.shadow() == second
    await policies.clear_shadow()
    assert await policies.shadow() is None


async def test_the_log_keeps_the_latest_changes_in_order(ports: Ports) -> None:
    policies = ports.policies
    before = len(await policies.changes())
    for n in range(CHANGES_KEPT + 3):
        await policies.record(change(n))
    log = await policies.changes()
    assert len(log) == CHANGES_KEPT > before
    assert [c.revision for c in log] == [f"rev-{n}" for n in range(3, CHANGES_KEPT + 3)]


async def test_changes_logged_at_once_are_all_kept(ports: Ports) -> None:
    policies = ports.policies
    await asyncio.gather(*(policies.record(change(1000 + n, "promote")) for n in range(6)))
    logged = {c.revision for c in await policies.changes()}
    assert {f"rev-{1000 + n}" for n in range(6)} <= logged
