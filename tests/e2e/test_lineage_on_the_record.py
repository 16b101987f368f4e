"""Lineage, evidence and the turn's catalogue on the real system.

A correction is linked to the call it corrects; a reviewer's denial flows to the same
consequence asked again and to nothing else; a model probing a forbidden action is
stopped after the bundle's refusals, one repairing its syntax is not; a turn offers
what the run may use, and a tool it withheld is refused as not offered.
"""

from __future__ import annotations

import json
from typing import TypeVar

import pytest

from lockgate.client.sdk import Gateway, Refused
from lockgate.eventstore.jetstream import JetStreamEventStore
from lockgate.intent.aggregate import Event
from lockgate.intent.codec import decode_event
from lockgate.intent.events import (
    CandidateNormalized,
    CandidateReceived,
    CandidateRejected,
    PolicyDecided,
    ReviewRequested,
)
from lockgate.testing.system import System
from lockgate.views.store import open_views
from lockgate.worlds.casenotes.world import World

NOTE = "case.add_note"


async def events_of(system: System, candidate_id: str) -> list[Event]:
    nc = await system.connect()
    try:
        history = await JetStreamEventStore(nc).load("tenant-a", candidate_id)
    finally:
        await nc.close()
    return [decode_event(r) for r in history.events]


E = TypeVar("E", bound=Event)


async def first_of(system: System, candidate_id: str, cls: type[E]) -> E:
    for event in await events_of(system, candidate_id):
        if isinstance(event, cls):
            return event
    raise AssertionError(f"no {cls.__name__} on {candidate_id}")


def note(text: str) -> str:
    return json.dumps({"note": text})


async def test_a_correction_in_the_turn_is_linked_to_the_refused_call_and_keeps_the_evidence(
    system: System, gw: Gateway, world: World,
) -> None:
    run = await gw.open_run(tenant="tenant-a", actor="user-42", context={"case_id": "case-123"})
    turn = await run.open_turn()
    broken = '{"note": "first try",'
    first = await turn.propose(tool=NOTE, arguments=broken, provider="anthropic.messages", model="m-7",
                               provider_item={"type": "tool_use", "id": "toolu_1", "name": NOTE})
    assert first.status == "rejected"
    writes = len(world.ledger())
    fixed = await turn.propose(tool=NOTE, arguments=note("first try"))
    assert fixed.status == "executed" and len(world.ledger()) == writes + 1

    rejected = await first_of(system, first.candidate_id, CandidateRejected)
    assert rejected.raw_arguments == broken  # the text exactly as received, kept as evidence
    assert (rejected.provider, rejected.model) == ("anthropic.messages", "m-7")
    assert rejected.provider_item == {"type": "tool_use", "id": "toolu_1", "name": NOTE}
    received = await first_of(system, fixed.candidate_id, CandidateReceived)
    assert (received.follows, received.follows_how) == (first.candidate_id, "automatic")
    normalized = await first_of(system, fixed.candidate_id, CandidateNormalized)
    assert (normalized.lineage, normalized.lineage_root, normalized.lineage_denials) == (
        "repair", first.candidate_id, 0)

    other_turn = await run.open_turn()   # another turn: no automatic link
    later = await other_turn.propose(tool=NOTE, arguments=note("unrelated"))
    assert (await first_of(system, later.candidate_id, CandidateReceived)).follows == ""

    views = open_views(var_dir=system.root)
    try:
        await system.views_caught_up(views)
        chain = views.lineage(fixed.candidate_id)
    finally:
        views.close()
    assert [r.intent_id for r in chain] == [first.candidate_id, fixed.candidate_id]
    assert chain[1].lineage == "repair"


async def test_a_reviewers_denial_flows_to_the_same_consequence_and_not_to_a_narrower_one(
    system: System, gw: Gateway, reviewer: Gateway, world: World,
) -> None:
    run = await gw.open_run(tenant="tenant-a", actor="user-42", context={"case_id": "case-sensitive"})
    turn = await run.open_turn()
    pending = await turn.propose(tool=NOTE, arguments=note("Escalate to legal and the press."),
                                 call_id="ask-1")
    assert pending.status == "pending_approval"
    shown = await reviewer.show_review(tenant="tenant-a", candidate_id=pending.candidate_id)
    await reviewer.decide_review(tenant="tenant-a", candidate_id=pending.candidate_id,
                                 review_id=shown.review_id, digest=shown.digest, approve=False,
                                 reason="not the press")
    assert (await run.wait(pending.candidate_id)).status == "unavailable"
    writes = (world.invocations, len(world.ledger()))

    # The same consequence, spelled otherwise and declared as following the denied one.
    again = await turn.propose(tool=NOTE, arguments='{ "note" : "Escalate to legal and the press." }',
                               call_id="ask-2", follows="ask-1")
    assert again.status == "unavailable"
    decided = await first_of(system, again.candidate_id, PolicyDecided)
    assert decided.reasons == ["lineage.denied-before"]
    assert not [e for e in await events_of(system, again.candidate_id)
                if isinstance(e, ReviewRequested)]   # the reviewer is not asked again

    # Other bytes: a new branch, reviewed afresh (an approval or a denial never crosses it).
    other = await turn.propose(tool=NOTE, arguments=note("Escalate to legal."), call_id="ask-3",
                               follows="ask-2")
    assert other.status == "pending_approval"
    normalized = await first_of(system, other.candidate_id, CandidateNormalized)
    assert normalized.lineage == "branch" and normalized.lineage_denials == 2
    assert (world.invocations, len(world.ledger())) == writes


