"""The conformance suite against the fixture servers, honest and faulted: its verdicts.

P and Q run as real processes (streamable HTTP, one per module; one P over stdio, which the
suite starts itself, a process per session). A faulted Q has its own process and state, and
each test arms its fault and disarms it after.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import anyio
import msgspec
import pytest

from lockgate.mcpcheck import (
    OUTCOMES,
    P_PROBE,
    Q_PROBE,
    HttpTarget,
    Property,
    Report,
    StdioTarget,
    Verdict,
    render_json,
    render_table,
    run_suite,
)
from lockgate.mcpcheck.cli import main as cli_main
from lockgate.worlds.mcpservers import HttpServerProcess, State, arm, disarm, stdio_command

TIMEOUT_S = 10.0
#: A short visibility window keeps the faulted runs fast; the faults' delays are set against it.
FAST_Q = msgspec.structs.replace(Q_PROBE, visibility_wait_s=2.0, cancel_after_s=0.3)


@pytest.fixture(scope="module")
def honest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, HttpServerProcess]]:
    """P and Q on streamable HTTP, nothing armed."""
    root = tmp_path_factory.mktemp("conformance")
    started: dict[str, HttpServerProcess] = {}
    try:
        for name in ("p", "q"):
            started[name] = HttpServerProcess(name, root / name).start()
        yield started
    finally:
        for process in started.values():
            process.stop()


@pytest.fixture(scope="module")
def faulted_q(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServerProcess]:
    """A Q of its own, for the tests that arm faults."""
    with HttpServerProcess("q", tmp_path_factory.mktemp("conformance") / "faulted-q") as process:
        yield process


@pytest.fixture
def q_fault(faulted_q: HttpServerProcess) -> Iterator[Path]:
    """The faulted Q's state directory, disarmed after the test."""
    yield faulted_q.state_dir
    disarm(faulted_q.state_dir)


# The honest reports are made once per module, on a loop of their own (anyio.run), so
# several tests can read one run's findings.
@pytest.fixture(scope="module")
def p_report(honest: dict[str, HttpServerProcess]) -> Report:
    return anyio.run(lambda: run_suite(HttpTarget(url=honest["p"].url), P_PROBE,
                                       timeout_s=TIMEOUT_S))


@pytest.fixture(scope="module")
def q_report(honest: dict[str, HttpServerProcess]) -> Report:
    return anyio.run(lambda: run_suite(HttpTarget(url=honest["q"].url), Q_PROBE,
                                       timeout_s=TIMEOUT_S))


def _verdict(report: Report, prop: Property) -> tuple[Verdict, str]:
    finding = report.finding(prop)
    return finding.verdict, finding.outcome


# -- honest P ---------------------------------------------------------------------------


def test_p_duplicate_calls_are_observed_safe(p_report: Report) -> None:
    finding = p_report.finding(Property.DUPLICATE_CALLS)
    assert (finding.verdict, finding.outcome) == (Verdict.OBSERVED, "duplicate.one-effect")
    assert finding.documented  # P claims idempotentHint, and the suite saw it hold


def test_p_refuses_changed_arguments_under_one_key(p_report: Report) -> None:
    assert _verdict(p_report, Property.CHANGED_ARGUMENTS) == (Verdict.OBSERVED, "changed.refused")


def test_p_rest_of_the_report(p_report: Report) -> None:
    assert _verdict(p_report, Property.DELAYED_VISIBILITY) == (
        Verdict.OBSERVED, "visibility.immediate")
    assert _verdict(p_report, Property.CONFLICTING_ANNOTATIONS) == (
        Verdict.OBSERVED, "annotations.consistent")
    assert _verdict(p_report, Property.SESSION_ROTATION) == (Verdict.OBSERVED, "session.same")
    assert _verdict(p_report, Property.REMOVED_METHOD) == (Verdict.OBSERVED, "unlisted.refused")
    # A fast server answers before the cancel: the suite says it could not tell.
    assert _verdict(p_report, Property.CANCEL_AFTER_COMMIT) == (
        Verdict.UNKNOWN, "cancel.answered-first")


