"""The adapter SDK's pure parts: its subjects, the claim of a send boundary on the record, settling."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lockgate.contracts import subjects
from lockgate.contracts.messages import AttemptReport, Claim, ClaimAnswer, ExecutionOrder
from lockgate.contracts.proofs import DEADLINE_MARGIN_S, report_token, too_late, write_by
from lockgate.contracts.vocabulary import AttemptStage, ClaimVerdict, ReportStage
from lockgate.executor.claims import decide_claim
from lockgate.executor.domain import on_deadline, on_report, withdraw
from lockgate.intent.aggregate import State
from lockgate.intent.events import (
    AttemptFailedBeforeSend,
    ExecutionAuthorized,
    OutcomeUnknown,
    WithdrawalRequested,
)
from lockgate.runtime.settlement import Settlement, backoff_s, settle_as
from lockgate.testing.intents import T0, History

CAPABILITY = "case.add_note"
ATTEMPT = "att-1"

# -- subjects -------------------------------------------------------------------------------


def test_the_adapter_subjects_are_what_the_wire_has_always_carried() -> None:
    assert subjects.adapter(CAPABILITY, "facts") == "lg.adapter.case.add_note.facts"
    assert subjects.order(CAPABILITY) == "lg.exec.case.add_note"
    assert subjects.interrupt(CAPABILITY) == "lg.interrupt.case.add_note"
    assert subjects.report(CAPABILITY, "i1") == "lg.report.case.add_note.i1"
    assert subjects.adapter_status("casenotes") == "lg.status.adapter.casenotes"
    assert subjects.adapter_status(CAPABILITY) == "lg.status.adapter.case.add_note"


def test_adapter_subject_builders_refuse_what_is_not_a_name() -> None:
    for bad in ("a b", "*", "a.>", "", "A.b", "a.b.c.d.e"):
        for build in (subjects.order, subjects.interrupt, lambda c: subjects.adapter(c, "query"),
                      lambda c: subjects.report(c, "i1")):
            with pytest.raises(ValueError):
                build(bad)
    with pytest.raises(ValueError):
        subjects.adapter(CAPABILITY, "execute")
    with pytest.raises(ValueError):
        subjects.report(CAPABILITY, "a.b")


_WORD = st.from_regex(r"[a-z][a-z0-9_-]{0,8}", fullmatch=True)


@settings(derandomize=True, max_examples=200)
@given(st.lists(_WORD, min_size=1, max_size=4), st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True))
def test_a_report_subject_parses_back_to_what_built_it(words: list[str], intent_id: str) -> None:
    capability = ".".join(words)
    assert subjects.parse_report_subject(subjects.report(capability, intent_id)) == (
        capability, intent_id)


@settings(derandomize=True, max_examples=200)
@given(st.text(max_size=80))
def test_the_report_parser_never_raises(subject: str) -> None:
    address = subjects.parse_report_subject(subject)
    assert address is None or subject.startswith("lg.report.")


def test_what_is_not_a_report_subject() -> None:
    for subject in ("lg.report.x", "lg.exec.case.add_note", "lg.report", "x.report.a.b"):
        assert subjects.parse_report_subject(subject) is None


# -- a claim of the send boundary, decided on the record ---------------------------------------

KEY = b"k" * 32
DEADLINE = T0 + timedelta(seconds=30)


def authorized(deadline_s: float = 30.0) -> History:
    return History().normalized().decided("allow").add(
        ExecutionAuthorized, attempt_id=ATTEMPT, intent_key="key-1", digest="sha256:d1",
        policy_revision="p1", contract_revision="rev-1", gate_facts={"version": 1},
        deadline_at=T0 + timedelta(seconds=deadline_s))


def order_of(h: History, **changes: Any) -> ExecutionOrder:
    intent = h.intent
    attempt = changes.pop("attempt_id", ATTEMPT)
    fields: dict[str, Any] = dict(
        tenant=intent.tenant, intent_id=intent.intent_id, attempt_id=attempt, intent_key="key-1",
        capability=CAPABILITY, digest="sha256:d1", arguments=dict(intent.normalized_arguments),
        resource=dict(intent.resource), actor=intent.actor, preconditions={"version": 1},
        authorized_version=next(a.authorized_version for a in intent.attempts if a.attempt_id == ATTEMPT),
        report_token=report_token(KEY, intent.tenant, intent.intent_id, attempt, CAPABILITY))
    fields.update(changes)
    return ExecutionOrder(**fields)


def claim(h: History, claimant: str = "w1", *, now: Any = T0, idempotent: bool = False,
          written: bool = False, **changes: Any) -> tuple[list[Any], ClaimAnswer]:
    """Decide a claim of ``h``'s order on ``h``, and record what it appended."""
    events, answer = decide_claim(h.intent, Claim(order=order_of(h, **changes), claimant=claimant,
                                                  written=written),
                                  capability=CAPABILITY, key=KEY, idempotent=idempotent, now=now)
    h.extend(events)
    return events, answer


