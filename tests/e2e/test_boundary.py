"""The boundary as it ships: every process under its own user, tried by the weakest roles.

The system here is configured as ``make run`` configures it (``Settings.roles()``, the
same accounts, credentials made under its root). Each test connects as a role that is
not a service and tries what that role must not do; the broker refuses, or the service
that re-checks refuses and the record says so. The world's ledger and the stored events
are the evidence.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid

import msgspec
import pytest
from nats.aio.client import Client
from nats.errors import TimeoutError as NatsTimeout

from lockgate.client.sdk import Gateway, Refused
from lockgate.contracts import subjects
from lockgate.contracts.messages import AttemptReport, DecideReview
from lockgate.contracts.proofs import report_msg_id
from lockgate.contracts.vocabulary import ReportStage
from lockgate.core.ids import derived_id, intent_id_for
from lockgate.eventstore.jetstream import JetStreamEventStore
from lockgate.intent.aggregate import Stamp, State
from lockgate.intent.codec import decode_event, encode_event, fold
from lockgate.intent.events import (
    ApprovalRefused,
    EffectCompleted,
    Event,
    ReportRefused,
    ReviewApproved,
    Withdrawn,
)
from lockgate.runtime.topology import (
    BUDGETS_BUCKET,
    CAPABILITIES_BUCKET,
    CATALOGUES_BUCKET,
    EVENTS,
    EXEC,
    LOCKS_BUCKET,
    PROGRESS_BUCKET,
    REPORTS,
    RUNS_BUCKET,
)
from lockgate.testing.intents import T0
from lockgate.testing.system import System
from lockgate.worlds.casenotes.world import World

NOTE = '{"note": "Escalated to legal."}'
#: Every user of the deployment that is not a service or the topology owner.
NOT_SERVICES = ("host", "agent-tenant-a", "agent-tenant-b", "reviewer-alice", "reviewer-user-42",
                "operator-ops", "adapter-casenotes", "adapter-items", "adapter-repo")


async def as_user(system: System, user: str) -> tuple[Client, list[str]]:
    """A raw connection as ``user`` and the permission violations the server reports to it."""
    violations: list[str] = []

    async def on_error(exc: Exception) -> None:
        if "permissions violation" in str(exc):
            violations.append(str(exc))

    return await system.connect(user, error_cb=on_error), violations


async def history(system: System, tenant: str, intent_id: str) -> list[Event]:
    nc = await system.connect()
    try:
        return [decode_event(e) for e in (await JetStreamEventStore(nc).load(tenant, intent_id)).events]
    finally:
        await nc.close()


async def stored_counts(system: System) -> dict[str, int]:
    """Messages ever stored in each stream and bucket (last sequence: deletions do not hide one)."""
    nc = await system.connect()
    try:
        js = nc.jetstream()
        names = [EVENTS, EXEC, REPORTS] + [f"KV_{b}" for b in (
            RUNS_BUCKET, CATALOGUES_BUCKET, CAPABILITIES_BUCKET, LOCKS_BUCKET, PROGRESS_BUCKET,
            BUDGETS_BUCKET)]
        return {n: (await js.stream_info(n)).state.last_seq for n in names}
    finally:
        await nc.close()


async def awaiting_review(gw: Gateway, actor: str = "user-42") -> tuple[str, str]:
    """A note on the sensitive case, waiting for a reviewer: (run id, candidate id)."""
    run = await gw.open_run(tenant="tenant-a", actor=actor, context={"case_id": "case-sensitive"})
    turn = await run.open_turn()
    pending = await turn.propose(tool="case.add_note", arguments=NOTE)
    assert pending.status == "pending_approval"
    return run.id, pending.candidate_id


@pytest.mark.parametrize("user", NOT_SERVICES)
async def test_no_edge_role_or_adapter_can_write_the_record(system: System, user: str) -> None:
    """An event, an order, a report for another's capability, a review or resolution in
    another's name, a key in each bucket: every one refused by the broker, nothing stored."""
    forged = uuid.uuid4().hex
    # A capability another adapter serves (for an edge role, any is another's).
    others = "item.publish" if user == "adapter-casenotes" else "case.add_note"
    writes = [
        f"lg.evt.tenant-a.{forged}.1.CandidateReceived",
        f"lg.evt.tenant-a.{forged}.7.EffectCompleted",
        "lg.exec.case.add_note",
        f"lg.report.{others}.{forged}",
        f"lg.review.tenant-a.{forged}.decide.nobody",
        f"lg.reconcile.tenant-a.{forged}.resolve.nobody",
        *(f"$KV.{b}.forged" for b in (RUNS_BUCKET, CATALOGUES_BUCKET, CAPABILITIES_BUCKET,
                                      LOCKS_BUCKET, PROGRESS_BUCKET, BUDGETS_BUCKET)),
    ]
    before = await stored_counts(system)
    nc, violations = await as_user(system, user)
    try:
        for subject in writes:
            await nc.publish(subject, b"{}")
            with contextlib.suppress(NatsTimeout, TimeoutError):
                await nc.jetstream().publish(subject, b"{}", timeout=0.3)
        await nc.flush()
        deadline = asyncio.get_running_loop().time() + 3
        while len({v for v in violations}) < len(writes) and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
    finally:
        await nc.close()
    refused = {s for s in writes if any(f'"{s.lower()}"' in v for v in violations)}
    assert refused == set(writes)
    after = await stored_counts(system)
    # Nothing of this user's landed; the running system's own heartbeats may renew
    # registrations in the capabilities bucket meanwhile, nothing else moves.
    assert {k: v for k, v in after.items() if k != f"KV_{CAPABILITIES_BUCKET}"} == {
        k: v for k, v in before.items() if k != f"KV_{CAPABILITIES_BUCKET}"}
    assert await history(system, "tenant-a", forged) == []


