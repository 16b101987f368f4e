"""Every reason code Lockgate records, and every code a model may see.

Internal reason codes are precise and stay in the event store; model-facing codes
are few and deliberately vague. Both are public contracts: renaming one breaks
dashboards, policies and agent prompts, so a test pins these lists.
"""

from __future__ import annotations

#: Internal reason codes, by the step that records them.
REASONS: dict[str, str] = {
    # intake: the candidate's shape
    "candidate.malformed": "the candidate message itself could not be read",
    "candidate.unprocessable": "a message about the intent kept failing and was given up (cause kept)",
    "proposal.call-id-reused": "the call id was already used in the run with other bytes",
    "run.unknown": "no run with this id was opened by the trusted host",
    "run.ended": "the run was closed by its host, or went unused past its lease: it takes no more calls",
    "turn.unknown": "no turn with this id was opened in the run",
    "tool.name-invalid": "the tool name is not a capability name (lower-case dotted words)",
    "tool.unknown": "no capability has this name",
    "tool.not-offered": "the capability exists but the turn did not offer it (stage, roles, data classes, "
                        "prerequisites, budget or health: the turn's catalogue says which)",
    "tool.changed-since-turn": "the capability's contract changed after the turn was offered "
                               "(recorded by earlier versions; a turn's own schema now judges its calls)",
    # intake: a call the runtime could not assemble from its provider's stream or response
    "stream.truncated": "the stream ended with the call's arguments incomplete",
    "stream.conflicting-delta": "the stream gave one call two ids or names, or went on after it closed",
    "stream.repeated-field": "the stream repeated a field that comes once per call",
    "stream.too-large": "the call's arguments grew past the size limit mid-stream",
    "stream.cancelled": "the stream was cancelled mid-call: observed incomplete, never proposed",
    "provider.unknown-item": "the provider's response held an item of a kind the SDK does not know",
    "provider.item-malformed": "the provider's tool call lacks what every call has (a name)",
    # intake: lineage
    "lineage.unknown-predecessor": "the call the candidate says it follows is no candidate of the run",
    "tool.arguments.too-large": "the raw arguments exceed the capability's size limit",
    "tool.arguments.malformed": "the raw arguments are not one JSON object",
    "tool.arguments.too-deep": "the raw arguments nest deeper than intake reads",
    "tool.arguments.duplicate": "a key appears twice in the raw arguments",
    "tool.arguments.missing-required": "a required argument is missing",
    "tool.arguments.unexpected": "an argument the model does not control was supplied",
    "tool.arguments.invalid": "an argument has the wrong type or form",
    # intake: flood limits (bundle.yaml ``limits``), applied before anything expensive
    "rate.limited": "the actor, run or tenant proposed faster than its limit allows",
    "rate.in-flight": "the actor, run or tenant has as many candidates in flight as its limit allows",
    # normalization (adapter-specific codes follow the argument.<field>.<problem> shape)
    "argument.note.empty": "the note is empty after trimming",
    "argument.note.too-long": "the note exceeds 500 UTF-8 bytes",
    "argument.note.invalid": "the note is not text",
    "run.context.missing": "the run's context lacks what the capability needs",
    "capability.changed": "the capability's contract changed since intake",
    "capability.unavailable": "no adapter answered for the capability",
    # policy (forbid policy ids of the case-notes bundle)
    "case.not-found": "the case does not exist",
    "case.tenant-mismatch": "the case belongs to another tenant",
    "case.closed": "the case is closed",
    "case.writes-suspended": "writes to the case are suspended",
    "case.note.not-authorized": "the actor may not add notes to the case",
    "run.read-only-stage": "the run's stage allows reading only",
    "policy.no-permit": "no policy permits the action (default deny)",
    "policy.evaluation-error": "a policy could not be evaluated; errors never allow",
    "policy.approval-required": "policy permits the action only with a reviewer's approval",
    "facts.unavailable": "the adapter gave no facts; the decision is paused",
    "budgets.unavailable": "the budget counters could not be read; the decision is paused",
    "history.contended": "the run's history kept changing under the decision; it is paused",
    "policy.pause-expired": "the evidence a paused decision needed never came",
    "run.progress-stalled": "the run keeps proposing a consequence denied on unchanged facts, "
                            "or a lineage was refused as often as the bundle allows",
    "lineage.denied-before": "a reviewer denied this same consequence earlier in the lineage",
    "tool.no-longer-offered": "the capability its turn offered is not offered now (its adapter is gone)",
    # approval
    "review.denied": "a reviewer refused",
    "review.edited": "a reviewer changed the call: a new candidate replaces it, every gate again",
    "review.edit-unchanged": "a reviewer's edit proposed the bytes already under review",
    "review.expired": "nobody decided before the review expired",
    # executor: the final gate
    "gate.mapping-changed": "the capability's contract changed after the decision",
    "gate.approval-mismatch": "the approval does not bind the digest being executed",
    "gate.review-expired": "the approved review expired before execution",
    "gate.no-decision": "no allow decision is on record",
    "gate.prior-attempt": "an earlier attempt may already have produced the effect",
    "gate.attempts-exhausted": "attempts that failed before sending reached the limit",
    "gate.policy-changed": "current policy no longer permits the action",
    "gate.budget-missing": "a budget hold the decision took is no longer in place",
    # executor: attempts, as adapters report them
    "case.version-conflict": "the case changed between the final gate and the write",
    "case.credential-invalid": "the adapter's credential was refused by the world",
    "remote.rejected": "the remote system refused without a specific reason",
    # the MCP adapter (lockgate.mcp)
    "mcp.arguments-invalid": "the model's arguments do not satisfy the mapped capability's schema",
    "mcp.mapping-disabled": "the order was normalized under a mapping that is no longer served",
    "mcp.server-unavailable": "the MCP server was not connected, or its query gave no answer, "
                              "before the send boundary",
    "mcp.remote-refused": "the MCP server refused the call with a JSON-RPC error (it did not run the tool)",
    "board.tenant-mismatch": "the board belongs to another tenant",
    "adapter.error": "the adapter failed before its send boundary",
    "adapter.timeout": "the adapter gave up before its send boundary",
    "order.mismatch": "the order did not match the ExecutionAuthorized event it claims",
    "order.stale": "the order's attempt is no longer the current one",
    "order.precondition.missing": "the order lacks a precondition the adapter needs",
    "order.withdrawn": "a withdrawal was requested before the order crossed its send boundary",
    "order.expired": "the attempt's deadline passed before the order crossed its send boundary",
    # executor: reports that do not prove they answer an order the executor sent
    "report.token-missing": "the report carries no token from the order it claims to answer",
    "report.token-mismatch": "the report's token is not the one its order carried",
    "report.capability-mismatch": "the report's subject names another capability than the intent's",
    "report.intent-mismatch": "the report's subject names another intent than its body",
    "report.unreadable": "the report on this intent's subject could not be read",
    "report.unaddressed": "the report on this intent's subject names no intent in its body",
    # the items world (draft.prepare_private, item.publish)
    "argument.title.empty": "the title is empty after trimming",
    "argument.title.too-long": "the title exceeds its limit",
    "argument.title.invalid": "the title is not text",
    "argument.body.empty": "the body is empty after trimming",
    "argument.body.too-long": "the body exceeds its limit",
    "argument.body.invalid": "the body is not text",
    "space.not-found": "the space does not exist",
    "space.tenant-mismatch": "the space belongs to another tenant",
    "space.archived": "the space is archived",
    "item.not-authorized": "the actor may not create items in the space",
    "items.credential-invalid": "the adapter's credential was refused by the world",
    "items.fault-injected": "a fault armed in the simulated world failed the attempt before sending",
    "items.write-too-late": "the write reached the server after its attempt's not_after; nothing written",
    # the repository world (repo.read_file, review.prepare_summary, repo.prepare_patch,
    # repo.run_tests, review.publish_summary)
    "argument.path.invalid": "the path is not plain text a workspace path can be (encoded, NUL, too long)",
    "argument.path.absolute": "the path is absolute (or names a home directory or a drive)",
    "argument.path.traversal": "the path climbs out of its directory with a `..` segment, however spelled",
    "argument.path.symlink-escape": "the path follows a symlink that leads out of the workspace",
    "argument.path.not-found": "no file or directory has the path at the revision",
    "argument.path.not-a-file": "the path names a directory, not a file",
    "argument.revision.invalid": "the revision is not a revision id",
    "argument.revision.unknown": "no revision has this id",
    "argument.revision.stale": "the revision is no longer served (or, for a patch, no longer the head)",
    "argument.content.invalid": "the patch content is not text",
    "argument.content.too-long": "the patch content exceeds its limit",
    "argument.content.unchanged": "the patch content is the file's current content",
    "argument.command.invalid": "the command is not a command line (control characters, open quotes)",
    "argument.command.empty": "the command is empty",
    "argument.command.too-long": "the command exceeds its limit",
    "argument.artifact.invalid": "the artifact is not an artifact digest",
    "argument.artifact.unknown": "no summary artifact of the tenant has this digest",
    "repo.not-found": "the repository does not exist (or is not the run's tenant's)",
    "repo.tenant-mismatch": "the repository belongs to another tenant",
    "repo.not-a-member": "the actor is not a member of the repository",
    "repo.command-not-allowed": "the test command is not one the policy allows",
    "repo.test-path-not-allowed": "the tests may run only over the workspace's tests",
    "repo.base-stale": "the patch's base revision is no longer the head",
    "repo.credential-invalid": "the adapter's credential was refused by the world",
    "repo.revision-unknown": "the revision went missing between normalization and execution",
    "repo.revision-stale": "the revision stopped being served (or being the head) before execution",
    "repo.path-not-found": "the file went missing between normalization and execution",
    "repo.artifact-not-found": "the artifact went missing between normalization and execution",
    "repo.post-too-late": "the post reached the board after its attempt's not_after; nothing posted",
    "sandbox.unavailable": "the sandbox could not be made: nothing ran (fail closed)",
    "sandbox.network-shared": "the sandbox's network was not isolated: nothing ran (fail closed)",
    "sandbox.not-contained": "the sandbox's guard found it not as it must be: nothing ran (fail closed)",
    # the assistant worlds (deploy/policies/assistant): the run's history and the declarations
    "assistant.untrusted-reach": "after untrusted content entered the run, an effect that "
                                 "reaches someone its user did not name",
    "assistant.untrusted-destroy": "after untrusted content entered the run, an effect that "
                                   "cannot be taken back",
    "assistant.untrusted-credentials": "after untrusted content entered the run, a change to how "
                                       "the account is secured",
    "assistant.spending-review": "the run's payments would add up past what runs unattended",
    "assistant.spending-cap": "the run's payments would add up past what a run may spend",
    "assistant.publications-per-hour": "the actor published as often this hour as it may",
    # reviewers (Action "<capability>::approve")
    "review.self-approval": "a reviewer asked to approve their own request (or one made for them)",
    "policy.unavailable": "no policy bundle could answer whether the reviewer may approve",
    # withdrawal and reconciliation
    "proposal.withdrawn": "stopped by its state before anything was sent",
    "reconciled.not-executed": "an operator established that the effect never happened",
    "attempt.interrupted": "an interruptible attempt was stopped before its effect completed",
    # replay (lockgate.replay): fixture worlds answer from recorded evidence or declared fixtures
    "replay.fixture-missing": "a replayed candidate asked its fixture world something no recorded "
                              "evidence or declared fixture answers: it stops there (fail closed)",
}

