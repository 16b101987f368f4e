"""One contract for the progress port: the in-memory fake and the LG_PROGRESS bucket."""

from __future__ import annotations

from lockgate.core.ids import random_id
from lockgate.runtime.context import Ports
from lockgate.testing.intents import History


async def test_denials_count_in_a_row_on_the_same_facts(ports: Ports) -> None:
    run_id = f"run-{random_id()}"
    assert await ports.progress.denials("tenant-a", run_id, "sha256:c1") is None
    await ports.progress.count_denial("tenant-a", run_id, "sha256:c1", "f1")
    await ports.progress.count_denial("tenant-a", run_id, "sha256:c1", "f1")
    assert await ports.progress.denials("tenant-a", run_id, "sha256:c1") == ("f1", 2)
    await ports.progress.count_denial("tenant-a", run_id, "sha256:c1", "f2")
    assert await ports.progress.denials("tenant-a", run_id, "sha256:c1") == ("f2", 1)
    assert await ports.progress.denials("tenant-a", run_id, "sha256:c2") is None


async def test_an_effect_is_counted_once_however_often_told(ports: Ports) -> None:
    run_id = f"run-{random_id()}"
    one = History(run_id=run_id, call_id="c1").intent
    two = History(run_id=run_id, call_id="c2").intent
    assert await ports.progress.prior_effects("tenant-a", run_id, "case.add_note") == 0
    for intent in (one, one, two):
        await ports.progress.count_effect(intent)
    assert await ports.progress.prior_effects("tenant-a", run_id, "case.add_note") == 2
    assert await ports.progress.prior_effects("tenant-a", run_id, "case.close") == 0
