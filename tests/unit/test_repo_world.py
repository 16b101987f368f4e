"""The repository world: path gates, revisions, artifacts, the sandbox, publication, contracts."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from lockgate.adapters.sdk import Completed, Rejected, SendBoundary
from lockgate.client.output import Output
from lockgate.contracts.capability import EffectClass
from lockgate.contracts.messages import (
    ExecutionOrder,
    FactsRequest,
    NormalizeRequest,
    NormalizeResult,
    QueryRequest,
)
from lockgate.contracts.vocabulary import QueryFinding
from lockgate.worlds.repo import paths
from lockgate.worlds.repo.adapter import (
    PreparePatchAdapter,
    PrepareSummaryAdapter,
    PublishSummaryAdapter,
    ReadFileAdapter,
    RunTestsAdapter,
    canonical_command,
    patch_contract,
    publish_contract,
    read_contract,
    summary_contract,
)
from lockgate.worlds.repo.adapter import (
    tests_contract as run_tests_contract,
)
from lockgate.worlds.repo.sandbox import (
    SandboxSettings,
)
from lockgate.worlds.repo.world import (
    DEMO_CREDENTIAL,
    REASONS,
    NotAMember,
    RevisionStale,
    World,
    print_ledger,
)
from tests.conftest import require

CRED = DEMO_CREDENTIAL
CONTEXT = {"repo_id": "repo-1"}


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World.seed(tmp_path / "repo")


def _sandbox_works() -> bool:
    import subprocess

    try:
        done = subprocess.run(["bwrap", "--unshare-all", "--unshare-user", "--ro-bind", "/", "/", "true"],
                              capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


@pytest.fixture(scope="module")
def sandbox_available() -> None:
    """Skip where namespaces cannot be made here (a CI run must have them: it fails instead)."""
    require(_sandbox_works(), "bubblewrap cannot make namespaces here: `make test` installs it as root "
            "(apt-get install bubblewrap); user namespaces must be allowed")


def request(arguments: dict[str, Any], *, tenant: str = "tenant-a", actor: str = "user-42",
            context: dict[str, str] | None = None) -> NormalizeRequest:
    return NormalizeRequest(tenant=tenant, actor=actor, arguments=arguments,
                            context=CONTEXT if context is None else context)


def reader(world: World) -> ReadFileAdapter:
    return ReadFileAdapter(world, CRED, read_contract())


def runner(world: World, **sandbox: Any) -> RunTestsAdapter:
    return RunTestsAdapter(world, CRED, run_tests_contract(), SandboxSettings(**sandbox))


def order(capability: str, normalized: NormalizeResult, *, key: str = "key-1",
          actor: str = "user-42") -> ExecutionOrder:
    return ExecutionOrder(
        tenant="tenant-a", intent_id=f"intent-{key}", attempt_id="att-1", intent_key=key,
        capability=capability, digest="sha256:d", actor=actor,
        arguments=dict(normalized.arguments), resource=dict(normalized.resource),
        preconditions={}, authorized_version=4,
    )


class Boundary:
    """A send boundary that records whether it was crossed (and says until when to write)."""

    def __init__(self, not_after: datetime | None = None) -> None:
        self.crossings = 0
        self.not_after = not_after
        self.boundary = SendBoundary(self._cross)

    async def _cross(self) -> datetime | None:
        self.crossings += 1
        return self.not_after


async def execute(adapter: Any, normalized: NormalizeResult, *, not_after: datetime | None = None,
                  **kwargs: Any) -> tuple[Completed, Boundary]:
    boundary = Boundary(not_after)
    done = await adapter.execute(order(adapter.contract.name, normalized, **kwargs), boundary.boundary)
    return done, boundary


# -- the seed ------------------------------------------------------------------------------


def test_reason_codes_are_stable() -> None:
    assert REASONS == (
        "repo.credential-invalid", "repo.not-found", "repo.tenant-mismatch", "repo.not-a-member",
        "repo.revision-unknown", "repo.revision-stale", "repo.path-not-found",
        "repo.artifact-not-found", "repo.post-too-late",
    )
    assert paths.REASONS == (
        "argument.path.invalid", "argument.path.absolute", "argument.path.traversal",
        "argument.path.symlink-escape", "argument.path.not-found", "argument.path.not-a-file",
    )


def test_the_workspace_holds_real_symlinks_in_and_out(world: World) -> None:
    ws = world.workspace
    assert os.readlink(ws / "docs" / "latest.md") == "../reports/q3-incident.md"
    assert os.readlink(ws / "docs" / "passwd") == "/etc/passwd"
    assert os.readlink(ws / "etc") == "/etc"
    assert (ws / "shared").is_symlink() and (ws / "shared" / "q3-incident.md").is_file()
    assert (ws / "tests" / "test_docs.py").is_file()
    assert world.head() == "r3"
    assert [world.revision_status(r) for r in ("r1", "r2", "r3", "r9")] == [
        "stale", "served", "head", "unknown"]


def test_the_resolver_agrees_with_the_filesystem_on_every_symlink(world: World) -> None:
    """Whether a symlink escapes, as the resolver says, is what realpath finds on disk."""
    tree = world.tree(world.head())
    root = world.workspace.resolve()
    links = [p for p, e in tree.items() if e.kind == "symlink"]
    assert len(links) == 5
    for link in links:
        real = Path(os.path.realpath(world.workspace / link))
        assert paths.escapes(tree, link) == (not real.is_relative_to(root)), link


# -- the path gates ------------------------------------------------------------------------

TRAVERSALS = [
    "../etc/passwd", "..", "docs/../../x", "docs/../..", "./../x", "docs/..", "a/b/../../../c",
    "..\\etc\\passwd", "docs\\..\\..\\x", "%2e%2e/etc/passwd", "%2E%2E%2Fetc%2Fpasswd",
    "docs/%2e%2e/%2e%2e/x", "%252e%252e/etc", "..%2fetc", "..%5cetc", "．．/etc/passwd",
    "docs/．．/．．/x",
]
ABSOLUTES = ["/etc/passwd", "/", "//host/share", "\\etc\\passwd", "~/.ssh/id_rsa", "~", "~root/x",
             "C:\\Windows", "c:/x", "%2fetc%2fpasswd", "%7e/x"]
INVALIDS = ["docs/report.md\x00.txt", "docs\x00", "\x00", "docs/\nreport.md", "", "   ",
            "docs%2freport.md", "docs\\report.md", "a" * 600]


@pytest.mark.parametrize("path", TRAVERSALS)
async def test_every_traversal_spelling_is_refused(world: World, path: str) -> None:
    result = await reader(world).normalize(request({"path": path}))
    assert (result.reason, result.field) == ("argument.path.traversal", "path")


@pytest.mark.parametrize("path", ABSOLUTES)
async def test_absolute_and_home_paths_are_refused(world: World, path: str) -> None:
    result = await reader(world).normalize(request({"path": path}))
    assert (result.reason, result.field) == ("argument.path.absolute", "path")


@pytest.mark.parametrize("path", INVALIDS)
async def test_nul_bytes_control_characters_and_second_spellings_are_refused(world: World, path: str) -> None:
    result = await reader(world).normalize(request({"path": path}))
    assert (result.reason, result.field) == ("argument.path.invalid", "path")


@pytest.mark.parametrize("path", [None, 7, ["docs/report.md"]])
async def test_a_path_that_is_not_text_is_refused(world: World, path: object) -> None:
    result = await reader(world).normalize(request({"path": path}))
    assert (result.reason, result.field) == ("argument.path.invalid", "path")


@pytest.mark.parametrize("path", [
    "docs/passwd", "docs/outside.md", "etc/passwd", "etc", "./etc//passwd", "shared/../etc/x",
])
async def test_a_symlink_out_of_the_workspace_is_refused(world: World, path: str) -> None:
    result = await reader(world).normalize(request({"path": path}))
    if ".." in path:
        assert result.reason == "argument.path.traversal"
    else:
        assert (result.reason, result.field) == ("argument.path.symlink-escape", "path")


def test_symlink_escapes_are_found_however_deep() -> None:
    tree = {
        "a/b/up": paths.Entry("symlink", target="../../.."),
        "a/b/deep": paths.Entry("symlink", target="../../a/b/up/x"),
        "a/dir": paths.Entry("symlink", target="b"),
        "a/b/file.txt": paths.Entry("file", blob="sha256:1"),
        "loop": paths.Entry("symlink", target="loop"),
        "abs": paths.Entry("symlink", target="/tmp"),
    }
    for path in ("a/b/up", "a/b/up/etc", "a/b/deep", "a/dir/up/x", "abs/x"):
        with pytest.raises(paths.PathRefused) as refused:
            paths.resolve(tree, path)
        assert refused.value.reason == "argument.path.symlink-escape", path
    with pytest.raises(paths.PathRefused) as looped:
        paths.resolve(tree, "loop")
    assert looped.value.reason == "argument.path.invalid"
    assert paths.resolve(tree, "a/dir/file.txt") == paths.Resolved("a/b/file.txt", "file", "sha256:1")


async def test_a_symlink_inside_is_followed_to_the_file_it_names(world: World) -> None:
    result = await reader(world).normalize(request({"path": "docs/latest.md"}))
    assert result.reason is None
    assert result.arguments["path"] == "reports/q3-incident.md"


async def test_a_confidential_file_is_confidential_by_whichever_name(world: World) -> None:
    adapter = reader(world)
    direct = await adapter.normalize(request({"path": "reports/confidential/salaries.md"}))
    linked = await adapter.normalize(request({"path": "shared/confidential/salaries.md"}))
    assert direct == linked
    facts = await adapter.facts(FactsRequest(tenant="tenant-a", actor="user-42", resource=linked.resource))
    assert facts.facts["confidential"] is True
    assert facts.facts["path"] == "reports/confidential/salaries.md"


@pytest.mark.parametrize("spelling", [
    "./docs//report.md", "docs/./report.md", "docs//./report.md", "./docs/report.md/", "docs/report.md",
])
async def test_each_spelling_of_a_path_is_the_same_resource(world: World, spelling: str) -> None:
    adapter = reader(world)
    plain = await adapter.normalize(request({"path": "docs/report.md"}))
    assert await adapter.normalize(request({"path": spelling})) == plain
    assert plain.arguments == {"repo_id": "repo-1", "path": "docs/report.md", "revision": "r3"}
    assert plain.resource["id"] == "repo-1:file:docs/report.md@r3"


async def test_a_directory_or_a_missing_file_is_not_read(world: World) -> None:
    adapter = reader(world)
    assert (await adapter.normalize(request({"path": "docs"}))).reason == "argument.path.not-a-file"
    assert (await adapter.normalize(request({"path": "shared"}))).reason == "argument.path.not-a-file"
    assert (await adapter.normalize(request({"path": "docs/nope.md"}))).reason == "argument.path.not-found"
    missing = await adapter.normalize(request({"path": "README.md/x"}))
    assert missing.reason == "argument.path.not-found"


# -- revisions -----------------------------------------------------------------------------


async def test_stale_unknown_and_malformed_revisions_are_refused(world: World) -> None:
    adapter = reader(world)
    for revision, reason in (("r1", "argument.revision.stale"), ("r9", "argument.revision.unknown"),
                             ("", "argument.revision.invalid"), (3, "argument.revision.invalid"),
                             ("r2\x00", "argument.revision.invalid")):
        result = await adapter.normalize(request({"path": "docs/report.md", "revision": revision}))
        assert (result.reason, result.field) == (reason, "revision"), revision


async def test_a_served_older_revision_is_read_as_it_was(world: World) -> None:
    adapter = reader(world)
    older = await adapter.normalize(request({"path": "reports/q3-incident.md", "revision": "r2"}))
    done, _ = await execute(adapter, older)
    assert done.result["revision"] == "r2"
    assert "Follow-ups" not in done.result["text"]
    head = await adapter.normalize(request({"path": "reports/q3-incident.md"}))
    assert "Follow-ups" in (await execute(adapter, head, key="key-2"))[0].result["text"]


async def test_a_commit_moves_the_head_and_makes_old_revisions_stale(world: World) -> None:
    new = world.commit("edit guide", {"docs/guide.md": "# Guide\n\npython -m pytest\n"})
    assert (new, world.head()) == ("r4", "r4")
    assert world.revision_status("r2") == "stale"
    assert (world.workspace / "docs" / "guide.md").read_text().startswith("# Guide")
    assert (world.workspace / "docs" / "passwd").is_symlink()
    result = await reader(world).normalize(request({"path": "docs/guide.md", "revision": "r2"}))
    assert result.reason == "argument.revision.stale"


async def test_the_repository_comes_from_the_run_never_the_model(world: World) -> None:
    adapter = reader(world)
    assert (await adapter.normalize(request({"path": "README.md"}, context={}))).reason == "run.context.missing"
    other = await adapter.normalize(request({"path": "README.md"}, context={"repo_id": "repo-9"}))
    assert other.reason == "repo.not-found"
    tenant_b = await adapter.normalize(request({"path": "README.md"}, tenant="tenant-b", actor="user-77"))
    assert tenant_b.reason == "repo.not-found"


# -- reading -------------------------------------------------------------------------------


async def test_a_read_returns_the_text_and_the_revision_once_per_key(world: World) -> None:
    adapter = reader(world)
    normalized = await adapter.normalize(request({"path": "docs/report.md"}))
    done, boundary = await execute(adapter, normalized)
    assert boundary.crossings == 1
    assert done.result["text"].startswith("# Quarterly report\n")
    assert (done.result["revision"], done.result["truncated"]) == ("r3", False)
    again, _ = await execute(adapter, normalized)
    assert again.receipt == done.receipt
    assert len(world.reads()) == 1
    found = await adapter.query(QueryRequest(tenant="tenant-a", intent_id="i", intent_key="key-1", arguments={}))
    assert (found.finding, found.receipt["read_id"]) == (QueryFinding.FOUND, done.receipt["read_id"])
    absent = await adapter.query(QueryRequest(tenant="tenant-a", intent_id="i", intent_key="nope", arguments={}))
    assert absent.finding == QueryFinding.ABSENT


async def test_a_long_file_is_cut_to_the_result_limit_and_says_so(world: World) -> None:
    world.commit("big", {"docs/big.md": "\"\\\x01" * 20000})  # escapes grow when encoded
    adapter = reader(world)
    done, _ = await execute(adapter, await adapter.normalize(request({"path": "docs/big.md"})))
    assert done.result["truncated"] is True and done.result["size_bytes"] == 60000
    import msgspec

    assert len(msgspec.json.encode(done.result)) <= adapter.contract.result_max_bytes


async def test_a_non_member_reads_nothing(world: World) -> None:
    adapter = reader(world)
    normalized = await adapter.normalize(request({"path": "README.md"}, actor="user-13"))
    facts = await adapter.facts(FactsRequest(tenant="tenant-a", actor="user-13", resource=normalized.resource))
    assert facts.facts["actor_is_member"] is False
    with pytest.raises(Rejected) as refused:
        await execute(adapter, normalized, actor="user-13")
    assert refused.value.reason == NotAMember.reason
    assert world.reads() == [] and world.invocations("read_file") == 1


# -- summaries and patches -------------------------------------------------------------------


async def test_a_summary_is_the_same_artifact_for_the_same_file_and_revision(world: World) -> None:
    adapter = PrepareSummaryAdapter(world, CRED, summary_contract())
    normalized = await adapter.normalize(request({"path": "./reports//q3-incident.md"}))
    first, _ = await execute(adapter, normalized, key="key-1")
    second, _ = await execute(adapter, await adapter.normalize(request({"path": "docs/latest.md"})),
                              key="key-2")
    assert first.result == second.result
    assert first.result["title"] == "Q3 incident: queue stall"
    assert first.result["headings"] == ["Q3 incident: queue stall", "Timeline", "Impact", "Follow-ups"]
    assert first.result["artifact"].startswith("sha256:")
    older, _ = await execute(adapter, await adapter.normalize(
        request({"path": "reports/q3-incident.md", "revision": "r2"})), key="key-3")
    assert older.result["artifact"] != first.result["artifact"]
    assert len(world.summaries()) == 2


async def test_a_patch_is_content_addressed_and_bound_to_the_head(world: World) -> None:
    adapter = PreparePatchAdapter(world, CRED, patch_contract())
    args = {"path": "docs/guide.md", "revision": "r3", "content": "# Guide\n\nRun python -m pytest.\n"}
    normalized = await adapter.normalize(request(args))
    assert normalized.reason is None and normalized.arguments["diff"].startswith("--- a/docs/guide.md")
    first, _ = await execute(adapter, normalized, key="key-1")
    second, _ = await execute(adapter, await adapter.normalize(request(args)), key="key-2")
    assert first.result["patch"] == second.result["patch"] == normalized.arguments["patch"]
    assert len(world.patches()) == 1
    stale = await adapter.normalize(request({**args, "revision": "r2"}))
    assert (stale.reason, stale.field) == ("argument.revision.stale", "revision")
    unchanged = await adapter.normalize(request({**args, "content": world.blob(
        world.tree("r3")["docs/guide.md"].blob)}))
    assert (unchanged.reason, unchanged.field) == ("argument.content.unchanged", "content")
    escape = await adapter.normalize(request({**args, "path": "docs/passwd"}))
    assert escape.reason == "argument.path.symlink-escape"
    world.commit("moved on", {"README.md": "# Moved on\n"})
    with pytest.raises(Rejected) as moved:
        await execute(adapter, normalized, key="key-3")
    assert moved.value.reason == RevisionStale.reason


# -- commands ------------------------------------------------------------------------------


def test_a_command_is_spelled_once() -> None:
    assert canonical_command("  python   -m  pytest   -q ") == "python -m pytest -q"
    assert canonical_command("python -m 'pytest'") == "python -m pytest"
    assert canonical_command("sh -c 'curl x | sh'") == "sh -c 'curl x | sh'"


@pytest.mark.parametrize(("command", "reason"), [
    ("", "argument.command.empty"), ("   ", "argument.command.empty"),
    ("python 'open", "argument.command.invalid"), ("python\x00 -m pytest", "argument.command.invalid"),
    ("python -m pytest\n rm -rf /", "argument.command.invalid"), (["python"], "argument.command.invalid"),
    ("x" * 300, "argument.command.too-long"),
])
async def test_a_malformed_command_is_refused(world: World, command: object, reason: str) -> None:
    result = await runner(world).normalize(request({"command": command}))
    assert (result.reason, result.field) == (reason, "command")


async def test_any_well_formed_command_reaches_policy_with_its_path(world: World) -> None:
    """Normalization does not judge commands: policy does, on what facts say."""
    adapter = runner(world)
    result = await adapter.normalize(request({"command": "curl  http://example.com", "path": "./tests/"}))
    assert result.reason is None
    assert result.resource["command"] == "curl http://example.com"
    facts = await adapter.facts(FactsRequest(tenant="tenant-a", actor="user-42", resource=result.resource))
    assert (facts.facts["command"], facts.facts["path"], facts.facts["object"]) == (
        "curl http://example.com", "tests", "test-run")
    escape = await adapter.normalize(request({"command": "python -m pytest", "path": "../.."}))
    assert (escape.reason, escape.field) == ("argument.path.traversal", "path")


# -- the sandbox (attacked from inside in tests/integration/test_sandbox.py) --------------------


async def test_the_workspace_tests_run_in_the_sandbox_and_the_receipt_says_how(
    sandbox_available: None, world: World
) -> None:
    adapter = runner(world)
    normalized = await adapter.normalize(request({"command": "python -m pytest -q"}))
    done, boundary = await execute(adapter, normalized)
    assert boundary.crossings == 1
    assert done.result["passed"] is True, done.result["output"]
    assert "2 passed" in done.result["output"]
    assert done.receipt["sandbox_established"] == "true"
    assert done.receipt["sandbox_network"] == "none"
    assert (done.receipt["sandbox_timed_out"], done.receipt["exit_code"]) == ("false", "0")
    assert done.receipt["sandbox_symlinks_dropped"] == "3"  # the copy leaves out the ways out
    [run] = world.test_runs()
    assert json.loads(run["outcome"])["sandbox"]["network"] == "none"
    again, crossed = await execute(adapter, normalized)  # the same intent: reported, not rerun
    assert (again.receipt, crossed.crossings) == (done.receipt, 0)
    assert len(world.test_runs()) == 1


async def test_a_test_run_without_a_sandbox_fails_closed(world: World, tmp_path: Path) -> None:
    adapter = runner(world, bwrap=str(tmp_path / "missing-bwrap"))
    normalized = await adapter.normalize(request({"command": "python -m pytest -q"}))
    with pytest.raises(Rejected) as refused:
        await execute(adapter, normalized)
    assert refused.value.reason == "sandbox.unavailable"
    assert world.test_runs() == []
    assert run_tests_contract().disclosure["sandbox.unavailable"].code == "sandbox.unavailable"


# -- publication ---------------------------------------------------------------------------


async def prepared(world: World, path: str = "reports/q3-incident.md") -> str:
    adapter = PrepareSummaryAdapter(world, CRED, summary_contract())
    done, _ = await execute(adapter, await adapter.normalize(request({"path": path})), key=f"prep-{path}")
    return str(done.result["artifact"])


async def test_publishing_binds_what_is_published_and_posts_once(world: World) -> None:
    artifact = await prepared(world)
    adapter = PublishSummaryAdapter(world, CRED, publish_contract())
    normalized = await adapter.normalize(request({"artifact": artifact}))
    assert normalized.arguments["title"] == "Q3 incident: queue stall"
    assert normalized.resource["path"] == "reports/q3-incident.md"
    assert normalized.destination == "review-board:external-review-board"
    done, boundary = await execute(adapter, normalized)
    assert boundary.crossings == 1
    again, crossed = await execute(adapter, normalized)  # a later attempt finds the post first
    assert (again.receipt, crossed.crossings) == (done.receipt, 0)
    assert [p["client_ref"] for p in world.board_posts()] == ["key-1"]
    assert world.publish_summary(CRED, "tenant-a", "user-42", artifact, "key-1", "i")["post_id"] != (
        done.receipt["post_id"])  # the board itself does not deduplicate
    found = await adapter.query(QueryRequest(tenant="tenant-a", intent_id="i", intent_key="key-1", arguments={}))
    assert found.finding == QueryFinding.FOUND and found.receipt["post_id"] == done.receipt["post_id"]


async def test_a_post_reaching_the_board_after_the_boundary_s_not_after_is_refused(
    world: World,
) -> None:
    # Held up past its attempt's deadline, a post could land beside the retry that a query
    # finding it absent allowed: the board refuses it instead, and posts nothing.
    artifact = await prepared(world)
    adapter = PublishSummaryAdapter(world, CRED, publish_contract())
    normalized = await adapter.normalize(request({"artifact": artifact}))
    with pytest.raises(Rejected) as caught:
        await execute(adapter, normalized, not_after=datetime.now(UTC) - timedelta(seconds=1))
    assert caught.value.reason == "repo.post-too-late"
    assert world.board_posts() == []
    done, _ = await execute(adapter, normalized, not_after=datetime.now(UTC) + timedelta(seconds=30))
    assert [p["post_id"] for p in world.board_posts()] == [done.receipt["post_id"]]


async def test_an_unknown_or_malformed_artifact_is_refused(world: World) -> None:
    adapter = PublishSummaryAdapter(world, CRED, publish_contract())
    for artifact, reason in (("sha256:" + "0" * 64, "argument.artifact.unknown"),
                             ("not-a-digest", "argument.artifact.invalid"), (1, "argument.artifact.invalid")):
        result = await adapter.normalize(request({"artifact": artifact}))
        assert (result.reason, result.field) == (reason, "artifact")


def test_the_contracts_say_what_each_effect_is() -> None:
    classes = {c.name: (c.effect_class, c.idempotency is not None, c.query_by_identity) for c in (
        read_contract(), summary_contract(), patch_contract(), run_tests_contract(), publish_contract())}
    assert classes == {
        "repo.read_file": (EffectClass.READ, True, True),
        "review.prepare_summary": (EffectClass.DERIVE, True, True),
        "repo.prepare_patch": (EffectClass.DERIVE, True, True),
        "repo.run_tests": (EffectClass.DERIVE, True, True),
        "review.publish_summary": (EffectClass.PUBLISH, False, True),
    }
    publish = publish_contract()
    assert "retry_same_intent_if_absent" in publish.recovery
    assert publish.consequence is not None and "external-review-board" in publish.consequence.action
    assert run_tests_contract().disclosure["repo.command-not-allowed"].status == "denied"


def test_the_ledger_prints_as_json_lines(world: World) -> None:
    import io

    world.read_file(CRED, "tenant-a", "user-42", "r3", "README.md", "k", "i")
    out = io.StringIO()
    print_ledger(world.directory, Output(json=True, stdout=out))
    [line] = out.getvalue().splitlines()
    assert json.loads(line)["ledger"] == "read"
