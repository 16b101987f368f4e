"""One contract for the runs port: the in-memory fake and the LG_RUNS bucket behave alike."""

from __future__ import annotations

import pytest

from lockgate.contracts.messages import RunContext
from lockgate.core.ids import random_id
from lockgate.runtime.context import Ports
from lockgate.testing.intents import T0


def a_run() -> RunContext:
    return RunContext(run_id=f"run-{random_id()}", tenant="tenant-a", actor="user-42", context={},
                      delegation=None, stage="default", opened_at=T0)


async def test_a_run_opened_is_found_and_an_unknown_one_is_not(ports: Ports) -> None:
    run = a_run()
    assert await ports.runs.get("tenant-a", run.run_id) is None
    await ports.runs.open(run)
    assert await ports.runs.get("tenant-a", run.run_id) == run
    assert await ports.runs.get("tenant-a", "no such*run") is None  # no key at all


async def test_a_turn_is_opened_once_with_its_catalogue(ports: Ports) -> None:
    run = a_run()
    assert await ports.runs.turn("tenant-a", run.run_id, "turn-1") is None
    assert await ports.runs.open_turn("tenant-a", run.run_id, "turn-1", "abc")
    assert not await ports.runs.open_turn("tenant-a", run.run_id, "turn-1", "def")
    assert await ports.runs.turn("tenant-a", run.run_id, "turn-1") == "abc"


async def test_a_done_mark_is_never_lost_and_marking_again_is_harmless(ports: Ports) -> None:
    run = a_run()
    assert not await ports.runs.done("tenant-a", run.run_id, "case.add_note")
    await ports.runs.mark_done("tenant-a", run.run_id, "case.add_note")
    await ports.runs.mark_done("tenant-a", run.run_id, "case.add_note")
    assert await ports.runs.done("tenant-a", run.run_id, "case.add_note")
    assert not await ports.runs.done("tenant-a", run.run_id, "case.close")


async def test_the_latest_refused_call_of_a_tool_in_a_turn(ports: Ports) -> None:
    run = a_run()
    assert await ports.runs.refused("tenant-a", run.run_id, "turn-1", "case.add_note") is None
    await ports.runs.mark_refused("tenant-a", run.run_id, "turn-1", "case.add_note", "i1")
    await ports.runs.mark_refused("tenant-a", run.run_id, "turn-1", "case.add_note", "i2")
    assert await ports.runs.refused("tenant-a", run.run_id, "turn-1", "case.add_note") == "i2"
    assert await ports.runs.refused("tenant-a", run.run_id, "turn-2", "case.add_note") is None


async def test_ids_that_make_no_key_are_refused(ports: Ports) -> None:
    with pytest.raises(ValueError, match="capability"):
        await ports.runs.mark_done("tenant-a", "run-1", "not a capability")
    with pytest.raises(ValueError, match="subject token"):
        await ports.runs.open_turn("tenant-a", "run-1", "turn 1", "abc")
