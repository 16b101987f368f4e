"""The fixture servers' state and the suite's vocabulary, without a process: codes and faults."""

from __future__ import annotations

from pathlib import Path

import pytest

from lockgate.mcpcheck import CLAIMS, OUTCOMES, Property, Verdict
from lockgate.worlds.mcpservers import FAULTS, REASONS, State, UnknownFault, arm, armed, disarm
from lockgate.worlds.mcpservers.server import KINDS, active, visible_tools


def test_reason_codes_are_stable() -> None:
    assert REASONS == ("mcpfixture.error", "mcpfixture.key-conflict", "mcpfixture.unknown-fault")


def test_the_report_vocabulary_is_stable() -> None:
    assert [str(v) for v in Verdict] == ["documented", "observed", "unknown", "violated"]
    assert set(CLAIMS) == set(Property)
    assert len(OUTCOMES) == len(set(OUTCOMES))


def test_arm_and_disarm_round_trip(tmp_path: Path) -> None:
    State(tmp_path).open("q")
    for fault in FAULTS:
        arm(tmp_path, fault)
    assert set(armed(tmp_path)) == set(FAULTS)
    assert armed(tmp_path)["drop_response"]["times"] == 1
    disarm(tmp_path, "drop_response")
    assert "drop_response" not in armed(tmp_path)
    disarm(tmp_path)
    assert armed(tmp_path) == {}
    with pytest.raises(UnknownFault):
        arm(tmp_path, "nope")


def test_a_listing_fault_holds_only_after_its_listings(tmp_path: Path) -> None:
    State(tmp_path).open("p")
    arm(tmp_path, "remove_tool", tool="list_items", after_lists=1)
    faults = armed(tmp_path)
    names = lambda lists: {t.name for t in visible_tools(KINDS["p"], active(faults, lists))}  # noqa: E731
    assert "list_items" in names(0)
    assert "list_items" not in names(1)


def test_p_refuses_a_changed_body_and_records_the_refusal(tmp_path: Path) -> None:
    state = State(tmp_path).open("p")
    args = dict(key="k", title="t", body="b", visibility="private", notify=False, faults={},
                arguments={"client_key": "k"})
    first, _ = state.create_draft(**args)  # type: ignore[arg-type]
    again, _ = state.create_draft(**args)  # type: ignore[arg-type]
    assert first["item_id"] == again["item_id"] and again["created"] is False
    with pytest.raises(Exception, match="already names draft"):
        state.create_draft(**{**args, "body": "other"})  # type: ignore[arg-type]
    assert [c["outcome"] for c in state.ledger()] == ["created", "replayed", "refused.key-conflict"]
