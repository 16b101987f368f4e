"""The repository capabilities over the repository world: read, summarize, patch, test, publish.

Five product verbs, each with an honest effect class:

- ``repo.read_file`` (read): a file's text at the head (or a named, still served)
  revision, bounded, handed to the model as untrusted data with the revision it read;
- ``review.prepare_summary`` (derive): an immutable summary artifact of a file at a
  revision, the same artifact for the same file and revision;
- ``repo.prepare_patch`` (derive): an immutable, content-addressed patch bound to the
  head revision it was prepared on;
- ``repo.run_tests`` (derive): a test command over a path of the workspace, in a
  throw-away copy of the revision, inside the sandbox (``lockgate.worlds.repo.sandbox``);
  policy decides which commands may run, the sandbox holds whatever runs;
- ``review.publish_summary`` (publish): a prepared summary posted to the external review
  board. Not idempotent but queryable: the post records the intent key as its client
  reference, so an unknown outcome is settled by asking.

Normalization is where a path is made safe: ``lockgate.worlds.repo.paths`` refuses every
way out of the workspace and writes each path once, symlinks inside the workspace
resolved, so the resource a policy judges is the file that would be read. The repository
comes from the run's context, never from the model.

The world's credential lives only here, in ``RepoWorldSettings``.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shlex
import shutil
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgspec
from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from lockgate.adapters.sdk import Adapter, Completed, Rejected, SendBoundary
from lockgate.contracts.capability import CapabilityContract
from lockgate.contracts.messages import (
    ExecutionOrder,
    Facts,
    FactsRequest,
    NormalizeRequest,
    NormalizeResult,
    QueryRequest,
    QueryResult,
)
from lockgate.contracts.vocabulary import QueryFinding
from lockgate.runtime.settings import Settings
from lockgate.worlds.repo import paths
from lockgate.worlds.repo.artifacts import is_confidential, patch_artifact
from lockgate.worlds.repo.capabilities import (
    COMMAND_MAX_BYTES,
    CONTENT_MAX_BYTES,
    DEFAULT_OUTCOME_DEADLINE_S,
    DEFAULT_TEST_PATH,
    PATCH,
    PUBLISH,
    READ,
    READ_TEXT_MAX_BYTES,
    REASONS,
    SUMMARY,
    TEST_OUTPUT_MAX_BYTES,
    TESTS,
    patch_contract,
    publish_contract,
    read_contract,
    summary_contract,
    tests_contract,
)
from lockgate.worlds.repo.paths import PathRefused
from lockgate.worlds.repo.sandbox import (
    SandboxSettings,
    SandboxUnavailable,
    interpreter_of,
    run_sandboxed,
)
from lockgate.worlds.repo.world import BOARD, DEMO_CREDENTIAL, RepoWorldError, World

__all__ = [
    "DEFAULT_OUTCOME_DEADLINE_S", "PATCH", "PUBLISH", "READ", "REASONS", "SUMMARY", "TESTS",
    "PreparePatchAdapter", "PrepareSummaryAdapter", "PublishSummaryAdapter", "ReadFileAdapter",
    "RepoWorldSettings", "RunTestsAdapter", "build_adapters", "canonical_command", "hidden_paths",
    "patch_contract", "publish_contract", "read_contract", "summary_contract", "tests_contract",
]


_ARTIFACT = re.compile(r"sha256:[0-9a-f]{64}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def hidden_paths(world_dir: Path, var_dir: Path) -> tuple[str, ...]:
    """What a sandboxed command must not see: the deployment's tree, its state and the home directory.

    The deployment's tree is the folder holding ``pyproject.toml`` above this package (a
    checkout), else the installed package; the virtual environment when there is one; the
    home directory's every entry but the one leading to the interpreter's installation.
    """
    here = Path(__file__).resolve()
    tree = next((p for p in here.parents if (p / "pyproject.toml").is_file()), here.parents[2])
    hidden = {str(world_dir.resolve()), str(var_dir.resolve()), str(tree), str(Path(sys.prefix).resolve())}
    _, prefix = interpreter_of(SandboxSettings())
    home = Path.home().resolve()
    if not prefix.startswith(str(home) + "/"):
        hidden.add(str(home))
    else:
        with contextlib.suppress(OSError):
            hidden.update(str(entry) for entry in home.iterdir()
                          if not prefix.startswith(str(entry) + "/"))
    return tuple(sorted(hidden))


class RepoWorldSettings(BaseSettings):
    """Where the repository world lives, its credential, the deadline and the sandbox's limits.

    Environment prefix ``LOCKGATE_REPO_WORLD_``.
    """

    model_config = SettingsConfigDict(env_prefix="LOCKGATE_REPO_WORLD_", frozen=True)

    #: Default: ``worlds/repo`` under the deployment's ``var`` directory (``LOCKGATE_VAR_DIR``).
    dir: Path = Field(default_factory=lambda: Settings().var_dir / "worlds" / "repo")
    credential: SecretStr = SecretStr(DEMO_CREDENTIAL)
    outcome_deadline_s: float = Field(default=DEFAULT_OUTCOME_DEADLINE_S, gt=0)
    #: bubblewrap, which makes the sandbox (a path or a name on PATH).
    bwrap: str = "bwrap"
    #: ``unshare``, which makes the sandbox's staging mount namespace when the adapter is root.
    unshare: str = "unshare"
    test_timeout_s: float = Field(default=10.0, gt=0)
    test_output_max_bytes: int = Field(default=TEST_OUTPUT_MAX_BYTES, gt=0)
    test_cpu_s: int = Field(default=10, gt=0)
    test_memory_bytes: int = Field(default=1 << 30, gt=0)
    test_processes: int = Field(default=64, gt=0)
    test_open_files: int = Field(default=256, gt=0)
    test_workspace_bytes: int = Field(default=64 << 20, gt=0)


class _Refused(Exception):
    """A normalization refusal: the reason code and the field it concerns."""

    def __init__(self, reason: str, field: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.field = field


def _cut(text: str, limit_bytes: int) -> str:
    """``text`` cut to at most ``limit_bytes`` of UTF-8, never inside a character."""
    return text.encode()[:limit_bytes].decode(errors="ignore")


def _fit(result: dict[str, Any], field: str, limit_bytes: int) -> dict[str, Any]:
    """``result`` with ``field`` (text) cut until the whole encodes within ``limit_bytes``."""
    text = str(result[field])
    while len(msgspec.json.encode({**result, field: text})) > limit_bytes and text:
        over = len(msgspec.json.encode({**result, field: text})) - limit_bytes
        text = _cut(text, max(0, len(text.encode()) - over - 16))
    return {**result, field: text}


class _RepoAdapter(Adapter):
    """What every repository capability shares: the world, the context, the path gates, facts."""

    operation: str
    object_kind: str

    def __init__(self, world: World, credential: str, contract: CapabilityContract) -> None:
        self.contract = contract
        self._world = world
        self._credential = credential

    async def normalize(self, req: NormalizeRequest) -> NormalizeResult:
        """Refuse what cannot be served; name the exact resource, canonically."""
        try:
            return await asyncio.to_thread(self._normalize, req)
        except _Refused as refused:
            return NormalizeResult(reason=refused.reason, field=refused.field)
        except PathRefused as refused:
            return NormalizeResult(reason=refused.reason, field="path")
        except RepoWorldError as refused:
            return NormalizeResult(reason=refused.reason)

    def _normalize(self, req: NormalizeRequest) -> NormalizeResult:
        raise NotImplementedError

    def _repo(self, req: NormalizeRequest) -> str:
        """The repository of the run (never the model's), if it is this tenant's."""
        repo_id = req.context.get("repo_id")
        if not repo_id:
            raise _Refused("run.context.missing")
        repo = self._world.repository(self._credential)
        if repo_id != repo["repo_id"] or repo["tenant"] != req.tenant:
            raise _Refused("repo.not-found")
        return repo_id

    def _revision(self, raw: object, *, must_be_head: bool = False) -> str:
        """The revision named (default: the head), if it is served."""
        if raw is None and not must_be_head:
            return self._world.head()
        if not isinstance(raw, str) or not raw.strip() or _CONTROL.search(raw):
            raise _Refused("argument.revision.invalid", "revision")
        status = self._world.revision_status(raw.strip())
        if status == "unknown":
            raise _Refused("argument.revision.unknown", "revision")
        if status == "stale" or (must_be_head and status != "head"):
            raise _Refused("argument.revision.stale", "revision")
        return raw.strip()

    def _file(self, raw: object, revision: str) -> paths.Resolved:
        return paths.resolve_file(self._world.tree(revision), paths.canonical(raw))

    def _file_at_revision(self, req: NormalizeRequest, *, destination: str) -> NormalizeResult:
        """A file of the workspace at a (current) revision: the arguments of a read or a
        summary; ``destination`` follows the repository's (``/artifacts`` for a summary)."""
        repo_id = self._repo(req)
        revision = self._revision(req.arguments.get("revision"))
        found = self._file(req.arguments.get("path"), revision)
        return NormalizeResult(
            arguments={"repo_id": repo_id, "path": found.path, "revision": revision},
            resource=self._resource(req, repo_id, found.path, revision),
            destination=f"repo:{req.tenant}/{repo_id}{destination}",
        )

    def _resource(self, req: NormalizeRequest, repo_id: str, path: str, revision: str,
                  **extra: str) -> dict[str, str]:
        return {"type": "repo", "id": f"{repo_id}:{self.object_kind}:{path}@{revision}",
                "repo": repo_id, "object": self.object_kind, "path": path, "revision": revision,
                "tenant": req.tenant, **extra}

    async def facts(self, req: FactsRequest) -> Facts:
        """The repository's facts for the actor, and the object's: path, confidentiality, command."""
        facts = await asyncio.to_thread(self._world.facts, self._credential, req.tenant, req.actor)
        head = str(facts.pop("head"))
        resource = req.resource
        path = resource.get("path", "")
        return Facts(facts={
            **facts,
            "object": resource.get("object", ""),
            "path": path,
            "confidential": is_confidential(path),
            "revision_current": resource.get("revision") == head,
            "command": resource.get("command", ""),
        }, revision=head)

    async def query(self, req: QueryRequest) -> QueryResult:
        """Look the effect up by the intent key it was done with."""
        found = await asyncio.to_thread(
            self._world.find, self._credential, self.operation, req.tenant, req.intent_key)
        if found is None:
            return QueryResult(finding=QueryFinding.ABSENT)
        return QueryResult(finding=QueryFinding.FOUND, receipt=found)

    async def _call(self, fn: Any, *args: Any) -> Any:
        """One world call; a refusal becomes ``Rejected`` (nothing happened)."""
        try:
            return await asyncio.to_thread(fn, *args)
        except RepoWorldError as exc:
            raise Rejected(exc.reason, str(exc)) from exc


class ReadFileAdapter(_RepoAdapter):
    """Serves ``repo.read_file``."""

    operation = "read_file"
    object_kind = "file"

    def _normalize(self, req: NormalizeRequest) -> NormalizeResult:
        return self._file_at_revision(req, destination="")

    async def execute(self, order: ExecutionOrder, boundary: SendBoundary) -> Completed:
        """Read the file at the revision; the text, bounded, is the result."""
        args = order.arguments
        await boundary.cross()
        receipt = await self._call(
            self._world.read_file, self._credential, order.tenant, order.actor,
            str(args["revision"]), str(args["path"]), order.intent_key, order.intent_id)
        text = await asyncio.to_thread(self._world.blob, receipt["blob"])
        size = len(text.encode())
        shown = _cut(text, READ_TEXT_MAX_BYTES)
        result = _fit({"path": receipt["path"], "revision": receipt["revision"], "text": shown,
                       "truncated": False, "size_bytes": size}, "text", self.contract.result_max_bytes)
        result["truncated"] = len(str(result["text"]).encode()) < size
        return Completed(receipt=receipt, result=result)


class PrepareSummaryAdapter(_RepoAdapter):
    """Serves ``review.prepare_summary``."""

    operation = "prepare_summary"
    object_kind = "file"

    def _normalize(self, req: NormalizeRequest) -> NormalizeResult:
        return self._file_at_revision(req, destination="/artifacts")

    async def execute(self, order: ExecutionOrder, boundary: SendBoundary) -> Completed:
        """Store the summary artifact (the same one for the same file and revision)."""
        args = order.arguments
        await boundary.cross()
        summary = await self._call(
            self._world.prepare_summary, self._credential, order.tenant, order.actor,
            str(args["revision"]), str(args["path"]), order.intent_key, order.intent_id)
        receipt = {"artifact": summary["artifact"], "path": summary["path"],
                   "revision": summary["revision"]}
        return Completed(receipt=receipt, result=dict(summary))


class PreparePatchAdapter(_RepoAdapter):
    """Serves ``repo.prepare_patch``."""

    operation = "prepare_patch"
    object_kind = "file"

    def _normalize(self, req: NormalizeRequest) -> NormalizeResult:
        repo_id = self._repo(req)
        revision = self._revision(req.arguments.get("revision"), must_be_head=True)
        found = self._file(req.arguments.get("path"), revision)
        content = req.arguments.get("content")
        if not isinstance(content, str):
            raise _Refused("argument.content.invalid", "content")
        if len(content.encode("utf-8", "surrogatepass")) > CONTENT_MAX_BYTES:
            raise _Refused("argument.content.too-long", "content")
        patch = patch_artifact(revision, found.path, self._world.blob(found.blob), content)
        if not patch["diff"]:
            raise _Refused("argument.content.unchanged", "content")
        return NormalizeResult(
            arguments={"repo_id": repo_id, "path": found.path, "revision": revision,
                       "content": content, "patch": patch["digest"], "diff": patch["diff"]},
            resource=self._resource(req, repo_id, found.path, revision),
            destination=f"repo:{req.tenant}/{repo_id}/patches",
        )

    async def execute(self, order: ExecutionOrder, boundary: SendBoundary) -> Completed:
        """Store the patch by its digest, on its base revision."""
        args = order.arguments
        await boundary.cross()
        patch = await self._call(
            self._world.prepare_patch, self._credential, order.tenant, order.actor,
            str(args["revision"]), str(args["path"]), str(args["content"]),
            order.intent_key, order.intent_id)
        if patch["digest"] != args["patch"]:  # the base is immutable: this would be a world bug
            raise RuntimeError("the stored patch is not the one normalized")
        lines = patch["diff"].splitlines()
        added = sum(1 for line in lines if line.startswith("+") and not line.startswith("+++"))
        removed = sum(1 for line in lines if line.startswith("-") and not line.startswith("---"))
        return Completed(
            receipt={"patch": patch["digest"], "path": patch["path"],
                     "revision": patch["base_revision"]},
            result={"patch": patch["digest"], "path": patch["path"],
                    "revision": patch["base_revision"], "lines_added": added,
                    "lines_removed": removed},
        )


def canonical_command(raw: object) -> str:
    """The one spelling of a command line: shell words, single-spaced, quoted where needed.

    Raises:
        _Refused: ``argument.command.invalid|empty|too-long``.
    """
    if not isinstance(raw, str) or _CONTROL.search(raw):
        raise _Refused("argument.command.invalid", "command")
    if len(raw.encode("utf-8", "surrogatepass")) > COMMAND_MAX_BYTES:
        raise _Refused("argument.command.too-long", "command")
    try:
        words = shlex.split(raw)
    except ValueError as exc:
        raise _Refused("argument.command.invalid", "command") from exc
    if not words:
        raise _Refused("argument.command.empty", "command")
    return shlex.join(words)


#: What of the sandbox's decision a test run's receipt names.
_RECEIPT_SANDBOX = ("established", "network", "filesystem", "visible", "user", "user_namespaces",
                    "timed_out", "symlinks_dropped")
_RECEIPT_LIMITS = ("cpu_s", "memory_bytes", "processes", "open_files", "file_bytes", "workspace_bytes")


class RunTestsAdapter(_RepoAdapter):
    """Serves ``repo.run_tests``: the command runs in the sandbox, on a throw-away checkout."""

    operation = "run_tests"
    object_kind = "test-run"

    def __init__(self, world: World, credential: str, contract: CapabilityContract,
                 sandbox: SandboxSettings) -> None:
        super().__init__(world, credential, contract)
        self._sandbox = sandbox

    def _normalize(self, req: NormalizeRequest) -> NormalizeResult:
        repo_id = self._repo(req)
        command = canonical_command(req.arguments.get("command"))
        revision = self._revision(req.arguments.get("revision"))
        target = paths.resolve(self._world.tree(revision),
                               paths.canonical(req.arguments.get("path", DEFAULT_TEST_PATH)))
        return NormalizeResult(
            arguments={"repo_id": repo_id, "command": command, "path": target.path,
                       "revision": revision},
            resource=self._resource(req, repo_id, target.path, revision, command=command),
            destination=f"sandbox:{req.tenant}/{repo_id}",
        )

    async def execute(self, order: ExecutionOrder, boundary: SendBoundary) -> Completed:
        """Run the command over the path in the sandbox; record its decision and the exit."""
        args = order.arguments
        command, path, revision = str(args["command"]), str(args["path"]), str(args["revision"])
        done = await asyncio.to_thread(
            self._world.find, self._credential, self.operation, order.tenant, order.intent_key)
        if done is None:
            await boundary.cross()
            outcome = await self._run(order, command, path, revision)
        else:  # this intent's run is on record: report it, run nothing again
            outcome = {}
        recorded = await self._call(
            self._world.record_test_run, self._credential, order.tenant, order.actor, revision,
            command, path, outcome, order.intent_key, order.intent_id)
        sandbox = dict(recorded["sandbox"])
        # A receipt holds 16 entries: the sandbox's whole decision is in the result and the ledger.
        receipt = {
            "run_id": str(recorded["run_id"]), "revision": revision, "command": command,
            "path": path, "exit_code": str(recorded["exit_code"]),
            **{f"sandbox_{k}": str(v).lower() if isinstance(v, bool) else str(v)
               for k, v in sandbox.items() if k in _RECEIPT_SANDBOX},
            "sandbox_limits": ",".join(f"{k}={sandbox[k]}" for k in _RECEIPT_LIMITS if k in sandbox),
        }
        result = _fit({
            "run_id": recorded["run_id"], "revision": revision, "command": command, "path": path,
            "passed": recorded["exit_code"] == 0, "exit_code": recorded["exit_code"],
            "timed_out": bool(sandbox["timed_out"]), "sandbox": sandbox,
            "output_truncated": bool(sandbox["output_truncated"]), "output": recorded["output"],
        }, "output", self.contract.result_max_bytes)
        return Completed(receipt=receipt, result=result)

    async def _run(self, order: ExecutionOrder, command: str, path: str,
                   revision: str) -> dict[str, Any]:
        """Check the revision out into a throw-away directory and run the command there."""
        # ``python`` is the sandbox's interpreter, with the test runner's packages bound in.
        argv = [*shlex.split(command), path]
        scratch = Path(tempfile.mkdtemp(prefix="lockgate-sandbox-"))
        try:
            workspace = scratch / "workspace"
            try:
                dropped = await asyncio.to_thread(self._world.checkout, revision, workspace)
            except RepoWorldError as exc:
                raise Rejected(exc.reason, str(exc)) from exc
            sandbox = replace(self._sandbox, hidden=(*self._sandbox.hidden, str(scratch)))
            try:
                ran = await run_sandboxed(argv, workspace, sandbox, {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
            except SandboxUnavailable as exc:
                # Fail closed: nothing ran, and nothing runs without the sandbox.
                raise Rejected(exc.reason, f"sandbox not established: {exc.detail}") from exc
        finally:
            await asyncio.to_thread(shutil.rmtree, scratch, True)
        return {"exit_code": ran.exit_code, "output": ran.output,
                "sandbox": {**ran.decision(), "symlinks_dropped": dropped}}


class PublishSummaryAdapter(_RepoAdapter):
    """Serves ``review.publish_summary`` (not idempotent; queried by client reference)."""

    operation = "publish_summary"
    object_kind = "artifact"

    def _normalize(self, req: NormalizeRequest) -> NormalizeResult:
        repo_id = self._repo(req)
        artifact = req.arguments.get("artifact")
        if not isinstance(artifact, str) or not _ARTIFACT.fullmatch(artifact.strip()):
            raise _Refused("argument.artifact.invalid", "artifact")
        artifact = artifact.strip()
        summary = self._world.summary(self._credential, req.tenant, artifact)
        if summary is None:
            raise _Refused("argument.artifact.unknown", "artifact")
        # What will be published is part of the request: the review binds these exact words.
        return NormalizeResult(
            arguments={"repo_id": repo_id, "artifact": artifact, "board": BOARD,
                       "title": summary["title"], "headings": list(summary["headings"]),
                       "excerpt": summary["excerpt"]},
            resource={**self._resource(req, repo_id, str(summary["path"]), str(summary["revision"])),
                      "id": f"{repo_id}:artifact:{artifact}", "artifact": artifact},
            destination=f"review-board:{BOARD}",
        )

    async def execute(self, order: ExecutionOrder, boundary: SendBoundary) -> Completed:
        """Post the summary to the board, unless this intent's post is already there."""
        # The board cannot tell a repeat from a new post: look first, a read before the boundary.
        found = await asyncio.to_thread(
            self._world.find, self._credential, self.operation, order.tenant, order.intent_key)
        if found is None:
            await boundary.cross()
            # The board refuses a post that reaches it after the boundary's not_after: one
            # held up past the deadline cannot land beside the retry of an absent outcome.
            found = await self._call(
                self._world.publish_summary, self._credential, order.tenant, order.actor,
                str(order.arguments["artifact"]), order.intent_key, order.intent_id,
                boundary.not_after)
        return Completed(receipt=found, result={"post_id": found["post_id"], "board": found["board"],
                                                "artifact": found["artifact"]})


def build_adapters(settings: RepoWorldSettings) -> tuple[_RepoAdapter, ...]:
    """Open (seeding it if empty) the world the settings name; return the five adapters over it."""
    credential = settings.credential.get_secret_value()
    world = World.open_or_seed(settings.dir, credential=credential)
    deadline = settings.outcome_deadline_s
    sandbox = SandboxSettings(
        bwrap=settings.bwrap, unshare=settings.unshare, timeout_s=settings.test_timeout_s,
        output_max_bytes=settings.test_output_max_bytes, cpu_s=settings.test_cpu_s,
        memory_bytes=settings.test_memory_bytes, processes=settings.test_processes,
        open_files=settings.test_open_files, workspace_bytes=settings.test_workspace_bytes,
        hidden=hidden_paths(settings.dir, Settings().var_dir))
    return (
        ReadFileAdapter(world, credential, read_contract(deadline)),
        PrepareSummaryAdapter(world, credential, summary_contract(deadline)),
        PreparePatchAdapter(world, credential, patch_contract(deadline)),
        RunTestsAdapter(world, credential, tests_contract(deadline), sandbox),
        PublishSummaryAdapter(world, credential, publish_contract(deadline)),
    )
