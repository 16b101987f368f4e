"""The runtime every process runs on: its garbage collector's settings."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from lockgate.runtime.loop import YOUNG_COLLECTION_EVERY, steady_collector


@pytest.fixture
def collector() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


def test_the_steady_collector_leaves_what_exists_out_and_collects_young_objects_less_often(
    collector: None,
) -> None:
    steady_collector()
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == (YOUNG_COLLECTION_EVERY, 20, 10)
    cycle: list[object] = []
    cycle.append(cycle)
    del cycle
    assert gc.collect() >= 1  # what is made later is still collected
