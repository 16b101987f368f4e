"""Resource locks are released from the record: which events can end a hold."""

from __future__ import annotations

import itertools
import typing
from datetime import datetime, timedelta
from typing import Any

import pytest

from lockgate.approval.domain import ReviewProblem, decide_review, expire, request_review
from lockgate.authz import Decision
from lockgate.contracts.messages import DecideReview, NormalizeResult
from lockgate.contracts.vocabulary import DecisionOutcome, Finding, Resolution
from lockgate.eventstore.subjects import legacy_type_filter, type_filter
from lockgate.executor.domain import withdraw
from lockgate.intent.aggregate import Created, Stamp
from lockgate.intent.codec import EVENT_TYPES, fold
from lockgate.intent.events import (
    AttemptSent,
    CandidateNormalized,
    Event,
    ExecutionAuthorized,
    OutcomeUnknown,
    ReviewApproved,
    ReviewRequested,
    WithdrawalRequested,
)
from lockgate.intent.locks import HOLDING, lock_key, may_hold
from lockgate.normalization.domain import decide as normalize
from lockgate.policy.domain import record
from lockgate.runtime.spec import GIVING_UP
from lockgate.runtime.specs import (
    ENDS_HOLD,
    ENDS_HOLD_BY_TRIGGER,
    ENDS_HOLD_ELSEWHERE,
    EXECUTOR,
    SERVICES,
)
from lockgate.runtime.topology import durable
from lockgate.testing.intents import T0, History

ENVELOPE = {"originator_id", "originator_version", "timestamp", "event_id", "correlation_id",
            "causation_id", "originator_topic"}
#: Values of the fields whose value decides what an event does.
CHOICES: dict[str, tuple[str, ...]] = {
    "outcome": tuple(DecisionOutcome),
    "resolution": tuple(Resolution),
    "finding": tuple(Finding),
}
#: Events only appended before an intent can hold anything: their deciders require a
#: state before the gate (the test below holds them to it), so the lock durable need not
#: consume them, although the aggregate alone would let them move a holding intent.
BEFORE_ANY_HOLD = {"CandidateNormalized", "NormalizationFailed", "PolicyDecided",
                   "ReviewRequested", "ReviewDenied", "ReviewExpired"}


def holding() -> dict[str, History]:
    """One history for every way an intent can hold its resource."""
    def authorized() -> History:
        return History().normalized().decided("allow").add(
            ExecutionAuthorized, attempt_id="a1", intent_key="k1", digest="sha256:d1",
            policy_revision="p", contract_revision="rev-1", gate_facts={},
            deadline_at=T0 + timedelta(seconds=30))

    reviewed = History().normalized().decided("require_approval").add(
        ReviewRequested, review_id="r1", digest="sha256:d1", policy_revision="p",
        contract_revision="rev-1", summary="s", expires_at=T0 + timedelta(days=7)).add(
        ReviewApproved, review_id="r1", reviewer="rev", digest="sha256:d1",
        policy_revision="p", contract_revision="rev-1")
    histories = {
        "allowed": History().normalized().decided("allow"),
        "approved": reviewed,
        "authorized": authorized(),
        "withdrawal-requested": authorized().add(
            WithdrawalRequested, attempt_id="a1", by="r", why=""),
        "sent": authorized().add(AttemptSent, attempt_id="a1"),
        "unknown": authorized().add(OutcomeUnknown, attempt_id="a1", evidence="e"),
    }
    assert {h.intent.state for h in histories.values()} == HOLDING
    return histories