#: The model-controlled arguments of the repository world's capabilities.
REPO_FIELDS: tuple[str, ...] = ("path", "revision", "content", "command", "artifact")

#: Everything a model can be told: (status, code). Field-scoped argument codes add
#: ``argument.<field>.missing`` and ``argument.<field>.invalid`` for any model-controlled field.
MODEL_CODES: frozenset[tuple[str, str]] = frozenset(
    {
        ("executed", "operation.executed"),
        ("rejected", "proposal.invalid"),
        ("rejected", "argument.note.missing"),
        ("rejected", "argument.note.empty"),
        ("rejected", "argument.note.too-long"),
        ("rejected", "argument.note.invalid"),
        *(
            ("rejected", f"argument.{field}.{problem}")
            for field in ("title", "body")
            for problem in ("missing", "empty", "too-long", "invalid")
        ),
        *(("rejected", code) for code in REASONS if code.split(".")[1] in REPO_FIELDS),
        *(("rejected", f"argument.{field}.missing") for field in REPO_FIELDS),
        ("denied", "repo.command-not-allowed"),
        ("denied", "repo.test-path-not-allowed"),
        ("denied", "repo.base-stale"),
        ("unavailable", "sandbox.unavailable"),
        ("unavailable", "operation.unavailable"),
        ("pending_approval", "approval.pending"),
        ("paused", "policy.paused"),
        ("outcome_unknown", "operation.outcome-unknown"),
        ("withdrawn", "proposal.withdrawn"),
        ("denied", "run.progress-stalled"),
        ("denied", "budget.exhausted"),
        ("denied", "rate.limited"),
        ("withdrawn", "operation.interrupted"),
        ("interruption_requested", "operation.interruption-requested"),
        ("withdrawal_requested", "operation.withdrawal-requested"),
        ("replaced", "review.edited"),
    }
)

#: The first word of a reason code: what a metric may say about a reason. Reason codes
#: can come from adapters and policy ids, so a label carries only a class from this set
#: (``other`` for any code outside it, ``none`` for no reason at all).
REASON_CLASSES: frozenset[str] = frozenset(
    {code.split(".", 1)[0] for code in REASONS} | {"argument", "budget", "none", "other"}
)


def reason_class(reason: str | None) -> str:
    """The class of ``reason`` (``case.closed`` → ``case``), always one of ``REASON_CLASSES``."""
    if not reason:
        return "none"
    head = reason.split(".", 1)[0]
    return head if head in REASON_CLASSES else "other"
