"""The repository world's five capability contracts: names, schemas, limits, what is disclosed.

What policy and the model see of each verb (``lockgate.worlds.repo.adapter`` says what
each does and carries them out); the limits here bound what normalization accepts.
"""

from __future__ import annotations

from typing import Any

from lockgate.contracts.capability import (
    CapabilityContract,
    Disclosure,
    EffectClass,
    Idempotency,
)
from lockgate.contracts.consequence import Consequence
from lockgate.contracts.offer import Offer
from lockgate.worlds.repo.world import BOARD

READ = "repo.read_file"
SUMMARY = "review.prepare_summary"
PATCH = "repo.prepare_patch"
TESTS = "repo.run_tests"
PUBLISH = "review.publish_summary"

#: How long an attempt may stay silent before its outcome is unknown, by default.
DEFAULT_OUTCOME_DEADLINE_S = 30.0
#: The most of a file's text one read returns, in UTF-8 bytes (the rest is cut, and said so).
READ_TEXT_MAX_BYTES = 12 * 1024
#: The longest new content of a patched file, in UTF-8 bytes.
CONTENT_MAX_BYTES = 16 * 1024
#: The longest test command, in UTF-8 bytes.
COMMAND_MAX_BYTES = 256
#: Where tests run when no path is given.
DEFAULT_TEST_PATH = "tests"
#: The most of a test run's output kept, in bytes.
TEST_OUTPUT_MAX_BYTES = 4096


_SEVEN_DAYS_S = 7 * 24 * 3600


#: Reason codes ``normalize`` and ``execute`` produce themselves (the world, the path
#: gates and the sandbox add theirs: ``REASONS`` of each module).
REASONS: tuple[str, ...] = (
    "argument.revision.invalid",
    "argument.revision.unknown",
    "argument.revision.stale",
    "argument.content.invalid",
    "argument.content.too-long",
    "argument.content.unchanged",
    "argument.command.invalid",
    "argument.command.empty",
    "argument.command.too-long",
    "argument.artifact.invalid",
    "argument.artifact.unknown",
    "run.context.missing",
)

#: What the model may be told of a policy denial or a sandbox refusal (argument codes
#: are disclosed for the field they name without being listed).
_DENIALS: dict[str, Disclosure] = {
    "repo.command-not-allowed": Disclosure(
        "denied", "repo.command-not-allowed", "command", persistent=True,
        alternatives=("narrow_scope", "stop")),
    "repo.test-path-not-allowed": Disclosure(
        "denied", "repo.test-path-not-allowed", "path", persistent=True,
        alternatives=("narrow_scope", "stop")),
    "repo.base-stale": Disclosure(
        "denied", "repo.base-stale", "revision", persistent=True,
        alternatives=("use_read_capability", "stop")),
}
_SANDBOX_DOWN = Disclosure("unavailable", "sandbox.unavailable", persistent=False,
                           alternatives=("wait", "stop"))


def _schema(properties: dict[str, dict[str, Any]], required: tuple[str, ...]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required),
            "additionalProperties": False}


_PATH = {"type": "string", "description": "A path relative to the workspace root, e.g. docs/report.md."}
_REVISION = {"type": "string", "description": "A revision id (default: the current head)."}


def _result_schema(fields: dict[str, str]) -> dict[str, Any]:
    """A closed object of exactly ``fields`` (name -> JSON type, or a list of types)."""
    return {"type": "object", "properties": {n: {"type": t} for n, t in fields.items()},
            "required": list(fields), "additionalProperties": False}


