"""The shadow decisions view, derived from the record (pure): one row per decision a shadow
bundle made beside the active one, the flip named, the policies that flipped it."""

from __future__ import annotations

from lockgate.contracts.vocabulary import DecisionOutcome
from lockgate.intent.events import PolicyDecided, ShadowDecision
from lockgate.testing.intents import History
from lockgate.views.projection import IntentViews
from lockgate.views.rows import ShadowRow, flip_of, shadow_row


def decided(h: History, outcome: str, determining: list[str], shadow: ShadowDecision | None,
            reasons: list[str] | None = None) -> History:
    return h.extend([PolicyDecided.next(
        h.intent, h.stamp(), outcome=DecisionOutcome(outcome), policy_revision="sha256:active",
        reasons=reasons or [], determining=determining, facts={"status": "open"},
        digest=h.intent.digest or "", reservations=[], shadow=shadow)])


def shadow(outcome: str, determining: list[str], reasons: list[str] | None = None) -> ShadowDecision:
    return ShadowDecision(revision="sha256:shadow", outcome=DecisionOutcome(outcome),
                          reasons=reasons or [], determining=determining)


def change_of(h: History) -> tuple[ShadowRow | None, bool]:
    change = IntentViews.change(h.events[-1], h.intent, h.events[0].timestamp, 7)
    return change.shadow, change.decided


def row_of(h: History) -> ShadowRow | None:
    last = h.events[-1]
    assert isinstance(last, PolicyDecided)
    return shadow_row(last, h.intent)


def test_a_decision_with_a_shadow_is_one_row_with_both_sides() -> None:
    h = decided(History().normalized(), "allow", ["case-notes.permit"],
                shadow("deny", ["case-notes.no-weekend", "case-notes.permit"], ["case-notes.no-weekend"]))
    row, was_decided = change_of(h)
    assert was_decided
    assert row == row_of(h)
    assert row is not None
    assert (row.intent_id, row.tenant, row.run_id, row.tool) == (
        h.intent_id, "tenant-a", "run-1", "case.add_note")
    assert (row.active_revision, row.active_outcome, row.active_determining) == (
        "sha256:active", "allow", ("case-notes.permit",))
    assert (row.shadow_revision, row.shadow_outcome, row.shadow_reasons,
            row.shadow_determining) == ("sha256:shadow", "deny", ("case-notes.no-weekend",),
                                        ("case-notes.no-weekend", "case-notes.permit"))
    # The flip to deny names the forbid that denied, not the permit both share.
    assert (row.flip, row.policy) == ("allow->deny", "case-notes.no-weekend")


def test_a_decision_without_a_shadow_has_no_row_and_takes_an_earlier_one_away() -> None:
    h = decided(History().normalized(), "allow", ["case-notes.permit"], None)
    assert change_of(h) == (None, True)


def test_events_that_are_no_decision_leave_the_view_alone() -> None:
    h = History().normalized()
    assert change_of(h) == (None, False)


def test_agreeing_outcomes_are_no_flip() -> None:
    h = decided(History().normalized(), "require_approval", ["a"], shadow("require_approval", ["b"]))
    row = row_of(h)
    assert row is not None and (row.flip, row.policy) == ("", "b")


def test_a_paused_intent_decided_again_is_its_latest_decision() -> None:
    h = decided(History().normalized(), "pause", [], shadow("pause", []), ["facts.unavailable"])
    paused = row_of(h)
    decided(h, "allow", ["p"], shadow("require_approval", ["p", "review"]))
    again = row_of(h)
    assert paused is not None and again is not None
    assert paused.intent_id == again.intent_id and paused.flip == ""
    assert (again.flip, again.policy, again.decided_at > paused.decided_at) == (
        "allow->require_approval", "review", True)


def test_flips_are_named_active_then_shadow() -> None:
    assert flip_of("allow", "deny") == "allow->deny"
    assert flip_of("deny", "allow") == "deny->allow"
    assert flip_of("allow", "require_approval") == "allow->require_approval"
    assert flip_of("deny", "deny") == ""
