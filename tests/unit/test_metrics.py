"""What each process counts, under which labels: bounded sets only, never an id or free text."""

from __future__ import annotations

import logging
from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from lockgate.contracts.reasons import REASON_CLASSES, REASONS, reason_class
from lockgate.contracts.vocabulary import AttemptStage, DecisionOutcome
from lockgate.intent.events import AttemptSent, ExecutionAuthorized
from lockgate.runtime import metrics
from lockgate.runtime.service import Retry, settle
from lockgate.testing.intents import History

LOG = logging.getLogger("test")


class FakeMessage:
    """A delivered message that settles into nothing."""

    raw_message = SimpleNamespace(
        subject="lg.evt.tenant-a.x.1.Forged",
        metadata=SimpleNamespace(num_delivered=1, sequence=SimpleNamespace(stream=7)),
    )

    async def ack(self) -> None:
        return None

    async def nack(self, delay: float | None = None) -> None:
        return None

    async def reject(self) -> None:
        return None


def value(name: str, **labels: str) -> float:
    """A sample's value now (0 when it was never observed)."""
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_reason_classes_are_the_first_word_of_known_codes() -> None:
    assert reason_class("case.closed") == "case"
    assert reason_class("argument.note.too-long") == "argument"
    assert reason_class("budget.daily.exhausted") == "budget"
    assert reason_class(None) == "none" and reason_class("") == "none"
    assert {reason_class(code) for code in REASONS} <= REASON_CLASSES


@given(st.text(max_size=80))
def test_any_reason_has_a_class_from_the_bounded_set(reason: str) -> None:
    assert reason_class(reason) in REASON_CLASSES


@given(st.text(min_size=1, max_size=40))
def test_a_code_nobody_declared_is_other(word: str) -> None:
    if word.split(".", 1)[0] not in REASON_CLASSES:
        assert reason_class(f"{word}.x") == "other"


def test_every_lockgate_metric_has_only_bounded_labels() -> None:
    families = {
        collector._name: tuple(collector._labelnames)  # type: ignore[attr-defined]
        for collector in list(REGISTRY._collector_to_names)  # the client keeps no public list
        if getattr(collector, "_name", "").startswith("lockgate_")
    }
    # A counter's collector is named without its ``_total``.
    assert {"lockgate_handler_seconds", "lockgate_candidates", "lockgate_policy_decisions",
            "lockgate_attempt_transitions", "lockgate_adapter_executions"} <= set(families)
    for name, labels in families.items():
        assert set(labels) <= metrics.LABELS, (name, labels)
    for name, labels in metrics.FROM_VIEWS.items():
        assert set(labels) <= metrics.LABELS, name


def test_appended_events_are_counted_by_what_they_say() -> None:
    history = History(call_id="metrics-1").normalized().decided(
        DecisionOutcome.DENY, reasons=["case.closed"])
    decided = history.events[-1]
    denied = value("lockgate_policy_decisions_total", outcome="deny", reason_class="case")
    received = value("lockgate_candidates_recorded_total", result="received", reason_class="none")
    typed = value("lockgate_events_appended_total", event="PolicyDecided")

    metrics.appended([history.events[0], decided])

    assert value("lockgate_policy_decisions_total", outcome="deny", reason_class="case") == denied + 1
    assert value("lockgate_candidates_recorded_total", result="received",
                 reason_class="none") == received + 1
    assert value("lockgate_events_appended_total", event="PolicyDecided") == typed + 1


def test_attempt_events_count_as_the_stage_they_reach() -> None:
    history = History(call_id="metrics-2").normalized().decided()
    authorized = ExecutionAuthorized.next(
        history.intent, history.stamp(), attempt_id="a-1", intent_key="k", digest="sha256:d1",
        policy_revision="pol-1", contract_revision="rev-1", gate_facts={},
        deadline_at=history.stamp().now,
    )
    sent = AttemptSent.next(history.extend([authorized]).intent, history.stamp(),
                                         attempt_id="a-1")
    before = {stage: value("lockgate_attempt_transitions_total", stage=stage)
              for stage in ("authorized", "sent")}
    metrics.appended([authorized, sent])
    assert value("lockgate_attempt_transitions_total", stage="authorized") == before["authorized"] + 1
    assert value("lockgate_attempt_transitions_total", stage="sent") == before["sent"] + 1
    # Every attempt stage an event can reach is a stage of the vocabulary.
    assert {stage.value for stage in metrics.STAGE_OF.values()} <= {s.value for s in AttemptStage}


def test_an_answer_to_the_model_is_counted_by_status_and_reason_class() -> None:
    executed = value("lockgate_candidates_total", outcome="executed", reason_class="none")
    rejected = value("lockgate_candidates_total", outcome="rejected", reason_class="tool")
    metrics.answered("executed", "adapter.error")  # a retried failure is not why it ended
    metrics.answered("rejected", "tool.arguments.duplicate")
    metrics.answered("made-up", "tenant-a.secret")
    assert value("lockgate_candidates_total", outcome="executed", reason_class="none") == executed + 1
    assert value("lockgate_candidates_total", outcome="rejected", reason_class="tool") == rejected + 1
    assert value("lockgate_candidates_total", outcome="other", reason_class="other") >= 1


async def test_a_settled_delivery_is_timed_and_counted_by_settlement() -> None:
    meter = metrics.Reaction("unit", "settles")
    # Every outcome exists from the start, at zero: a rate over it is defined at once.
    for outcome, verb in metrics.SETTLEMENT_OF.items():
        assert REGISTRY.get_sample_value("lockgate_deliveries_total", {
            "service": "unit", "reaction": "settles", "settlement": verb, "outcome": outcome}) == 0.0

    async def done() -> None:
        return None

    async def later() -> None:
        raise Retry(3.0)

    assert await settle(FakeMessage(), done(), LOG, meter=meter) == "ack"  # type: ignore[arg-type]
    assert await settle(FakeMessage(), later(), LOG, meter=meter) == "timer"  # type: ignore[arg-type]
    labels = {"service": "unit", "reaction": "settles"}
    assert value("lockgate_deliveries_total", settlement="ack", outcome="ack", **labels) == 1
    assert value("lockgate_deliveries_total", settlement="nak", outcome="timer", **labels) == 1
    assert value("lockgate_handler_seconds_count", **labels) == 2


def test_a_reply_is_counted_answered_or_unavailable() -> None:
    meter = metrics.Reaction("unit", "replies")
    meter.replied(failed=False, seconds=0.001)
    meter.replied(failed=True, seconds=0.002)
    labels = {"service": "unit", "reaction": "replies"}
    assert value("lockgate_requests_total", result="answered", **labels) == 1
    assert value("lockgate_requests_total", result="unavailable", **labels) == 1
    assert value("lockgate_handler_seconds_count", **labels) == 2


def test_exposed_names_include_metrics_not_observed_yet() -> None:
    names = metrics.exposed_names()
    assert {"lockgate_child_restarts_total", "lockgate_handler_seconds_bucket",
            "lockgate_handler_seconds_count", "lockgate_child_up",
            "process_cpu_seconds_total"} <= names
    assert "lockgate_child_restarts" not in names