def read_contract(outcome_deadline_s: float = DEFAULT_OUTCOME_DEADLINE_S) -> CapabilityContract:
    """The ``repo.read_file`` contract."""
    return CapabilityContract(
        name=READ,
        description=(
            "Read a text file of the repository you are working in, at the current revision "
            "or a named one. Give a path relative to the workspace root. The text is returned "
            f"as data (at most {READ_TEXT_MAX_BYTES} bytes; longer files are cut and say so), "
            "with the revision read."
        ),
        argument_schema=_schema({"path": _PATH, "revision": _REVISION}, ("path",)),
        context_arguments=("repo_id",),
        effect_class=EffectClass.READ,
        idempotency=Idempotency(key_field="intent_key", retention_s=_SEVEN_DAYS_S),
        query_by_identity=True,
        send_boundary="read request sent to the repository",
        postconditions=("a read of the file at the revision is in the ledger under the intent key",),
        recovery=("query", "retry_same_intent"),
        approval_hint="Reading changes nothing; confidential files are shown to the model.",
        consequence=Consequence(
            action="Read {resource.path} at revision {resource.revision} of repository {resource.repo}",
            visible_to="{actor} and the model working for them",
        ),
        data_classes=("source_file",),
        result_max_bytes=16 * 1024,
        result_schema=_result_schema({"path": "string", "revision": "string", "text": "string",
                                      "truncated": "boolean", "size_bytes": "integer"}),
        outcome_deadline_s=outcome_deadline_s,
        alternatives=("narrow_scope", "stop"),
    )


def summary_contract(outcome_deadline_s: float = DEFAULT_OUTCOME_DEADLINE_S) -> CapabilityContract:
    """The ``review.prepare_summary`` contract."""
    return CapabilityContract(
        name=SUMMARY,
        description=(
            "Prepare a summary of a file of the repository (its title, headings and first "
            "lines) as an artifact for review. Nothing is published; preparing the same file "
            "at the same revision again gives the same artifact. Returns the artifact's digest."
        ),
        argument_schema=_schema({"path": _PATH, "revision": _REVISION}, ("path",)),
        context_arguments=("repo_id",),
        effect_class=EffectClass.DERIVE,
        idempotency=Idempotency(key_field="intent_key", retention_s=_SEVEN_DAYS_S),
        query_by_identity=True,
        send_boundary="prepare-summary request sent to the repository",
        postconditions=("the summary artifact of the file at the revision is stored by its digest",),
        recovery=("query", "retry_same_intent"),
        approval_hint="The summary stays in the repository until someone publishes it.",
        consequence=Consequence(
            action="Prepare a summary of {resource.path} at revision {resource.revision}; "
                   "it is kept as an artifact, not published",
            visible_to="members of repository {resource.repo}",
        ),
        data_classes=("source_file", "summary_artifact"),
        result_schema=_result_schema({
            "artifact": "string", "path": "string", "revision": "string", "title": "string",
            "headings": "array", "excerpt": "string"}),
        outcome_deadline_s=outcome_deadline_s,
        alternatives=("request_approval", "stop"),
    )


def patch_contract(outcome_deadline_s: float = DEFAULT_OUTCOME_DEADLINE_S) -> CapabilityContract:
    """The ``repo.prepare_patch`` contract."""
    return CapabilityContract(
        name=PATCH,
        description=(
            "Prepare a patch that gives one existing file new content, on the current "
            "revision (name it: a patch on an older revision is refused). The patch is "
            "stored for review, not applied; the same change on the same revision is the "
            "same patch. Returns the patch's digest."
        ),
        argument_schema=_schema({
            "path": _PATH,
            "revision": {"type": "string", "description": "The revision the patch is based on: the head."},
            "content": {"type": "string",
                        "description": f"The file's whole new text, at most {CONTENT_MAX_BYTES} bytes."},
        }, ("path", "revision", "content")),
        context_arguments=("repo_id",),
        effect_class=EffectClass.DERIVE,
        max_argument_bytes=CONTENT_MAX_BYTES + 4096,
        idempotency=Idempotency(key_field="intent_key", retention_s=_SEVEN_DAYS_S),
        query_by_identity=True,
        send_boundary="prepare-patch request sent to the repository",
        postconditions=("the patch is stored by its digest, bound to its base revision",),
        recovery=("query", "retry_same_intent"),
        approval_hint="A prepared patch changes no file until someone applies it.",
        consequence=Consequence(
            action="Prepare a patch of {resource.path} on revision {resource.revision} "
                   "(stored for review, not applied)",
            visible_to="members of repository {resource.repo}",
            shows=("diff",),
        ),
        data_classes=("source_file", "patch_artifact"),
        # Offered once the run read a file: the model then knows a revision to base it on.
        offer=Offer(after=(READ,)),
        result_schema=_result_schema({"patch": "string", "path": "string", "revision": "string",
                                      "lines_added": "integer", "lines_removed": "integer"}),
        outcome_deadline_s=outcome_deadline_s,
        disclosure=dict(_DENIALS),
        alternatives=("use_read_capability", "stop"),
    )


