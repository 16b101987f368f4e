"""One convention for every ``lockgate`` command: a person's answer by default, ``--json`` for scripts.

The parser's commands are walked here, so a command added without ``--json`` (before and
after its name) fails; what each command prints in both forms is checked against a running
system in ``tests/e2e/test_cli.py`` (``test_every_command_answers_a_person_and_a_script``).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from lockgate.cli import policy as policy_cli
from lockgate.cli.app import main, parser
from lockgate.client.output import Output, fields
from lockgate.worlds.casenotes.world import World as CaseWorld
from lockgate.worlds.items.world import World as ItemsWorld
from lockgate.worlds.repo.world import World as RepoWorld
from tests.unit.cli_commands import commands, minimal_argv

REPO = Path(__file__).resolve().parents[2]
POLICIES = REPO / "deploy" / "policies"
COMMANDS = commands(parser())
POLICY_COMMANDS = commands(policy_cli.parser())


def test_the_walk_finds_the_commands_a_person_types() -> None:
    assert {"status", "propose", "intents", "review list", "review approve", "world ledger",
            "mcp servers", "mcp conformance", "replay", "adapter scaffold", "policy"} <= set(COMMANDS)
    assert set(POLICY_COMMANDS) == {"validate", "test", "shadow", "promote"}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_takes_json_before_and_after_its_name(name: str) -> None:
    if name == "policy":  # its own parser, walked below; main passes --json on to it
        return
    words, rest = name.split(), minimal_argv(COMMANDS[name])
    assert parser().parse_args([*words, *rest]).json is False
    assert parser().parse_args(["--json", *words, *rest]).json is True
    assert parser().parse_args([*words, *rest, "--json"]).json is True
    assert parser().parse_args([*words, "--json", *rest]).json is True


@pytest.mark.parametrize("name", sorted(POLICY_COMMANDS))
def test_every_policy_command_takes_json_before_and_after_its_name(name: str) -> None:
    rest = minimal_argv(POLICY_COMMANDS[name])
    assert policy_cli.parser().parse_args([name, *rest]).json is False
    assert policy_cli.parser().parse_args(["--json", name, *rest]).json is True
    assert policy_cli.parser().parse_args([name, *rest, "--json"]).json is True


# -- the module every command prints through -------------------------------------------------


def test_rows_are_a_table_for_a_person_and_json_lines_for_a_script() -> None:
    items = [{"intent": "i1", "state": "executed", "attempts": 1, "follows": None},
             {"intent": "i2", "state": "denied", "attempts": 0, "follows": "i1"}]
    columns = {"INTENT": "intent", "STATE": "state", "FOLLOWS": "follows"}
    person, script = io.StringIO(), io.StringIO()
    Output(stdout=person).rows(columns, items)
    Output(json=True, stdout=script).rows(columns, items)
    header, rule, first, second = person.getvalue().splitlines()
    assert header.split() == ["INTENT", "STATE", "FOLLOWS"] and set(rule) <= {"-", " "}
    assert first.split() == ["i1", "executed", "-"] and second.split() == ["i2", "denied", "i1"]
    assert [json.loads(line) for line in script.getvalue().splitlines()] == items


def test_no_rows_is_a_sentence_for_a_person_and_nothing_for_a_script() -> None:
    person, script = io.StringIO(), io.StringIO()
    Output(stdout=person).rows({"X": "x"}, [], empty="no intents match")
    Output(json=True, stdout=script).rows({"X": "x"}, [], empty="no intents match")
    assert person.getvalue() == "no intents match\n" and script.getvalue() == ""


def test_a_record_is_one_document_or_what_a_person_reads() -> None:
    person, script = io.StringIO(), io.StringIO()
    Output(stdout=person).record({"recorded": "Reconciled", "by": "ops"}, text="recorded it")
    Output(json=True, stdout=script).record({"recorded": "Reconciled", "by": "ops"}, text="x")
    assert person.getvalue() == "recorded it\n"
    assert json.loads(script.getvalue()) == {"recorded": "Reconciled", "by": "ops"}


def test_notes_leave_a_scripts_stdout_alone() -> None:
    out, err = io.StringIO(), io.StringIO()
    script = Output(json=True, stdout=out, stderr=err)
    script.rows({"X": "x"}, [{"x": 1}])
    script.note("1 as expected")
    script.warn("the views may lag")
    assert [json.loads(line) for line in out.getvalue().splitlines()] == [{"x": 1}]
    assert err.getvalue().splitlines() == ["1 as expected", "lockgate: the views may lag"]
    out, err = io.StringIO(), io.StringIO()
    Output(stdout=out, stderr=err).note("1 as expected")
    assert out.getvalue() == "1 as expected\n" and err.getvalue() == ""


def test_a_record_for_a_person_is_a_key_value_block_cleaned_of_control_characters() -> None:
    text = fields({"status": "executed", "field": None, "persistent": False,
                   "result": {"note": "hi\x1b[2J\u202eevil"}, "alternatives": ["a", "b"],
                   "servers": [{"server": "p", "quarantined": 2}]})
    assert "status        executed" in text and "persistent    no" in text
    assert "field" not in text and "alternatives  a, b" in text
    assert "result.note" in text and "\x1b" not in text and "\u202e" not in text
    assert "servers:\nSERVER  QUARANTINED" in text
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)


# -- the commands that need no running system -------------------------------------------------


def _lines(text: str) -> list[object]:
    return [json.loads(line) for line in text.splitlines()]


def _not_json(text: str) -> None:
    assert text.strip()
    for line in text.splitlines():
        with pytest.raises(ValueError):
            json.loads(line)


def test_policy_validate_and_test(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["policy", "validate", str(POLICIES)]) == 0
    _not_json(capsys.readouterr().out)
    assert main(["--json", "policy", "validate", str(POLICIES)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {"bundle", "revision", "policies"} <= set(doc)
    assert {"id", "effect", "file"} <= set(doc["policies"][0])
    tables = sorted(POLICIES.glob("*.cases.yaml")) or sorted((REPO / "deploy").rglob("*cases*.yaml"))
    assert tables
    assert main(["policy", "test", str(POLICIES), str(tables[0])]) == 0
    person = capsys.readouterr()
    assert "PASS " in person.out and " passed, 0 failed" in person.out
    assert main(["policy", "test", str(POLICIES), str(tables[0]), "--json"]) == 0
    script = capsys.readouterr()
    rows = _lines(script.out)
    assert rows and all(isinstance(r, dict) and r["passed"] is True for r in rows)
    assert {"table", "case", "expected", "actual", "reasons", "determining"} <= set(rows[0])  # type: ignore[arg-type]
    assert " passed, 0 failed" in script.err


def test_adapter_scaffold(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = "lockgate.worlds.gittools.capabilities:CAPABILITIES"
    assert main(["adapter", "scaffold", target, "--out", str(tmp_path / "a"), "--name", "git"]) == 0
    out = capsys.readouterr().out
    _not_json(out)
    assert out.splitlines()[0].split() == ["WROTE"] and "git.cedar" in out
    assert main(["adapter", "scaffold", target, "--out", str(tmp_path / "b"), "--name", "git", "--json"]) == 0
    assert sorted(Path(str(r["path"])).name for r in _lines(capsys.readouterr().out)) == [  # type: ignore[index]
        "git.cedar", "git.cedarschema"]


@pytest.fixture
def var_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("CASE", "ITEMS", "REPO"):
        monkeypatch.delenv(f"LOCKGATE_{name}_WORLD_DIR", raising=False)
    monkeypatch.setenv("LOCKGATE_VAR_DIR", str(tmp_path))
    CaseWorld.seed(tmp_path / "worlds" / "case")
    ItemsWorld.seed(tmp_path / "worlds" / "items")
    RepoWorld.seed(tmp_path / "worlds" / "repo")
    return tmp_path


@pytest.mark.parametrize("world", ["case", "items", "repo"])
def test_world_ledger(world: str, var_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["world", "ledger", world]) == 0
    person = capsys.readouterr().out
    _not_json(person)
    assert main(["world", "ledger", world, "--json"]) == 0
    assert all(isinstance(r, dict) for r in _lines(capsys.readouterr().out))


def test_world_fault(var_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["world", "fault", "items", "drop_response", "--server", "Q"]) == 0
    person = capsys.readouterr().out
    _not_json(person)
    assert person.startswith("armed drop_response on server Q")
    assert main(["--json", "world", "fault", "items", "drop_response", "--server", "P"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["armed"], doc["server"], doc["times"]) == ("drop_response", "P", 1)
    assert {"server": "P", "fault": "drop_response", "remaining": 1} in doc["faults"]


def test_an_error_is_one_line_on_stderr_in_both_forms(var_dir: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    for extra in ([], ["--json"]):
        assert main([*extra, "world", "fault", "items", "no_such_fault", "--server", "Q"]) == 1
        got = capsys.readouterr()
        assert got.out == "" and len(got.err.splitlines()) == 1 and "unknown fault" in got.err



class _Operator:
    """An operator's connection that records what it was asked (the broker is not needed here)."""

    principal = "ops"

    async def resolve_outcome(self, **asked: object) -> str:
        return "Reconciled"

    async def close(self) -> None:
        return None


class _Where:
    def person(self, kind: str, chosen: str | None) -> str:
        return "ops"

    async def gateway(self, user: str, *, host: bool = False, principal: str = "") -> _Operator:
        return _Operator()


@pytest.mark.parametrize("form", ["person", "json"])
def test_reconcile(form: str, capsys: pytest.CaptureFixture[str]) -> None:
    # An unknown outcome takes a lost response and a silent adapter to make: the command
    # itself meets a real one in tests/e2e/test_effects_once.py (with --json).
    import asyncio

    from lockgate.cli import operate

    args = parser().parse_args(["reconcile", "a" * 32, "--tenant", "tenant-a", "--absent",
                                "--why", "checked", *(["--json"] if form == "json" else [])])
    out = Output(json=args.json)
    assert asyncio.run(operate._reconcile(args, _Where(), out)) == 0  # type: ignore[arg-type]
    printed = capsys.readouterr().out
    if form == "json":
        assert json.loads(printed) == {"recorded": "Reconciled", "by": "ops"}
    else:
        _not_json(printed)
        assert printed == f"recorded Reconciled for intent {'a' * 32} by ops: the effect did not happen\n"
