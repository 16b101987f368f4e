"""Public contracts: reason codes, generated schemas, the event codec, the model-facing projection."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lockgate.authz import PolicyBundle
from lockgate.cli import schemas
from lockgate.contracts.reasons import MODEL_CODES, REASONS
from lockgate.eventstore.base import RecordedEvent
from lockgate.intent.codec import EventDecodeError, decode_event, encode_event
from lockgate.intent.disclosure import model_view
from lockgate.intent.events import CandidateNormalized, CandidateRejected, Event
from lockgate.intent.upcasters import UPCASTERS
from lockgate.testing.intents import History
from lockgate.worlds.casenotes.adapter import CONTRACT
from lockgate.worlds.casenotes.world import REASONS as WORLD_REASONS
from lockgate.worlds.items.world import REASONS as ITEMS_REASONS
from lockgate.worlds.repo.adapter import REASONS as REPO_ADAPTER_REASONS
from lockgate.worlds.repo.paths import REASONS as REPO_PATH_REASONS
from lockgate.worlds.repo.sandbox import REASONS as SANDBOX_REASONS
from lockgate.worlds.repo.world import REASONS as REPO_REASONS

REPO = Path(__file__).resolve().parents[2]
SOURCES = [*REPO.glob("libs/lockgate/**/*.py"), *REPO.glob("services/lockgate/**/*.py")]
CODE = re.compile(r'"((?:tool|argument|case|run|turn|candidate|gate|policy|review|capability|'
                  r'order|facts|remote|reconcile|reconciled|withdraw|proposal|space|item|items|attempt|'
                  r'rate|repo|sandbox)\.[a-z0-9.-]+)"')
NOT_REASONS = {  # refusal codes of request/reply answers and errors, not recorded reasons
    "run.malformed", "run.tenant-mismatch", "turn.malformed", "review.malformed",
    "review.unknown", "review.closed", "review.digest-mismatch", "candidate.too-large",
    "policy.bundle-invalid", "policy.denied", "policy.paused", "argument.note.missing",
    "reconcile.malformed", "reconcile.unknown-intent", "reconcile.nothing-open",
    "reconcile.bad-finding", "reconcile.who-and-why-required", "reconcile.already-settled",
    "reconcile.contended", "reconcile.unavailable",
    "policy.malformed", "policy.unknown-command", "policy.files-invalid", "policy.no-shadow",
    "policy.shadow-changed", "policy.promote-failed",  # operators' bundle commands' refusals
    "withdraw.malformed", "withdraw.unknown-intent", "withdraw.in-progress",
    "candidate.unknown",  # the SDK's error for a wait on an id that is no candidate of the run
    "item.publish",  # a capability name, not a reason
    "policy.cases-invalid", "budget.contention",  # a malformed case table (policy authors' tooling)
    "items.error", "items.response-lost",  # error classes of the items world, never recorded
    "repo.error",  # the root class of the repository world's errors; only subclasses are raised
    "repo.read_file", "repo.prepare_patch", "repo.run_tests",  # capability names, not reasons
    "case.error",  # the root class of the world's errors; only its subclasses are raised
    "run.json",  # the file a running supervisor describes itself in
    # why the adapter SDK stopped a worker at the send boundary without a report of its own
    "order.unchecked", "order.boundary-claimed", "order.claimed-late",
    "candidate.refused",  # the SDK's error when the stream refuses a candidate outright
}


def test_reason_codes_are_pinned() -> None:
    assert sorted(REASONS) == sorted([
        "adapter.error", "adapter.timeout", "argument.note.empty", "argument.note.invalid",
        "assistant.publications-per-hour", "assistant.spending-cap", "assistant.spending-review",
        "assistant.untrusted-credentials", "assistant.untrusted-destroy", "assistant.untrusted-reach",
        "history.contended",
        "argument.note.too-long", "candidate.malformed", "capability.changed",
        "capability.unavailable", "case.closed", "case.credential-invalid", "case.not-found",
        "case.note.not-authorized", "case.tenant-mismatch", "case.version-conflict",
        "case.writes-suspended", "facts.unavailable", "gate.approval-mismatch",
        "gate.attempts-exhausted", "gate.mapping-changed", "gate.no-decision",
        "gate.policy-changed", "gate.prior-attempt", "gate.review-expired", "order.mismatch",
        "order.precondition.missing", "order.stale", "policy.approval-required",
        "policy.evaluation-error", "policy.no-permit", "remote.rejected", "review.denied",
        "review.edit-unchanged", "review.edited", "review.expired", "run.context.missing", "run.unknown", "tool.arguments.duplicate",
        "tool.arguments.invalid", "tool.arguments.malformed", "tool.arguments.missing-required",
        "tool.arguments.too-large", "tool.arguments.unexpected", "tool.changed-since-turn",
        "tool.unknown", "turn.unknown", "proposal.withdrawn", "reconciled.not-executed",
        "attempt.interrupted", "policy.pause-expired", "run.ended", "run.progress-stalled",
        "run.read-only-stage", "gate.budget-missing", "budgets.unavailable",
        "argument.title.empty", "argument.title.too-long", "argument.title.invalid",
        "argument.body.empty", "argument.body.too-long", "argument.body.invalid",
        "space.not-found", "space.tenant-mismatch", "space.archived", "item.not-authorized",
        "items.credential-invalid", "items.fault-injected", "items.write-too-late",
        "review.self-approval",
        "policy.unavailable", "order.withdrawn", "order.expired",
        "report.token-missing", "report.token-mismatch", "report.capability-mismatch",
        "report.intent-mismatch", "report.unreadable", "report.unaddressed",
        "candidate.unprocessable", "proposal.call-id-reused", "tool.name-invalid",
        "tool.arguments.too-deep", "rate.limited", "rate.in-flight",
        "tool.not-offered", "stream.truncated", "stream.conflicting-delta",
        "stream.repeated-field", "stream.too-large", "stream.cancelled",
        "provider.unknown-item", "provider.item-malformed", "lineage.unknown-predecessor",
        "replay.fixture-missing",
        "lineage.denied-before", "tool.no-longer-offered",
        "argument.path.invalid", "argument.path.absolute", "argument.path.traversal",
        "argument.path.symlink-escape", "argument.path.not-found", "argument.path.not-a-file",
        "argument.revision.invalid", "argument.revision.unknown", "argument.revision.stale",
        "argument.content.invalid", "argument.content.too-long", "argument.content.unchanged",
        "argument.command.invalid", "argument.command.empty", "argument.command.too-long",
        "argument.artifact.invalid", "argument.artifact.unknown",
        "repo.not-found", "repo.tenant-mismatch", "repo.not-a-member", "repo.command-not-allowed",
        "repo.test-path-not-allowed", "repo.base-stale", "repo.credential-invalid",
        "repo.revision-unknown", "repo.revision-stale", "repo.path-not-found",
        "repo.artifact-not-found", "repo.post-too-late", "sandbox.unavailable",
        "sandbox.network-shared", "sandbox.not-contained",
        "mcp.arguments-invalid", "mcp.mapping-disabled", "mcp.server-unavailable",
        "mcp.remote-refused", "board.tenant-mismatch",
    ])
    assert all(re.fullmatch(r"[a-z]+(\.[a-z0-9-]+)+", code) for code in REASONS)


def test_every_code_in_the_source_is_listed() -> None:
    used = {m for path in SOURCES for m in CODE.findall(path.read_text())}
    unlisted = used - set(REASONS) - NOT_REASONS - {c for _, c in MODEL_CODES}
    assert unlisted == set()


def test_policy_and_world_reasons_are_listed() -> None:
    bundle = PolicyBundle.load(REPO / "deploy" / "policies")
    forbids = {pid for pid, effect in bundle.effects.items() if effect == "forbid"}
    assert forbids <= set(REASONS)
    assert set(WORLD_REASONS) - {"case.error"} <= set(REASONS)
    assert set(ITEMS_REASONS) <= set(REASONS)
    repo = {*REPO_REASONS, *REPO_PATH_REASONS, *REPO_ADAPTER_REASONS, *SANDBOX_REASONS}
    assert repo <= set(REASONS)


def test_schemas_are_generated_from_the_code() -> None:
    generated = schemas.generate()
    on_disk = {str(p.relative_to(schemas.SCHEMAS_DIR)): p.read_text()
               for p in schemas.SCHEMAS_DIR.rglob("*.json")}
    assert on_disk == generated, "run: python -m lockgate.cli.schemas"


def recorded(event: Event, intent_id: str, data: bytes | None = None) -> RecordedEvent:
    new = encode_event(event)
    return RecordedEvent("tenant-a", intent_id, event.originator_version, new.event_type,
                         new.event_id, data if data is not None else new.data, 1)


def test_codec_round_trips_every_event_of_a_history() -> None:
    h = History().normalized().decided("allow")
    for event in h.events:
        assert decode_event(recorded(event, h.intent_id)) == event


def test_codec_ignores_unknown_fields_and_refuses_unknown_types() -> None:
    h = History()
    event = h.events[0]
    data = encode_event(event).data.replace(b'"data":{', b'"data":{"added_later":1,', 1)
    assert decode_event(recorded(event, h.intent_id, data)) == event
    with pytest.raises(EventDecodeError):
        decode_event(RecordedEvent("tenant-a", h.intent_id, 1, "NoSuchEvent", "x", b"{}", 1))
    with pytest.raises(EventDecodeError):
        decode_event(recorded(event, h.intent_id, b"not json"))


def test_codec_upcasts_older_class_versions(monkeypatch: pytest.MonkeyPatch) -> None:
    h = History().normalized()
    old = h.events[-1]
    stored = recorded(old, h.intent_id)
    cls = CandidateNormalized

    def upcast_v1_v2(state: dict[str, object]) -> None:
        state["serializer"] = "upcast:" + str(state["serializer"])

    monkeypatch.setattr(cls, "version", 2)
    monkeypatch.setitem(UPCASTERS, ("CandidateNormalized", 1), upcast_v1_v2)
    upcast = decode_event(stored)
    assert isinstance(upcast, cls) and upcast.serializer == "upcast:jcs"


def test_model_view_discloses_only_model_controlled_fields() -> None:
    h = History()
    h.events[0] = CandidateRejected(
        originator_id=h.events[0].originator_id, originator_version=1,
        timestamp=h.events[0].timestamp, originator_topic=h.events[0].originator_topic,  # type: ignore[attr-defined]
        event_id="e", correlation_id="r", causation_id="c", tenant="tenant-a", run_id="run-1",
        turn_id="t", call_id="call-1", actor="user-42", tool="case.add_note", raw_digest="d",
        raw_size_bytes=1, catalogue_digest="c", reason="tool.arguments.unexpected", field="caseId",
        detail="")
    view = model_view(h.intent, CONTRACT)
    assert view is not None and (view.status, view.code, view.field) == ("rejected", "proposal.invalid", None)


@pytest.mark.parametrize(("field", "seen"), [
    ("note", ("rejected", "argument.note.invalid", "note")),  # the model's own: it can fix it
    ("case_id", ("rejected", "proposal.invalid", None)),       # not the model's to see
])
def test_a_value_the_offered_schema_refuses_is_told_by_its_field(field: str, seen: tuple[object, ...]) -> None:
    h = History()
    first = h.events[0]
    h.events[0] = CandidateRejected(
        originator_id=first.originator_id, originator_version=1, timestamp=first.timestamp,
        originator_topic=first.originator_topic,  # type: ignore[attr-defined]
        event_id="e", correlation_id="r", causation_id="c", tenant="tenant-a", run_id="run-1",
        turn_id="t", call_id="call-1", actor="user-42", tool="case.add_note", raw_digest="d",
        raw_size_bytes=1, catalogue_digest="c", reason="tool.arguments.invalid", field=field, detail="")
    view = model_view(h.intent, CONTRACT)
    assert view is not None and (view.status, view.code, view.field) == seen


def test_denials_collapse_to_unavailable() -> None:
    h = History(contract_revision=CONTRACT.revision).normalized().decided("deny", ["case.closed"])
    view = model_view(h.intent, CONTRACT)
    assert view is not None and (view.status, view.code) == ("unavailable", "operation.unavailable")
    assert "case" not in repr(view).replace("case.add_note", "")


async def test_a_spurious_empty_key_listing_is_asked_again_before_a_turn_offers_nothing() -> None:
    """nats-py's ``keys()`` can say "no keys" while keys exist (nats-io/nats.py#842)."""
    from nats.js.errors import NoKeysError

    from lockgate.runtime.ports.capabilities import EMPTY_RETRIES_S, CapabilityRegistry

    class Flaky:
        def __init__(self, false_empties: int) -> None:
            self.false_empties, self.asked = false_empties, 0

        async def keys(self) -> list[str]:
            self.asked += 1
            if self.asked <= self.false_empties:
                raise NoKeysError()
            return ["item.publish", "case.add_note"]

    once = Flaky(1)
    assert await CapabilityRegistry(once).names() == ["case.add_note", "item.publish"]  # type: ignore[arg-type]
    assert once.asked == 2
    empty = Flaky(99)
    assert await CapabilityRegistry(empty).names() == []  # type: ignore[arg-type]
    assert empty.asked == len(EMPTY_RETRIES_S) + 1