def tests_contract(outcome_deadline_s: float = DEFAULT_OUTCOME_DEADLINE_S) -> CapabilityContract:
    """The ``repo.run_tests`` contract."""
    return CapabilityContract(
        name=TESTS,
        description=(
            "Run the repository's tests on a throw-away copy of the current revision, "
            "without network access, for a few seconds at most. Give the test command "
            "(e.g. `python -m pytest -q`) and the path to test (default `tests`). Returns "
            "whether they passed, the exit code and the start of the output."
        ),
        argument_schema=_schema({
            "command": {"type": "string", "description": "The test command, e.g. python -m pytest -q."},
            "path": {"type": "string", "description": "What to test, relative to the workspace root."},
            "revision": _REVISION,
        }, ("command",)),
        context_arguments=("repo_id",),
        effect_class=EffectClass.DERIVE,
        idempotency=Idempotency(key_field="intent_key", retention_s=_SEVEN_DAYS_S),
        query_by_identity=True,
        send_boundary="test command started in the sandbox",
        postconditions=("the run, with the sandbox's decision, is in the ledger under the intent key",),
        recovery=("query", "retry_same_intent"),
        approval_hint="Runs a command on a throw-away copy, with no network and a time limit.",
        consequence=Consequence(
            action="Run {args.command} on {resource.path} at revision {resource.revision}, in a "
                   "sandbox without network",
            visible_to="{actor} and the model working for them",
            shows=("command",),
        ),
        data_classes=("source_file", "test_output"),
        result_max_bytes=8 * 1024,
        outcome_deadline_s=outcome_deadline_s,
        disclosure={**_DENIALS, "sandbox.unavailable": _SANDBOX_DOWN,
                    "sandbox.network-shared": _SANDBOX_DOWN, "sandbox.not-contained": _SANDBOX_DOWN},
        alternatives=("narrow_scope", "stop"),
    )


def publish_contract(outcome_deadline_s: float = DEFAULT_OUTCOME_DEADLINE_S) -> CapabilityContract:
    """The ``review.publish_summary`` contract."""
    return CapabilityContract(
        name=PUBLISH,
        description=(
            "Publish a prepared summary (by its artifact digest) to the external review board, "
            "now. Everyone on the board, outside the organisation, can read it at once; it "
            "cannot be taken back. A reviewer approves every publication first."
        ),
        argument_schema=_schema({
            "artifact": {"type": "string",
                         "description": "The summary's digest, as review.prepare_summary returned it."},
        }, ("artifact",)),
        context_arguments=("repo_id",),
        effect_class=EffectClass.PUBLISH,
        idempotency=None,
        query_by_identity=True,
        send_boundary="post request written to the external review board",
        postconditions=("a post with the intent key as client reference exists on the board",),
        recovery=("query", "retry_same_intent_if_absent", "operator"),
        approval_hint=(
            "Publishing discloses the summary outside the organisation at once; it cannot be undone."
        ),
        consequence=Consequence(
            action=f"Publish the summary of {{resource.path}} at revision {{resource.revision}} "
                   f"to the {BOARD} now; it cannot be taken back",
            visible_to=f"every member of the {BOARD}, outside the organisation",
            shows=("title", "headings", "excerpt"),
        ),
        data_classes=("summary_artifact", "external_disclosure"),
        # Offered once the run has a summary to publish: a turn before that has no target.
        offer=Offer(after=(SUMMARY,)),
        result_schema=_result_schema({"post_id": "string", "board": "string", "artifact": "string"}),
        outcome_deadline_s=outcome_deadline_s,
        alternatives=("request_approval", "stop"),
    )