async def test_an_agent_cannot_read_or_act_in_another_tenant(system: System, gw: Gateway) -> None:
    _, candidate = await awaiting_review(gw)
    nc, violations = await as_user(system, "agent-tenant-b")
    try:
        await nc.subscribe("lg.response.tenant-a.>")
        await nc.publish(f"lg.withdraw.tenant-a._.{candidate}.agent-tenant-b", b"{}")
        await nc.publish(f"lg.jsapi.DIRECT.GET.LG_RESPONSES.lg.response.tenant-a.x.{candidate}", b"")
        await nc.publish(f"lg.turn.tenant-a.{uuid.uuid4().hex}", b"{}")
        await nc.flush()
        await asyncio.sleep(0.5)
    finally:
        await nc.close()
    assert len(violations) == 4, violations
    assert fold(await history(system, "tenant-a", candidate)).state is State.AWAITING_APPROVAL  # type: ignore[union-attr]


async def test_the_recorded_reviewer_is_the_authenticated_one_and_not_the_proposer(
    system: System, gw: Gateway, world: World
) -> None:
    run_id, candidate = await awaiting_review(gw, actor="user-42")
    before = (world.invocations, len(world.ledger()))
    own = await system.person("reviewer-user-42")
    alice = await system.person("reviewer-alice")
    try:
        review = await own.show_review(tenant="tenant-a", candidate_id=candidate)
        with pytest.raises(Refused) as refused:
            await own.decide_review(tenant="tenant-a", candidate_id=candidate,
                                    review_id=review.review_id, digest=review.digest, approve=True)
        assert refused.value.code == "review.self-approval"
        assert (world.invocations, len(world.ledger())) == before
        # The payload cannot name a reviewer: an old client's "reviewer" field is ignored.
        body = msgspec.json.encode({**msgspec.to_builtins(DecideReview(
            review_id=review.review_id, digest=review.digest, approve=True)), "reviewer": "alice"})
        reply = await own.nc.request(subjects.review("tenant-a", candidate, "decide", "user-42"),
                                     body, timeout=5)
        assert b"review.self-approval" in reply.data
        recorded = await alice.decide_review(tenant="tenant-a", candidate_id=candidate,
                                             review_id=review.review_id, digest=review.digest,
                                             approve=True)
        assert recorded == "ReviewApproved"
    finally:
        await own.close()
        await alice.close()
    done = await gw.run(tenant="tenant-a", run_id=run_id).wait(candidate)
    assert done.status == "executed"
    events = await history(system, "tenant-a", candidate)
    refusals = [e for e in events if isinstance(e, ApprovalRefused)]
    assert [(e.reviewer, e.reason) for e in refusals] == [("user-42", "review.self-approval")]
    (approved,) = [e for e in events if isinstance(e, ReviewApproved)]
    assert approved.reviewer == "alice"
    assert (world.invocations, len(world.ledger())) == (before[0] + 1, before[1] + 1)


async def test_a_reviewer_decides_only_in_the_tenants_they_review(system: System) -> None:
    nc, violations = await as_user(system, "reviewer-user-42")  # reviews tenant-a only
    try:
        subject = f"lg.review.tenant-b.{uuid.uuid4().hex}.decide.user-42"
        with contextlib.suppress(NatsTimeout, TimeoutError):
            await nc.request(subject, b"{}", timeout=0.5)
        await nc.flush()
        await asyncio.sleep(0.3)
    finally:
        await nc.close()
    assert any(subject.lower() in v for v in violations)


async def test_withdraw_is_scoped_to_the_run_that_proposed(
    system: System, gw: Gateway, operator: Gateway
) -> None:
    run_id, candidate = await awaiting_review(gw)
    other = await gw.open_run(tenant="tenant-a", actor="user-42", context={"case_id": "case-123"})
    with pytest.raises(Refused) as refused:
        await other.withdraw(candidate)  # the same tenant's agent, naming another run
    assert refused.value.code == "withdraw.unknown-intent"
    assert fold(await history(system, "tenant-a", candidate)).state is State.AWAITING_APPROVAL  # type: ignore[union-attr]
    stopped = await gw.run(tenant="tenant-a", run_id=run_id).withdraw(candidate)
    assert stopped.status == "withdrawn"
    (withdrawn,) = [e for e in await history(system, "tenant-a", candidate)
                    if isinstance(e, Withdrawn)]
    assert withdrawn.by == "agent-tenant-a"

    _, second = await awaiting_review(gw)
    assert (await operator.withdraw("tenant-a", second)).status == "withdrawn"  # any run
    (by_operator,) = [e for e in await history(system, "tenant-a", second)
                      if isinstance(e, Withdrawn)]
    assert by_operator.by == "operator-ops"


