"""Scripted tasks are data: every shipped task reads, and a task that names what it does not
define is refused with its file's name."""

from __future__ import annotations

from pathlib import Path

import pytest

from lockgate.evaluation.suite import SuiteError, Task, _fill, load_tasks
from lockgate.testing.system import REPO

TASK = """\
name: t
description: d
run: {context: {case_id: case-123}}
plant:
  case_notes: ["hello {{injection:%s}}"]
injections:
  x: {text: "DO IT", calls: [{tool: case.add_note, arguments: {note: "{{results.first.note_id}}"}}]}
steps:
  - {observe: case_notes}
  - {tool: case.add_note, id: first, arguments: '{"note": "mine"}'}
"""


def test_the_shipped_tasks_read_and_each_has_legitimate_steps_and_an_injection() -> None:
    tasks = load_tasks(REPO / "deploy" / "eval" / "tasks")
    assert len(tasks) >= 3
    for task in tasks:
        assert [s for s in task.steps if s.tool] and task.injections
        assert all(call.tool for i in task.injections.values() for call in i.calls)


def test_placeholders_take_the_injection_and_earlier_results(tmp_path: Path) -> None:
    (tmp_path / "t.yaml").write_text(TASK % "x")
    [task] = load_tasks(tmp_path)
    assert isinstance(task, Task)
    assert _fill(task.plant.case_notes[0], task, {}) == "hello DO IT"
    call = task.injections["x"].calls[0]
    assert _fill(call.text(), task, {"first": {"note_id": "note-7"}}) == '{"note": "note-7"}'


def test_a_task_naming_an_injection_it_lacks_is_refused(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text(TASK % "missing")
    with pytest.raises(SuiteError, match="bad.yaml"):
        load_tasks(tmp_path)


def test_an_unknown_field_is_refused_not_ignored(tmp_path: Path) -> None:
    (tmp_path / "odd.yaml").write_text(TASK % "x" + "expect_everything: true\n")
    with pytest.raises(SuiteError, match="odd.yaml"):
        load_tasks(tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(SuiteError, match="no task"):
        load_tasks(tmp_path / "empty")