def kinds(events: list[Any]) -> list[str]:
    return [type(e).__name__ for e in events]


def test_the_authorized_order_crosses_and_the_record_names_its_claimant() -> None:
    h = authorized()
    events, answer = claim(h)
    assert kinds(events) == ["AttemptSent"] and events[0].claimant == "w1"
    assert answer.verdict is ClaimVerdict.CROSSED
    assert answer.not_after == DEADLINE - timedelta(seconds=DEADLINE_MARGIN_S)
    assert h.intent.state is State.SENT


def test_an_order_that_differs_from_its_authorization_fails_before_its_boundary() -> None:
    for changes in ({"digest": "sha256:other"}, {"arguments": {"note": "changed"}},
                    {"preconditions": {"version": 2}}, {"intent_key": "key-2"}, {"actor": "mallory"}):
        h = authorized()
        events, answer = claim(h, **changes)
        assert (answer.verdict, answer.reason) == (ClaimVerdict.REFUSED, "order.mismatch"), changes
        assert kinds(events) == ["AttemptFailedBeforeSend"], changes


def test_a_claim_without_the_executors_token_or_of_another_capability_records_nothing() -> None:
    for changes in ({"report_token": "forged"}, {"capability": "item.publish"}):
        h = authorized()
        events, answer = claim(h, **changes)
        assert (events, answer.verdict, answer.reason) == ([], ClaimVerdict.REFUSED, "order.mismatch")
        assert h.intent.state is State.AUTHORIZED


def test_a_withdrawal_before_the_boundary_withdraws_the_intent_and_refuses() -> None:
    h = authorized()
    h.add(WithdrawalRequested, attempt_id=ATTEMPT, by="runtime", why="")
    events, answer = claim(h)
    assert kinds(events) == ["Withdrawn"]
    assert (answer.verdict, answer.reason) == (ClaimVerdict.REFUSED, "order.withdrawn")
    assert claim(h, "w2")[1].reason == "order.stale"  # and nobody crosses it after


def test_no_crossing_within_the_margin_of_the_deadline() -> None:
    early = DEADLINE - timedelta(seconds=DEADLINE_MARGIN_S + 1)
    assert claim(authorized(), now=early)[1].verdict is ClaimVerdict.CROSSED
    h = authorized()
    events, answer = claim(h, now=DEADLINE - timedelta(seconds=DEADLINE_MARGIN_S))
    assert (answer.reason, kinds(events)) == ("order.expired", ["AttemptFailedBeforeSend"])


def test_one_claimant_crosses_unless_the_remote_deduplicates() -> None:
    h = authorized()
    assert claim(h, "w1")[1].verdict is ClaimVerdict.CROSSED
    again, answer = claim(h, "w1")  # its answer was lost: the same claim asked again
    assert (again, answer.verdict) == ([], ClaimVerdict.CROSSED)
    rival, refused = claim(h, "w2")
    assert (rival, refused.reason) == ([], "order.boundary-claimed")
    deduplicated, crossed = claim(h, "w2", idempotent=True)
    assert (deduplicated, crossed.verdict) == ([], ClaimVerdict.CROSSED)


def test_a_settled_or_superseded_attempt_is_stale_and_nothing_is_recorded() -> None:
    h = authorized()
    h.add(AttemptFailedBeforeSend, attempt_id=ATTEMPT, reason="x", detail="")
    h.add(ExecutionAuthorized, attempt_id="att-2", intent_key="key-1", digest="sha256:d1",
          policy_revision="p1", contract_revision="rev-1", gate_facts={"version": 1}, deadline_at=DEADLINE)
    assert claim(h)[1].reason == "order.stale"
    done = authorized()
    done.add(OutcomeUnknown, attempt_id=ATTEMPT, evidence="silence")
    events, answer = claim(done)
    assert (events, answer.reason) == ([], "order.stale")


