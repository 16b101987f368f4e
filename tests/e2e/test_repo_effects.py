"""The repository world through the whole system: reads, path gates, sandboxed tests, publication."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from lockgate.client.sdk import Gateway
from lockgate.eventstore.jetstream import JetStreamEventStore
from lockgate.intent.codec import decode_event
from lockgate.intent.events import (
    CandidateNormalized,
    EffectCompleted,
    Event,
    NormalizationFailed,
    PolicyDecided,
    ReviewRequested,
)
from lockgate.testing.system import System
from lockgate.worlds.repo.sandbox import SandboxSettings, SandboxUnavailable, run_sandboxed
from lockgate.worlds.repo.world import World
from tests.conftest import require

CONTEXT = {"repo_id": "repo-1"}


@pytest.fixture
async def sandbox_here(tmp_path: Path) -> None:
    """Bubblewrap can make the test sandbox on this machine (``require``'s rule where not)."""
    try:
        ran = await run_sandboxed(["true"], tmp_path, SandboxSettings())
        why = "" if ran.exit_code == 0 else ran.output
    except SandboxUnavailable as exc:
        why = exc.detail
    require(not why, f"bubblewrap cannot make the test sandbox here ({why}): "
            "`make test` installs it as root (apt-get install bubblewrap)")


@pytest.fixture
def repo(system: System) -> World:
    """The repository world the adapter acts on, read from the test process."""
    return World(system.repo_dir)


async def events_of(system: System, candidate_id: str) -> list[Event]:
    nc = await system.connect()
    try:
        history = await JetStreamEventStore(nc).load("tenant-a", candidate_id)
    finally:
        await nc.close()
    return [decode_event(recorded) for recorded in history.events]


async def one(system: System, candidate_id: str, kind: type[Event]) -> Event:
    [event] = [e for e in await events_of(system, candidate_id) if isinstance(e, kind)]
    return event


async def approve(system: System, reviewer: Gateway, candidate_id: str) -> ReviewRequested:
    review = await one(system, candidate_id, ReviewRequested)
    assert isinstance(review, ReviewRequested)
    decided = await reviewer.decide_review(tenant="tenant-a", candidate_id=candidate_id,
                                           review_id=review.review_id, digest=review.digest,
                                           approve=True)
    assert decided == "ReviewApproved"
    return review


async def test_a_file_is_read_as_untrusted_text_under_one_name(
    system: System, gw: Gateway, repo: World
) -> None:
    run = await gw.open_run(tenant="tenant-a", actor="user-42", context=CONTEXT)
    turn = await run.open_turn()
    done = await turn.propose(tool="repo.read_file", arguments='{"path": "./docs//report.md"}')
    assert (done.status, done.code) == ("executed", "operation.executed")
    assert done.result is not None and done.result_label == "untrusted-data"
    assert done.result["text"].startswith("# Quarterly report")
    assert (done.result["path"], done.result["revision"]) == ("docs/report.md", "r3")
    plain = await turn.propose(tool="repo.read_file", arguments='{"path": "docs/report.md"}')
    assert plain.status == "executed"
    digests = [(await one(system, c, CandidateNormalized)).digest  # type: ignore[attr-defined]
               for c in (done.candidate_id, plain.candidate_id)]
    assert digests[0] == digests[1]
    assert [r["path"] for r in repo.reads()][-2:] == ["docs/report.md", "docs/report.md"]


@pytest.mark.parametrize(("path", "code"), [
    ("docs/../../etc/passwd", "argument.path.traversal"),
    ("%2e%2e/%2e%2e/etc/passwd", "argument.path.traversal"),
    ("/etc/passwd", "argument.path.absolute"),
    ("docs/passwd", "argument.path.symlink-escape"),
])
async def test_a_way_out_of_the_workspace_is_rejected_and_nothing_is_read(
    system: System, gw: Gateway, repo: World, path: str, code: str
) -> None:
    run = await gw.open_run(tenant="tenant-a", actor="user-42", context=CONTEXT)
    turn = await run.open_turn()
    before = (repo.invocations("read_file"), len(repo.reads()))
    resp = await turn.propose(tool="repo.read_file", arguments=f'{{"path": "{path}"}}')
    assert (resp.status, resp.code, resp.field) == ("rejected", code, "path")
    assert (repo.invocations("read_file"), len(repo.reads())) == before
    failed = await one(system, resp.candidate_id, NormalizationFailed)
    assert failed.reason == code  # type: ignore[attr-defined]


async def test_allowed_tests_run_in_the_sandbox_and_the_record_keeps_both_decisions(
    system: System, gw: Gateway, repo: World, sandbox_here: None
) -> None:
    run = await gw.open_run(tenant="tenant-a", actor="user-42", context=CONTEXT)
    turn = await run.open_turn()
    done = await turn.propose(tool="repo.run_tests", arguments='{"command": "python -m pytest -q"}')
    assert (done.status, done.code) == ("executed", "operation.executed")
    assert done.result is not None and done.result["passed"] is True
    decided = await one(system, done.candidate_id, PolicyDecided)
    assert decided.outcome == "allow"  # type: ignore[attr-defined]
    assert decided.facts["command"] == "python -m pytest -q"  # type: ignore[attr-defined]
    completed = await one(system, done.candidate_id, EffectCompleted)
    receipt = completed.receipt  # type: ignore[attr-defined]
    assert (receipt["sandbox_established"], receipt["sandbox_network"]) == ("true", "none")
    assert (receipt["sandbox_timed_out"], receipt["exit_code"]) == ("false", "0")
    assert completed.result["sandbox"]["environment"] == "scrubbed"  # type: ignore[attr-defined]


async def test_a_forbidden_command_is_denied_by_policy_and_never_runs(
    system: System, gw: Gateway, repo: World
) -> None:
    run = await gw.open_run(tenant="tenant-a", actor="user-42", context=CONTEXT)
    turn = await run.open_turn()
    before = (repo.invocations("run_tests"), len(repo.test_runs()))
    resp = await turn.propose(tool="repo.run_tests",
                              arguments='{"command": "sh -c \'cat /etc/passwd\'", "path": "tests"}')
    assert (resp.status, resp.code, resp.persistent) == ("denied", "repo.command-not-allowed", True)
    assert (repo.invocations("run_tests"), len(repo.test_runs())) == before
    kinds = [type(e).__name__ for e in await events_of(system, resp.candidate_id)]
    assert "PolicyDecided" in kinds and "ExecutionAuthorized" not in kinds


async def test_a_publication_waits_for_its_own_review_and_posts_once(
    system: System, gw: Gateway, reviewer: Gateway, repo: World
) -> None:
    """Approving the confidential summary's preparation does not approve publishing it."""
    run = await gw.open_run(tenant="tenant-a", actor="user-42", context=CONTEXT)
    turn = await run.open_turn()
    prepare = await turn.propose(tool="review.prepare_summary",
                                 arguments='{"path": "shared/confidential/salaries.md"}')
    assert prepare.status == "pending_approval"
    first_review = await approve(system, reviewer, prepare.candidate_id)
    prepared = await run.wait(prepare.candidate_id)
    assert prepared.status == "executed" and prepared.result is not None
    artifact = prepared.result["artifact"]

    posts = len(repo.board_posts())
    assert "review.publish_summary" not in {t.name for t in turn.tools}  # no summary yet then
    turn = await run.open_turn()
    publish = await turn.propose(tool="review.publish_summary",
                                 arguments=f'{{"artifact": "{artifact}"}}')
    assert (publish.status, publish.code) == ("pending_approval", "approval.pending")
    assert len(repo.board_posts()) == posts  # nothing reached the board
    review = await one(system, publish.candidate_id, ReviewRequested)
    assert review.review_id != first_review.review_id  # type: ignore[attr-defined]
    assert "external-review-board" in review.summary  # type: ignore[attr-defined]
    assert review.shown["title"] == "Compensation review (confidential)"  # type: ignore[attr-defined]

    await approve(system, reviewer, publish.candidate_id)
    done = await run.wait(publish.candidate_id)
    assert (done.status, done.code) == ("executed", "operation.executed")
    board = repo.board_posts()
    assert len(board) == posts + 1
    assert (board[-1]["artifact"], board[-1]["intent_id"]) == (artifact, publish.candidate_id)


async def test_the_seed_sequence_is_one_lineage_from_reading_to_disclosure(
    system: System, gw: Gateway, reviewer: Gateway, repo: World
) -> None:
    """Read a report (a wrong path, corrected), summarize it, publish the summary outside:
    one lineage across read, derive and disclose; each approval covers its own step."""
    run = await gw.open_run(tenant="tenant-a", actor="user-42", context=CONTEXT)
    turn = await run.open_turn()
    offered = {t.name for t in turn.tools}
    assert {"repo.read_file", "review.prepare_summary"} <= offered
    assert not {"review.publish_summary", "repo.prepare_patch"} & offered  # nothing to build on yet

    wrong = await turn.propose(tool="repo.read_file", call_id="read-1",
                               arguments='{"path": "reports/confidential/salary.md"}')
    assert (wrong.status, wrong.field) == ("rejected", "path")
    read = await turn.propose(tool="repo.read_file", call_id="read-2",
                              arguments='{"path": "reports/confidential/salaries.md"}')
    assert read.status == "pending_approval"   # confidential: a reviewer looks first
    await approve(system, reviewer, read.candidate_id)
    assert (await run.wait(read.candidate_id)).status == "executed"

    turn = await run.open_turn()   # the run has read a file: a patch may be offered now
    assert "repo.prepare_patch" in {t.name for t in turn.tools}
    summary = await turn.propose(tool="review.prepare_summary", call_id="summary-1", follows="read-2",
                                 arguments='{"path": "reports/confidential/salaries.md"}')
    assert summary.status == "pending_approval"
    summary_review = await approve(system, reviewer, summary.candidate_id)
    prepared = await run.wait(summary.candidate_id)
    assert prepared.status == "executed" and prepared.result is not None

    posts = len(repo.board_posts())
    turn = await run.open_turn()
    assert "review.publish_summary" in {t.name for t in turn.tools}
    publish = await turn.propose(tool="review.publish_summary", call_id="publish-1", follows="summary-1",
                                 arguments=json.dumps({"artifact": prepared.result["artifact"]}))
    # The summary's approval does not cover its publication: its own review, nothing posted.
    assert publish.status == "pending_approval"
    publish_review = await one(system, publish.candidate_id, ReviewRequested)
    assert isinstance(publish_review, ReviewRequested)
    assert publish_review.digest != summary_review.digest
    assert len(repo.board_posts()) == posts
    await approve(system, reviewer, publish.candidate_id)
    assert (await run.wait(publish.candidate_id)).status == "executed"
    assert len(repo.board_posts()) == posts + 1

    steps = {}
    for answer in (wrong, read, summary, publish):
        events = await events_of(system, answer.candidate_id)
        first = events[0]
        normalized = [e for e in events if isinstance(e, CandidateNormalized)]
        steps[answer.candidate_id] = (
            getattr(first, "follows", ""), normalized[0].lineage if normalized else None,
            normalized[0].effect_class if normalized else None)
    assert steps == {
        wrong.candidate_id: ("", None, None),
        read.candidate_id: (wrong.candidate_id, "repair", "read"),
        summary.candidate_id: (read.candidate_id, "branch", "derive"),
        publish.candidate_id: (summary.candidate_id, "branch", "publish"),
    }


_PLANTED = '''"""Committed to the repository: what a hostile contributor would plant."""
import json, os, pathlib, socket

TARGETS = json.loads({targets!r})


def test_steal():
    got = {{"read": {{}}, "stolen": {{}}, "write": {{}}, "wrote": []}}
    for path in TARGETS["read"]:
        try:
            got["stolen"][path[-40:]] = pathlib.Path(path).read_bytes().decode(errors="replace")[:60]
        except OSError as exc:
            got["read"][type(exc).__name__] = got["read"].get(type(exc).__name__, 0) + 1
    for path in TARGETS["write"]:
        try:
            pathlib.Path(path).write_text("planted")
            got["wrote"].append(path)
        except OSError as exc:
            got["write"][type(exc).__name__] = got["write"].get(type(exc).__name__, 0) + 1
    got["processes"] = len([p for p in os.listdir("/proc") if p.isdigit()])
    try:
        socket.create_connection(("127.0.0.1", TARGETS["port"]), timeout=2)
        got["broker"] = "CONNECTED"
    except OSError as exc:
        got["broker"] = "refused:" + type(exc).__name__
    # A failing test's captured output is what pytest prints, and what comes back.
    assert False, "STOLEN " + json.dumps(got, sort_keys=True)
'''


async def test_planted_repository_code_reads_no_credential_and_writes_nothing_outside(
    system: System, gw: Gateway, repo: World, sandbox_here: None
) -> None:
    """A test file committed to the repository runs under repo.run_tests (allowed, no reviewer)."""
    secrets = sorted(p for p in system.root.rglob("*")
                     if p.is_file() and (p.suffix in (".creds", ".key", ".pass", ".json") or "secrets" in p.parts
                                         or "credentials" in p.parts))
    assert len(secrets) >= 10  # the deployment's credentials, keys and reviewers' passwords
    planted = [system.root / "planted", system.root.parent / "planted", system.repo_dir / "planted",
               Path(sys.prefix) / "planted.pth"]
    port = int(system.url.rsplit(":", 1)[1])
    targets = json.dumps({"read": [str(p) for p in secrets], "write": [str(p) for p in planted],
                          "port": port})
    repo.commit("a helpful test", {"tests/test_steal.py": _PLANTED.format(targets=targets)})
    run = await gw.open_run(tenant="tenant-a", actor="user-42", context=CONTEXT)
    turn = await run.open_turn()
    done = await turn.propose(tool="repo.run_tests",
                              arguments='{"command": "python -m pytest -q", "path": "tests/test_steal.py"}')
    assert (done.status, done.code) == ("executed", "operation.executed")
    assert done.result is not None
    output = str(done.result["output"])
    assert "AssertionError: STOLEN " in output, output  # it ran, and what it found is what the model sees
    contents = [p.read_bytes().decode(errors="replace").strip() for p in secrets]
    assert not [c[:40] for c in contents if len(c) >= 8 and json.dumps(c)[1:41] in output]
    found = json.loads(output.split("AssertionError: STOLEN ", 1)[1].splitlines()[0])
    assert (found["read"], found["stolen"]) == ({"FileNotFoundError": len(secrets)}, {})
    assert found["wrote"] == [] and sum(found["write"].values()) == len(planted)
    assert not [p for p in planted if p.exists()]
    assert found["processes"] <= 4 and found["broker"].startswith("refused:")
    completed = await one(system, done.candidate_id, EffectCompleted)
    receipt = completed.receipt  # type: ignore[attr-defined]
    assert (receipt["sandbox_filesystem"], receipt["sandbox_user_namespaces"]) == ("private", "disabled")
    assert str(system.root) not in receipt["sandbox_visible"]
    again = await turn.propose(tool="repo.run_tests", arguments='{"command": "python -m pytest -q"}')
    assert again.status == "executed"  # the adapter is alive and runs the next one
