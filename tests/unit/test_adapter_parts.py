"""The adapter SDK's pure parts: its subjects, the check of an order against the record, settling."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lockgate.adapters.verify import (
    BOUNDARY_CLAIM_MAX_S,
    DEADLINE_MARGIN_S,
    OrderRefused,
    attempt_open,
    claimed_in_time,
    not_sent_stage,
    too_late,
    verify_crossing,
    verify_order,
)
from lockgate.contracts import subjects
from lockgate.contracts.messages import ExecutionOrder
from lockgate.contracts.vocabulary import ReportStage
from lockgate.eventstore import MemoryEventStore, RecordedEvent
from lockgate.intent.aggregate import EffectIntent
from lockgate.intent.codec import encode_event
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


# -- an order against the record ---------------------------------------------------------------


async def recorded(h: History) -> tuple[RecordedEvent, ...]:
    store = MemoryEventStore()
    history = await store.load("tenant-a", h.intent_id)
    return (await store.append(history, [encode_event(e) for e in h.events])).events


def authorized(deadline_s: float = 30.0) -> History:
    return History().normalized().decided("allow").add(
        EffectIntent.ExecutionAuthorized, attempt_id=ATTEMPT, intent_key="key-1", digest="sha256:d1",
        policy_revision="p1", contract_revision="rev-1", gate_facts={"version": 1},
        deadline_at=T0 + timedelta(seconds=deadline_s))


def order_of(h: History, **changes: Any) -> ExecutionOrder:
    intent = h.intent
    fields: dict[str, Any] = dict(
        tenant=intent.tenant, intent_id=intent.intent_id, attempt_id=ATTEMPT, intent_key="key-1",
        capability=CAPABILITY, digest="sha256:d1", arguments=dict(intent.normalized_arguments),
        resource=dict(intent.resource), actor=intent.actor, preconditions={"version": 1},
        authorized_version=intent.version)
    fields.update(changes)
    return ExecutionOrder(**fields)


async def test_the_authorized_order_is_verified() -> None:
    h = authorized()
    agg = verify_order(order_of(h), CAPABILITY, await recorded(h))
    assert agg.current_attempt is not None and agg.current_attempt.attempt_id == ATTEMPT


async def test_an_order_that_differs_from_its_authorization_is_a_mismatch() -> None:
    h = authorized()
    events = await recorded(h)
    for changes in ({"digest": "sha256:other"}, {"arguments": {"note": "changed"}},
                    {"preconditions": {"version": 2}}, {"capability": "item.publish"}):
        with pytest.raises(OrderRefused) as refused:
            verify_order(order_of(h, **changes), CAPABILITY, events)
        assert refused.value.reason == "order.mismatch", changes


async def test_a_withdrawal_before_the_boundary_refuses_the_order() -> None:
    h = authorized()
    order = order_of(h)
    h.add(EffectIntent.WithdrawalRequested, attempt_id=ATTEMPT, by="runtime", why="")
    with pytest.raises(OrderRefused) as refused:
        verify_order(order, CAPABILITY, await recorded(h))
    assert refused.value.reason == "order.withdrawn"


async def test_no_crossing_within_the_margin_of_the_deadline() -> None:
    h = authorized(deadline_s=30.0)
    order, events = order_of(h), await recorded(h)
    deadline = T0 + timedelta(seconds=30.0)
    verify_crossing(order, CAPABILITY, events, now=deadline - timedelta(seconds=DEADLINE_MARGIN_S + 1))
    with pytest.raises(OrderRefused) as refused:
        verify_crossing(order, CAPABILITY, events, now=deadline - timedelta(seconds=DEADLINE_MARGIN_S))
    assert refused.value.reason == "order.expired"


def test_too_late_and_claimed_in_time() -> None:
    deadline = T0 + timedelta(seconds=10)
    assert not too_late(None, T0) and not too_late(deadline, T0)
    assert too_late(deadline, deadline - timedelta(seconds=DEADLINE_MARGIN_S))
    assert claimed_in_time(0.0, BOUNDARY_CLAIM_MAX_S, deadline, T0)
    assert not claimed_in_time(0.0, BOUNDARY_CLAIM_MAX_S + 0.1, deadline, T0)
    assert not claimed_in_time(0.0, 0.0, deadline, deadline)


async def test_the_attempt_is_open_until_it_ends() -> None:
    h = authorized()
    assert attempt_open(await recorded(h), ATTEMPT)
    assert not attempt_open(await recorded(h), "att-2")
    h.add(EffectIntent.Withdrawn, by="runtime", why="")
    assert not attempt_open(await recorded(h), ATTEMPT)
    assert not attempt_open((), ATTEMPT)


def test_a_refusal_claims_the_boundary_as_withdrawn_or_refused() -> None:
    assert not_sent_stage("order.withdrawn") is ReportStage.WITHDRAWN
    assert not_sent_stage("order.mismatch") is ReportStage.REFUSED_ORDER
    assert not_sent_stage("order.expired") is ReportStage.REFUSED_ORDER


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