def test_a_record_that_ends_before_the_authorization_leaves_the_claim_unchecked() -> None:
    h = authorized()
    behind = History().normalized().decided("allow")
    order = order_of(h)
    events, answer = decide_claim(behind.intent, Claim(order=order, claimant="w1"), capability=CAPABILITY,
                                  key=KEY, idempotent=False, now=T0)
    assert (events, answer.verdict) == ([], ClaimVerdict.UNCHECKED)


def test_a_write_without_crossing_is_recorded_sent_and_a_waiting_withdrawal_becomes_an_interruption(
) -> None:
    h = authorized()
    h.add(WithdrawalRequested, attempt_id=ATTEMPT, by="runtime", why="")
    events, answer = claim(h, written=True)
    assert kinds(events) == ["AttemptSent", "InterruptionRequested"]
    assert answer.verdict is ClaimVerdict.CROSSED and h.intent.interruption_requested


_ACTION = st.one_of(st.sampled_from(["w1", "w2", "w3"]), st.sampled_from(["withdraw", "deadline", "fail"]))


@settings(derandomize=True, max_examples=300)
@given(st.lists(_ACTION, max_size=12), st.booleans())
def test_at_most_one_claimant_crosses_an_attempt_and_never_after_it_settled(
    actions: list[str], idempotent: bool,
) -> None:
    """Any interleaving of claims by three deliveries with a withdrawal, the deadline and a
    report that the attempt failed before its boundary: where the remote does not
    deduplicate, one claimant at most is ever told to cross, a crossing is on the record
    before the answer, and the record never says withdrawn or failed-before-send of an
    attempt someone was told to cross."""
    h = authorized()
    crossed: set[str] = set()
    for action in actions:
        intent = h.intent
        if action == "withdraw":
            h.extend(withdraw(intent, by="runtime", why="", cause="w", now=T0))
        elif action == "deadline":
            h.extend(on_deadline(intent, ATTEMPT, cause="d", now=DEADLINE))
        elif action == "fail":
            report = AttemptReport(tenant="tenant-a", intent_id=intent.intent_id, attempt_id=ATTEMPT,
                                   stage=ReportStage.FAILED_BEFORE_SEND)
            h.extend(on_report(intent, report, None, cause=f"f{len(h.events)}", now=T0))
        else:
            _, answer = claim(h, action, idempotent=idempotent)
            if answer.verdict is ClaimVerdict.CROSSED:
                crossed.add(action)
                assert h.intent.attempt(ATTEMPT).crossed
    if not idempotent:
        assert len(crossed) <= 1
    if crossed:
        assert h.intent.state not in (State.WITHDRAWN, State.ALLOWED)
        assert h.intent.attempt(ATTEMPT).stage is not AttemptStage.FAILED_BEFORE_SEND


def test_too_late_is_the_deadline_less_the_margin() -> None:
    assert not too_late(None, T0) and not too_late(DEADLINE, T0)
    assert too_late(DEADLINE, DEADLINE - timedelta(seconds=DEADLINE_MARGIN_S))
    assert write_by(DEADLINE) == DEADLINE - timedelta(seconds=DEADLINE_MARGIN_S)


# -- settling --------------------------------------------------------------------------------


class Delivered:
    def __init__(self) -> None:
        self.calls: list[tuple[str, float | None]] = []

    async def ack(self) -> None:
        self.calls.append(("ack", None))

    async def nack(self, delay: float | None = None) -> None:
        self.calls.append(("nak", delay))

    async def reject(self) -> None:
        self.calls.append(("term", None))


async def test_each_settlement_is_its_verb() -> None:
    for how, expected in ((Settlement.ACK, ("ack", None)), (Settlement.NAK, ("nak", 1.0)),
                          (Settlement.TERM, ("term", None))):
        msg = Delivered()
        await settle_as(msg, how, delay_s=1.0)
        assert msg.calls == [expected]


def test_the_backoff_is_exactly_what_it_was() -> None:
    assert [backoff_s(n) for n in (1, 2, 3, 7, 8, 20)] == [0.2, 0.4, 0.8, 12.8, 15.0, 15.0]
    assert backoff_s(1, base_s=1.0, cap_s=60.0) == 1.0 and backoff_s(9, cap_s=60.0) == 51.2