async def test_probing_a_forbidden_action_is_stopped_and_repairing_syntax_is_not(
    system: System, gw: Gateway, world: World,
) -> None:
    run = await gw.open_run(tenant="tenant-a", actor="user-42", context={"case_id": "case-closed"})
    turn = await run.open_turn()
    statuses = []
    for i, spelling in enumerate(["Reopen it.", "reopen it", "REOPEN IT", "Re-open it.", "re open"]):
        answer = await turn.propose(tool=NOTE, arguments=note(spelling), call_id=f"probe-{i}")
        statuses.append((await first_of(system, answer.candidate_id, PolicyDecided)).reasons)
    # Each spelling is another consequence (another digest), linked to the refused one before it.
    assert statuses[:3] == [["case.closed"]] * 3
    assert statuses[3:] == [["run.progress-stalled"]] * 2

    repairs = await gw.open_run(tenant="tenant-a", actor="user-42", context={"case_id": "case-123"})
    t = await repairs.open_turn()
    for i, broken in enumerate(['{"note": ', '{"note": "x" "y"}', '{"note": 1}', '{"Note": "x"}']):
        assert (await t.propose(tool=NOTE, arguments=broken, call_id=f"fix-{i}")).status == "rejected"
    writes = len(world.ledger())
    done = await t.propose(tool=NOTE, arguments=note("finally right"), call_id="fix-9")
    assert done.status == "executed" and len(world.ledger()) == writes + 1
    normalized = await first_of(system, done.candidate_id, CandidateNormalized)
    assert (normalized.lineage, normalized.lineage_denials) == ("repair", 0)


async def test_a_declared_predecessor_must_be_a_candidate_of_the_run(system: System, gw: Gateway) -> None:
    run = await gw.open_run(tenant="tenant-a", actor="user-42", context={"case_id": "case-123"})
    turn = await run.open_turn()
    answer = await turn.propose(tool=NOTE, arguments=note("x"), follows="never-proposed")
    assert (answer.status, answer.code) == ("rejected", "proposal.invalid")
    rejected = await first_of(system, answer.candidate_id, CandidateRejected)
    assert rejected.reason == "lineage.unknown-predecessor"


async def test_a_turn_offers_what_the_run_may_touch_and_a_withheld_tool_is_not_offered(
    system: System, gw: Gateway, world: World,
) -> None:
    run = await gw.open_run(tenant="tenant-a", actor="user-42", context={"case_id": "case-123"},
                            data_classes=("item_draft",))
    turn = await run.open_turn()
    assert NOTE not in {t.name for t in turn.tools}   # case notes are outside the run's data classes
    writes = len(world.ledger())
    refused = await turn.propose(tool=NOTE, arguments=note("x"))
    assert (refused.status, refused.code) == ("rejected", "proposal.invalid")
    assert (await first_of(system, refused.candidate_id, CandidateRejected)).reason == (
        "tool.not-offered")
    unknown = await turn.propose(tool="case.export_all_notes", arguments="{}")
    assert (await first_of(system, unknown.candidate_id, CandidateRejected)).reason == (
        "tool.unknown")
    assert len(world.ledger()) == writes


async def test_a_run_offers_only_the_capabilities_its_agent_uses(
    system: System, gw: Gateway, world: World,
) -> None:
    """A ticket agent is not offered the deployment's other tools, nor can it call them."""
    others = {t.name for t in (await (await gw.open_run(
        tenant="tenant-a", actor="user-42", context={"case_id": "case-123"})).open_turn()).tools} - {NOTE}
    assert others, "the system under test serves more than one capability"
    run = await gw.open_run(tenant="tenant-a", actor="user-42", context={"case_id": "case-123"},
                            capabilities=(NOTE,))
    turn = await run.open_turn()
    assert [t.name for t in turn.tools] == [NOTE]
    assert (await turn.propose(tool=NOTE, arguments=note("x"))).status == "executed"
    writes = len(world.ledger())
    for name in sorted(others):
        refused = await turn.propose(tool=name, arguments="{}")
        assert (refused.status, refused.code) == ("rejected", "proposal.invalid")
        assert (await first_of(system, refused.candidate_id, CandidateRejected)).reason == (
            "tool.not-offered")
    assert len(world.ledger()) == writes
    with pytest.raises(Refused) as bad:
        await gw.open_run(tenant="tenant-a", actor="user-42", capabilities=("not a capability",))
    assert bad.value.code == "run.malformed"
