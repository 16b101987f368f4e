"""Lineage: how a candidate relates to the one it follows, and what that lets through."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from lockgate.authz import PolicyBundle
from lockgate.contracts.vocabulary import DecisionOutcome
from lockgate.intent.aggregate import EffectIntent
from lockgate.intent.events import CandidateNormalized, CandidateRejected
from lockgate.intent.lineage import Kind, compare, place
from lockgate.normalization.domain import placed
from lockgate.policy.domain import evaluate_for
from lockgate.testing.intents import History
from lockgate.testing.system import REPO

SCOPE = {"path": "reports", "tenant": "tenant-a"}
ARGS: dict[str, Any] = {"path": "reports", "recipients": ["a", "b"]}


def earlier(call: str = "call-1", **over: Any) -> History:
    h = History(call_id=call, tool="repo.share")
    return h.normalized(digest=over.pop("digest", "sha256:d1"), arguments=over.pop("arguments", ARGS),
                        resource=over.pop("resource", SCOPE), destination="board", effect_class="publish",
                        **over)


def kind_of(**succ: Any) -> Kind:
    fields: dict[str, Any] = dict(digest="sha256:d2", effect_class="publish", destination="board",
                                  resource=SCOPE, arguments=ARGS)
    fields.update(succ)
    tool = fields.pop("tool", "repo.share")
    return compare(earlier().intent, tool, **fields)


def test_the_same_digest_is_equivalent() -> None:
    assert kind_of(digest="sha256:d1") is Kind.EQUIVALENT


def test_a_path_below_or_fewer_recipients_is_narrowing() -> None:
    assert kind_of(resource={"path": "reports/q3.md", "tenant": "tenant-a"},
                   arguments={"path": "reports/q3.md", "recipients": ["a", "b"]}) is Kind.NARROWING
    assert kind_of(arguments={"path": "reports", "recipients": ["a"]}) is Kind.NARROWING


@pytest.mark.parametrize("change", [
    {"effect_class": "destroy"}, {"destination": "elsewhere"}, {"tool": "repo.other"},
    {"arguments": {"path": "reports", "recipients": ["a", "b", "c"]}},   # wider
    {"arguments": {"path": "reportsx", "recipients": ["a"]}},            # not below: a sibling
    {"resource": {"path": "docs", "tenant": "tenant-a"}},
    {"arguments": {"path": "reports", "recipients": ["a", "b"], "body": "new bytes"}},
])
def test_anything_else_is_a_new_branch(change: dict[str, Any]) -> None:
    assert kind_of(**change) is Kind.BRANCH


async def test_a_lineage_walks_back_past_syntax_repairs_and_counts_refusals() -> None:
    denied = earlier("call-1").decided(DecisionOutcome.DENY, ["repo.forbidden"])
    # call-2: refused at intake for its syntax (never got a consequence)
    syntax = History(call_id="call-2", tool="repo.share", follows=denied.intent_id)
    syntax.events[0] = CandidateRejected(
        **{k: v for k, v in msgspec.structs.asdict(syntax.events[0]).items()
           if k not in ("arguments", "contract_revision", "holds")},
        reason="tool.arguments.malformed", field=None, detail="")
    store = {h.intent_id: h.intent for h in (denied, syntax)}

    async def load(intent_id: str) -> EffectIntent | None:
        return store.get(intent_id)

    now = History(call_id="call-3", tool="repo.share", follows=syntax.intent_id).intent
    where = await place(now, load, digest="sha256:d9", effect_class="publish", destination="board",
                        resource=SCOPE, arguments={**ARGS, "body": "other bytes"})
    assert where is not None
    assert (where.kind, where.root, where.denials) == (Kind.BRANCH, denied.intent_id, 1)
    alone = History(call_id="call-4", tool="repo.share", follows=syntax.intent_id)
    store.pop(denied.intent_id)
    first = await place(alone.intent, load, digest="sha256:d9", effect_class="publish",
                        destination="board", resource=SCOPE, arguments=ARGS)
    assert first is not None and (first.kind, first.denials) == (Kind.REPAIR, 0)


#: The demo bundle, loaded once.
DEMO = PolicyBundle.load(REPO / "deploy" / "policies")


def successor(kind: Kind, *, denials: int = 0, predecessor_denied: bool = False) -> EffectIntent:
    return earlier("call-9", lineage=kind.value, lineage_root="r" * 32, lineage_denials=denials,
                   predecessor_denied=predecessor_denied).intent


def test_a_reviewers_denial_flows_to_an_equivalent_successor_and_nowhere_else() -> None:
    b = DEMO
    same = evaluate_for(successor(Kind.EQUIVALENT, predecessor_denied=True), b, None)
    assert (same.outcome, same.reasons) == (DecisionOutcome.DENY, ("lineage.denied-before",))
    for kind in (Kind.NARROWING, Kind.BRANCH):
        other = evaluate_for(successor(kind, predecessor_denied=True), b, None)
        assert other.reasons == ("facts.unavailable",)  # judged afresh: here, paused for facts


def test_the_progress_checkpoint_stops_a_lineage_probing_past_its_refusals() -> None:
    b = DEMO
    limit = b.config.progress.max_repeated_denials
    assert evaluate_for(successor(Kind.BRANCH, denials=limit), b, None).reasons == ("run.progress-stalled",)
    assert evaluate_for(successor(Kind.BRANCH, denials=limit - 1), b, None).reasons == ("facts.unavailable",)


def test_normalization_records_the_place_on_its_event() -> None:
    from lockgate.intent.lineage import Place
    h = History(follows="f" * 32)
    events = placed(h.normalized().events[1:], Place(Kind.NARROWING, "f" * 32, 2, False))
    (event,) = events
    assert isinstance(event, CandidateNormalized)
    assert (event.lineage, event.lineage_root, event.lineage_denials) == ("narrowing", "f" * 32, 2)
