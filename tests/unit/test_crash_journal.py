"""The crash journal: redeliveries a process took down with it, counted across its deaths."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

from lockgate.runtime.crashes import CrashJournal


def _die_with_in_flight(folder: str, key: str) -> None:
    """A process that writes a redelivery down, then dies before striking it out."""
    journal = CrashJournal(Path(folder), "gate")
    journal.open()
    journal.begin(key)
    os._exit(9)


def die_with(folder: Path, key: str) -> None:
    child = multiprocessing.get_context("fork").Process(target=_die_with_in_flight, args=(str(folder), key))
    child.start()
    child.join(30)
    assert child.exitcode == 9


def test_a_message_in_flight_when_its_process_died_is_counted_by_the_next(tmp_path: Path) -> None:
    die_with(tmp_path, "EV/7")
    survivor = CrashJournal(tmp_path, "gate")
    assert survivor.open() == {"EV/7": 1}
    assert list(tmp_path.glob("gate.*.journal")) == [survivor.path]  # the dead one's adopted
    assert survivor.begin("EV/7") == 1


def test_crashes_in_a_row_add_up_and_a_handling_that_returns_starts_them_anew(tmp_path: Path) -> None:
    for _ in range(3):
        die_with(tmp_path, "EV/7")
    journal = CrashJournal(tmp_path, "gate")
    assert journal.open() == {"EV/7": 3}
    assert journal.begin("EV/7") == 3
    journal.end("EV/7")
    assert journal.begin("EV/7") == 0


def test_a_living_processs_journal_is_not_taken_for_a_dead_ones(tmp_path: Path) -> None:
    alive = CrashJournal(tmp_path, "gate", pid=1)
    alive.open()
    alive.begin("EV/9")
    other = CrashJournal(tmp_path, "gate", pid=2)
    assert other.open() == {}
    assert alive.path.read_text() == "EV/9\n"


def test_a_graceful_stop_leaves_nothing_to_count(tmp_path: Path) -> None:
    journal = CrashJournal(tmp_path, "gate")
    journal.open()
    journal.begin("EV/7")
    journal.close()
    assert CrashJournal(tmp_path, "gate").open() == {}


def test_durables_keep_their_own_counts(tmp_path: Path) -> None:
    die_with(tmp_path, "EV/7")
    assert CrashJournal(tmp_path, "reconciler").open() == {}
    assert CrashJournal(tmp_path, "gate").open() == {"EV/7": 1}


def test_two_instances_of_one_durable_in_one_process_keep_apart(tmp_path: Path) -> None:
    """An embedding program (or a test) may run a service twice: neither waits on, nor adopts, the other."""
    first, second = CrashJournal(tmp_path, "gate"), CrashJournal(tmp_path, "gate")
    first.open()
    first.begin("EV/7")
    assert second.open() == {}
    assert first.path != second.path and first.path.read_text() == "EV/7\n"