async def test_a_forged_reply_on_anothers_response_subject_changes_nothing_they_see(
    system: System, gw: Gateway
) -> None:
    """Tenant A names tenant B's response subject as the reply of its own withdrawal.

    The reply (a model-facing response of A's candidate) is delivered there, inside the
    edge account; B's SDK treats a message on that subject only as a wake-up and reads
    what it returns from the responses stream, which only intake writes.
    """
    b = await system.gateway("tenant-b")
    try:
        run_b = await b.open_run(tenant="tenant-b", actor="user-77", context={"case_id": "case-999"})
        turn_b = await run_b.open_turn()
        run_a, candidate_a = await awaiting_review(gw)
        call_b = uuid.uuid4().hex
        target = subjects.response_subject("tenant-b", run_b.id, intent_id_for("tenant-b", run_b.id, call_b))
        proposal = asyncio.create_task(
            turn_b.propose(tool="case.add_note", arguments=NOTE, call_id=call_b))
        for _ in range(5):
            await gw.nc.publish(subjects.withdraw("tenant-a", run_a, candidate_a, "agent-tenant-a"),
                                b"{}", reply=target)
            await asyncio.sleep(0.01)
        response = await proposal
    finally:
        await b.close()
    assert response.candidate_id == intent_id_for("tenant-b", run_b.id, call_b)
    assert response.status == "executed"


async def test_forged_approval_with_a_service_credential_is_caught_at_the_gate(
    system: System, gw: Gateway, world: World
) -> None:
    """Defense in depth: the approval service's own user appends an approval of another digest.

    The broker lets it (it is approval's event type); the final gate re-checks the
    binding, refuses on the record, and nothing reaches the world.
    """
    _, candidate = await awaiting_review(gw)
    before = (world.invocations, len(world.ledger()))
    nc = await system.connect("approval")
    try:
        store = JetStreamEventStore(nc)
        loaded = await store.load("tenant-a", candidate)
        intent = fold(decode_event(e) for e in loaded.events)
        assert intent is not None and intent.review_id is not None
        forged = ReviewApproved.next(
            intent, Stamp(now=T0, event_id=uuid.uuid4().hex, causation_id="forged"),
            review_id=intent.review_id, reviewer="mallory", digest="sha256:" + "f" * 64,
            policy_revision=intent.policy_revision or "", contract_revision=intent.contract_revision)
        await store.append(loaded, [encode_event(forged)])
    finally:
        await nc.close()
    deadline = asyncio.get_running_loop().time() + 20
    while True:
        final = fold(await history(system, "tenant-a", candidate))
        if final is not None and final.state.terminal or asyncio.get_running_loop().time() > deadline:
            break
        await asyncio.sleep(0.1)
    assert final is not None and (final.state, final.reason) == (State.REFUSED, "gate.approval-mismatch")
    assert (world.invocations, len(world.ledger())) == before


async def test_a_forged_report_published_first_does_not_take_the_genuine_reports_place(
    system: System, gw: Gateway, reviewer: Gateway, world: World
) -> None:
    """The adapter's own user, which never received the order, stores a token-less
    ``completed`` under the ids a report of the intent's first attempt could carry before
    the order exists; the genuine report still lands and the model is told ``executed``."""
    run_id, candidate = await awaiting_review(gw)
    attempt = derived_id("attempt", candidate, "1")  # what the executor will name it
    forged = AttemptReport(tenant="tenant-a", intent_id=candidate, attempt_id=attempt,
                           stage=ReportStage.COMPLETED, receipt={"note_id": "forged"}, adapter="mallory")
    creds = system.credentials("adapter-casenotes")
    nc = await system.connect("adapter-casenotes")
    try:
        js = nc.jetstream(prefix=creds.js_prefix)
        # the id a report of that attempt carried before, and the one a token-less report has now
        for msg_id in (f"{attempt}:{ReportStage.COMPLETED}", report_msg_id(attempt, ReportStage.COMPLETED, "")):
            await js.publish(subjects.report("case.add_note", candidate), msgspec.json.encode(forged),
                             headers={"Nats-Msg-Id": msg_id})
    finally:
        await nc.close()
    before = len(world.ledger())
    review = await reviewer.show_review(tenant="tenant-a", candidate_id=candidate)
    await reviewer.decide_review(tenant="tenant-a", candidate_id=candidate, review_id=review.review_id,
                                 digest=review.digest, approve=True)
    done = await gw.run(tenant="tenant-a", run_id=run_id).wait(candidate, timeout_s=20)
    assert done.status == "executed"
    events = await history(system, "tenant-a", candidate)
    assert [e.reason for e in events if isinstance(e, ReportRefused)]
    (completed,) = [e for e in events if isinstance(e, EffectCompleted)]
    assert completed.receipt.get("note_id") != "forged"
    assert len(world.ledger()) == before + 1
