"""The front door's pure parts: tool names, argument text, call ids, result shapes, settings, the token."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from starlette.datastructures import Headers

from lockgate.client.mcp.http import authorized, token_at
from lockgate.client.mcp.names import ToolNames, is_mcp_tool_name
from lockgate.client.mcp.results import (
    FRONT_CODES,
    STATUS_TOOL,
    arguments_text,
    call_id_for,
    error_result,
    tool_result,
)
from lockgate.client.mcp.settings import FrontSettings
from lockgate.contracts.responses import ModelResponse
from lockgate.core.ids import is_subject_token

# --- names ------------------------------------------------------------------------


def test_capability_names_are_offered_as_they_are() -> None:
    names = ToolNames.of(["case.add_note", "repo.read_file"], reserved=[STATUS_TOOL])
    assert names.to_mcp == {"case.add_note": "case.add_note", "repo.read_file": "repo.read_file"}
    assert names.capability("case.add_note") == "case.add_note"


def test_a_name_outside_the_mcp_rule_is_spelled_into_it_and_maps_back_through_the_turn() -> None:
    names = ToolNames.of(["case add/note", "case_add_note"])
    spelled = names.to_mcp["case add/note"]
    assert is_mcp_tool_name(spelled)
    assert spelled != "case_add_note"  # told apart from the capability it would resemble
    assert names.capability(spelled) == "case add/note"
    assert names.capability("case_add_note") == "case_add_note"


def test_a_capability_cannot_take_the_front_doors_own_name() -> None:
    names = ToolNames.of([STATUS_TOOL], reserved=[STATUS_TOOL])
    assert names.to_mcp[STATUS_TOOL] != STATUS_TOOL
    assert names.capability(names.to_mcp[STATUS_TOOL]) == STATUS_TOOL


def test_a_name_the_turn_did_not_list_goes_to_lockgate_as_sent() -> None:
    names = ToolNames.of(["case.add_note"])
    assert names.capability("case.delete_everything") == "case.delete_everything"


@settings(max_examples=200, derandomize=True)
@given(st.lists(st.text(min_size=1, max_size=200), max_size=12, unique=True))
def test_every_catalogue_gets_distinct_valid_names_that_map_back(capabilities: list[str]) -> None:
    names = ToolNames.of(capabilities, reserved=[STATUS_TOOL])
    mcp_names = [names.to_mcp[c] for c in capabilities]
    assert len(set(mcp_names)) == len(capabilities)
    assert STATUS_TOOL not in mcp_names
    for capability, name in zip(capabilities, mcp_names, strict=True):
        assert is_mcp_tool_name(name)
        assert names.capability(name) == capability


# --- arguments and call ids ---------------------------------------------------------


def test_arguments_are_the_same_text_whatever_the_key_order() -> None:
    assert arguments_text({"b": 1, "a": "é"}) == arguments_text({"a": "é", "b": 1}) == '{"a":"é","b":1}'
    assert arguments_text(None) == "{}"


def test_call_ids_follow_the_request_id_and_are_subject_tokens() -> None:
    assert call_id_for(7) == call_id_for(7)
    assert call_id_for(7) != call_id_for("7")
    assert call_id_for("note-1") != call_id_for("note-2")
    assert is_subject_token(call_id_for("x" * 500))


# --- results ------------------------------------------------------------------------


def _response(status: str, code: str, **fields: object) -> ModelResponse:
    return ModelResponse(candidate_id="c" * 32, call_id="mcp-1", status=status, code=code,
                         candidate_digest="sha256:" + "0" * 64, **fields)  # type: ignore[arg-type]


def test_an_executed_call_is_its_result_labelled_untrusted() -> None:
    result = tool_result(_response("executed", "operation.executed", result={"note_id": "n-1"}))
    assert result.is_error is False
    assert result.structured_content == {
        "status": "executed", "code": "operation.executed",
        "result": {"untrusted_data": {"note_id": "n-1"}}, "result_label": "untrusted-data"}
    text = result.content[0]
    assert text.type == "text" and json.loads(text.text) == result.structured_content


def test_a_waiting_call_is_no_error_and_says_how_to_ask_for_its_outcome() -> None:
    for status, code in (("pending_approval", "approval.pending"), ("paused", "policy.paused")):
        result = tool_result(_response(status, code))
        assert result.is_error is False
        assert result.structured_content is not None
        assert result.structured_content["candidate_id"] == "c" * 32
        note = result.content[0]
        assert note.type == "text" and STATUS_TOOL in note.text and "c" * 32 in note.text


@pytest.mark.parametrize("status, code", [
    ("rejected", "proposal.invalid"), ("denied", "rate.limited"), ("unavailable", "operation.unavailable"),
    ("outcome_unknown", "operation.outcome-unknown"), ("withdrawn", "proposal.withdrawn"),
])
def test_every_other_status_is_an_error_with_status_and_code_only(status: str, code: str) -> None:
    result = tool_result(_response(status, code, field="note", retry_after_s=1.5))
    assert result.is_error is True
    assert result.structured_content == {"status": status, "code": code, "field": "note", "retry_after_s": 1.5}


def test_lockgates_own_errors_are_error_results() -> None:
    result = error_result("lockgate.unavailable", "Lockgate did not answer.")
    assert result.is_error is True
    assert result.structured_content == {"status": "error", "code": "lockgate.unavailable",
                                         "message": "Lockgate did not answer."}


def test_the_front_doors_own_codes() -> None:
    assert FRONT_CODES == ("status.unknown-candidate", "status.malformed")


# --- settings -----------------------------------------------------------------------


def test_settings_read_a_file_below_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "front.yaml"
    config.write_text("tenant: tenant-a\nactor: user-1\ncontext: {case_id: case-123}\nroles: [clerk]\n")
    monkeypatch.setenv("LOCKGATE_FRONT_ACTOR", "user-42")
    chosen = FrontSettings(config_file=config, var_dir=tmp_path)
    assert (chosen.tenant, chosen.actor, chosen.context, chosen.roles) == (
        "tenant-a", "user-42", {"case_id": "case-123"}, ("clerk",))
    assert chosen.agent_credentials() == tmp_path / "credentials" / "agent-tenant-a.json"
    assert chosen.host_credentials() == tmp_path / "credentials" / "host.json"
    assert chosen.token_path() == tmp_path / "secrets" / "mcp-front.token"


def test_settings_read_json_from_the_file_the_environment_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = tmp_path / "front.json"
    config.write_text(json.dumps({"tenant": "tenant-b", "actor": "a", "data_classes": ["case_note"]}))
    monkeypatch.setenv("LOCKGATE_FRONT_CONFIG_FILE", str(config))
    assert FrontSettings().data_classes == ("case_note",)


def test_the_run_must_be_configured_and_http_binds_loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOCKGATE_FRONT_TENANT", raising=False)
    monkeypatch.delenv("LOCKGATE_FRONT_CONFIG_FILE", raising=False)
    with pytest.raises(ValidationError):
        FrontSettings(actor="a")
    with pytest.raises(ValidationError):
        FrontSettings(tenant="t", actor="a", http_host="0.0.0.0")
    assert FrontSettings(tenant="t", actor="a", http_host="::1").http_host == "::1"


# --- the bearer token ---------------------------------------------------------------


def test_the_token_is_made_once_private_and_then_read(tmp_path: Path) -> None:
    path = tmp_path / "secrets" / "mcp-front.token"
    token = token_at(path)
    assert token_at(path) == token and len(token) >= 32
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700


def test_only_the_right_bearer_token_is_authorized() -> None:
    token = "t" * 43
    assert authorized(Headers({"authorization": f"Bearer {token}"}), token)
    assert authorized(Headers({"authorization": f"bearer {token}"}), token)
    assert not authorized(Headers({}), token)
    assert not authorized(Headers({"authorization": f"Basic {token}"}), token)
    assert not authorized(Headers({"authorization": "Bearer " + "u" * 43}), token)
    assert not authorized(Headers({"authorization": "Bearer "}), token)