def test_the_report_names_every_property_once_with_known_outcomes(p_report: Report) -> None:
    assert [f.property for f in p_report.findings] == list(Property)
    assert all(f.outcome in OUTCOMES and f.evidence for f in p_report.findings)
    assert all(len(line) <= 400 for f in p_report.findings for line in f.evidence)
    assert p_report.server_name == "lockgate-fixture-drafts"


def test_the_report_renders_as_json_and_a_table(p_report: Report) -> None:
    decoded = json.loads(render_json(p_report))
    assert msgspec.convert(decoded, Report) == p_report
    table = render_table(p_report)
    assert all(str(p) in table for p in Property)


async def test_over_stdio_the_suite_starts_a_process_per_session(tmp_path: Path) -> None:
    state_dir = tmp_path / "stdio-p"
    report = await run_suite(StdioTarget(command=stdio_command("p", state_dir)), P_PROBE,
                             timeout_s=TIMEOUT_S)
    assert _verdict(report, Property.DUPLICATE_CALLS) == (Verdict.OBSERVED, "duplicate.one-effect")
    assert _verdict(report, Property.SESSION_ROTATION) == (Verdict.OBSERVED, "session.same")
    assert State(state_dir).items(), "the effects are in the server's own ledger"


# -- honest Q ---------------------------------------------------------------------------


def test_q_duplicate_calls_are_violated_two_publications(
    q_report: Report, honest: dict[str, HttpServerProcess]
) -> None:
    finding = q_report.finding(Property.DUPLICATE_CALLS)
    assert (finding.verdict, finding.outcome) == (Verdict.VIOLATED, "duplicate.two-effects")
    assert not finding.documented
    keys = {c["arguments"]["client_ref"] for c in State(honest["q"].state_dir).ledger()}
    first_key = min(keys, key=lambda k: int(k.rsplit("-", 1)[1]))
    assert len([i for i in State(honest["q"].state_dir).items() if i["key"] == first_key]) == 2


def test_q_applies_changed_arguments_under_one_reference(q_report: Report) -> None:
    assert _verdict(q_report, Property.CHANGED_ARGUMENTS) == (Verdict.VIOLATED, "changed.applied")


def test_q_claims_no_hint_the_suite_could_test(q_report: Report) -> None:
    assert _verdict(q_report, Property.CONFLICTING_ANNOTATIONS) == (
        Verdict.UNKNOWN, "annotations.no-claim")


# -- faulted Q ----------------------------------------------------------------------------


async def test_conflicting_annotations_are_violated_when_armed(
    faulted_q: HttpServerProcess, q_fault: Path
) -> None:
    arm(q_fault, "conflicting_annotations")
    report = await run_suite(HttpTarget(url=faulted_q.url), FAST_Q, timeout_s=TIMEOUT_S)
    finding = report.finding(Property.CONFLICTING_ANNOTATIONS)
    assert (finding.verdict, finding.outcome) == (Verdict.VIOLATED, "annotations.conflict")
    assert finding.documented
    assert any("readOnlyHint" in e for e in finding.evidence)
    assert any("idempotentHint" in e for e in finding.evidence)


async def test_delayed_visibility_is_violated_when_armed(
    faulted_q: HttpServerProcess, q_fault: Path
) -> None:
    arm(q_fault, "delay_visibility", seconds=0.5)
    report = await run_suite(HttpTarget(url=faulted_q.url), FAST_Q, timeout_s=TIMEOUT_S)
    finding = report.finding(Property.DELAYED_VISIBILITY)
    assert (finding.verdict, finding.outcome) == (Verdict.VIOLATED, "visibility.delayed")


async def test_visibility_delayed_past_the_window_is_unknown(
    faulted_q: HttpServerProcess, q_fault: Path
) -> None:
    arm(q_fault, "delay_visibility", seconds=30)
    probe = msgspec.structs.replace(FAST_Q, visibility_wait_s=0.5)
    report = await run_suite(HttpTarget(url=faulted_q.url), probe, timeout_s=TIMEOUT_S)
    assert _verdict(report, Property.DELAYED_VISIBILITY) == (
        Verdict.UNKNOWN, "visibility.never-seen")