def samples(cls: type[Event]) -> list[dict[str, Any]]:
    """Field values for ``cls``: every combination of the deciding fields' values."""
    hints = typing.get_type_hints(cls)
    fixed: dict[str, Any] = {}
    varying: dict[str, tuple[str, ...]] = {}
    for name, hint in hints.items():
        if name in ENVELOPE or typing.get_origin(hint) is typing.ClassVar or hint is typing.ClassVar:
            continue
        if name in CHOICES:
            varying[name] = CHOICES[name]
        elif hint is datetime:
            fixed[name] = T0
        elif typing.get_origin(hint) is dict:
            fixed[name] = {}
        elif typing.get_origin(hint) is list:
            fixed[name] = []
        else:
            fixed[name] = "a1"  # strings (the attempt id among them)
    combos = itertools.product(*varying.values())
    return [{**fixed, **dict(zip(varying, combo, strict=True))} for combo in combos]


def test_every_event_that_can_end_a_hold_is_consumed_by_the_lock_durable() -> None:
    ends: set[str] = set()
    for name, cls in EVENT_TYPES.items():
        if issubclass(cls, Created):
            continue
        for h in holding().values():
            for fields in samples(cls):
                event = cls.next(h.intent, Stamp(now=T0, event_id="e", causation_id="c"), **fields)
                try:
                    after = fold([*h.events, event])
                except KeyError:
                    continue  # names an attempt this history does not have
                if after is not None and not may_hold(after):
                    ends.add(name)
    assert ends - BEFORE_ANY_HOLD == {e.__name__ for e in ENDS_HOLD}
    assert set(ENDS_HOLD_BY_TRIGGER) | set(ENDS_HOLD_ELSEWHERE) == set(ENDS_HOLD)
    assert set(durable("executor-locks").filters) == {
        f(e.__name__) for e in ENDS_HOLD_ELSEWHERE for f in (type_filter, legacy_type_filter)}


def test_the_events_the_lock_durable_is_not_handed_are_appended_by_the_executors_triggers_only(
) -> None:
    """``ENDS_HOLD_BY_TRIGGER`` are freed by the handler of a trigger handed again after a
    crash, so no other service may append them, nor the executor's withdrawal (a request,
    which nobody hands again)."""
    by_trigger = set(ENDS_HOLD_BY_TRIGGER)
    for spec in SERVICES:
        appended = set(spec.appends) | set(GIVING_UP)
        assert not (appended & by_trigger) or spec is EXECUTOR, spec.name
    assert not by_trigger & set(GIVING_UP)
    for name, h in holding().items():
        for by in ("runtime", "operator"):
            decided = withdraw(h.intent, by=by, why="", cause="c", now=T0)
            assert not {type(e) for e in decided} & by_trigger, name


def test_the_lock_key_is_a_valid_bucket_key_per_tenant_and_resource() -> None:
    h = History().normalized()
    assert lock_key(h.intent) == "tenant-a.case.case-123"
    odd = History(tenant="tenant-b").add(
        CandidateNormalized, arguments={}, resource={"type": "file", "id": "a b/ü"},
        destination="d", effect_class="write", digest="sha256:d", serializer="jcs",
        contract_revision="rev-1")
    assert lock_key(odd.intent) == "tenant-b.file.a_b/_"


@pytest.mark.parametrize("name", sorted(holding()))
def test_the_events_appended_only_before_a_hold_are_never_decided_while_one_is_held(
    name: str,
) -> None:
    intent = holding()[name].intent
    ids: dict[str, Any] = dict(cause="c", now=T0 + timedelta(days=1))
    assert normalize(intent, None, NormalizeResult(reason="x"), **ids) == []
    for outcome in CHOICES["outcome"]:
        assert record(intent, Decision(outcome, "p", ("r",), ()), None, **ids) == []
    assert request_review(intent, ttl_s=60, **ids) == []
    assert expire(intent, intent.review_id or "r1", **ids) == []
    for approve in (True, False):
        with pytest.raises(ReviewProblem) as refused:
            decide_review(intent, DecideReview(review_id=intent.review_id or "r1", digest="sha256:d1",
                                               approve=approve),
                          reviewer="rev", permission=None, **ids)
        assert refused.value.code == ("review.closed" if intent.review_id else "review.unknown")