async def test_a_cancel_after_commit_leaves_the_effect(
    faulted_q: HttpServerProcess, q_fault: Path
) -> None:
    # Every create answers late, so the suite's cancel lands after the commit.
    arm(q_fault, "delay_response", seconds=0.8, times=100)
    report = await run_suite(HttpTarget(url=faulted_q.url), FAST_Q, timeout_s=TIMEOUT_S)
    finding = report.finding(Property.CANCEL_AFTER_COMMIT)
    assert (finding.verdict, finding.outcome) == (Verdict.VIOLATED, "cancel.effect-happened")
    assert any("cancelled" in e for e in finding.evidence)


async def test_a_method_removed_after_planning_is_reported(
    faulted_q: HttpServerProcess, q_fault: Path
) -> None:
    arm(q_fault, "remove_tool", tool="list_items", after_lists=1)
    report = await run_suite(HttpTarget(url=faulted_q.url), FAST_Q, timeout_s=TIMEOUT_S)
    removed = report.finding(Property.REMOVED_METHOD)
    assert (removed.verdict, removed.outcome) == (Verdict.OBSERVED, "removed.refused")
    assert any("list_items" in e and "Unknown tool" in e for e in removed.evidence)
    rotation = report.finding(Property.SESSION_ROTATION)
    assert rotation.verdict == Verdict.VIOLATED
    assert any("tool removed: list_items" in e for e in rotation.evidence)


async def test_a_rug_pull_after_planning_violates_session_rotation(
    faulted_q: HttpServerProcess, q_fault: Path
) -> None:
    arm(q_fault, "change_description", after_lists=1)
    report = await run_suite(HttpTarget(url=faulted_q.url), FAST_Q, timeout_s=TIMEOUT_S)
    rotation = report.finding(Property.SESSION_ROTATION)
    assert (rotation.verdict, rotation.outcome) == (Verdict.VIOLATED, "session.changed")
    assert any("create_item: description changed" in e and "IMPORTANT" in e
               for e in rotation.evidence)
    assert any("tools/list_changed" in e for e in rotation.evidence)


# -- the command line ---------------------------------------------------------------------


def test_the_cli_prints_json_and_exits_1_on_a_violation(
    honest: dict[str, HttpServerProcess], capsys: pytest.CaptureFixture[str]
) -> None:
    status = cli_main(["--url", honest["q"].url, "--probe", "q", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert status == 1
    verdicts = {f["property"]: f["verdict"] for f in out["findings"]}
    assert verdicts["duplicate_calls"] == "violated"


def test_the_cli_reads_a_probe_file(
    honest: dict[str, HttpServerProcess], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    probe_file = tmp_path / "probe.json"
    probe_file.write_bytes(msgspec.json.encode(msgspec.structs.replace(P_PROBE, name="from-file")))
    status = cli_main(["--url", honest["p"].url, "--probe", str(probe_file)])
    out = capsys.readouterr().out
    assert status == 0
    assert "probe from-file" in out and "duplicate_calls" in out


def test_the_cli_says_so_when_it_cannot_connect(capsys: pytest.CaptureFixture[str]) -> None:
    status = cli_main(["--stdio", "/nonexistent/mcp-server", "--probe", "p", "--timeout", "2"])
    assert status == 2
    assert "could not run the suite" in capsys.readouterr().err


def test_lockgate_mcp_conformance_answers_a_person_and_a_script(
    honest: dict[str, HttpServerProcess], capsys: pytest.CaptureFixture[str]
) -> None:
    from lockgate.cli.app import main

    # --json before the command stands although the command has an option of that name.
    assert main(["--json", "mcp", "conformance", "--url", honest["q"].url, "--probe", "q"]) == 1
    script = json.loads(capsys.readouterr().out)
    assert {"findings", "probe", "target"} <= set(script)
    assert main(["mcp", "conformance", "--url", honest["q"].url, "--probe", "q"]) == 1
    person = capsys.readouterr().out
    assert "duplicate_calls" in person and "violated" in person
    for line in person.splitlines():
        with pytest.raises(ValueError):
            json.loads(line)
