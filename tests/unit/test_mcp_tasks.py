"""The front door's task ids, task states and stateless call ids, without a broker."""

from __future__ import annotations

import mcp_types as types
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lockgate.client.mcp import results, tasks
from lockgate.client.mcp.settings import FrontSettings
from lockgate.client.mcp.tasks import TaskIds
from lockgate.contracts.responses import STATUSES, ModelResponse

RUN = "a" * 32
CANDIDATE = "b" * 32


def front(**changes: object) -> FrontSettings:
    return FrontSettings(**{"tenant": "tenant-a", "actor": "user-42", "context": {"case_id": "case-123"},
                            **changes})


def response(status: str, code: str = "some.code") -> ModelResponse:
    return ModelResponse(candidate_id=CANDIDATE, call_id="c", status=status, code=code)


def test_a_task_id_reads_back_to_its_run_and_candidate() -> None:
    ids = TaskIds.for_binding(front(), "t" * 43)
    task_id = ids.mint(RUN, CANDIDATE)
    ref = ids.read(task_id)
    assert ref is not None
    assert (ref.run_id, ref.candidate_id) == (RUN, CANDIDATE)
    assert ids.mint(RUN, CANDIDATE) == task_id  # a retried call names its first task


def test_the_same_binding_in_another_process_reads_the_id() -> None:
    task_id = TaskIds.for_binding(front(), "t" * 43).mint(RUN, CANDIDATE)
    assert TaskIds.for_binding(front(), "t" * 43).read(task_id) is not None


@pytest.mark.parametrize("other", [
    {"secret": "u" * 43},
    {"tenant": "tenant-b"},
    {"actor": "user-7"},
    {"context": {"case_id": "case-456"}},
    {"secret": None},  # stdio: a key of the process's own
])
def test_another_binding_does_not_read_the_id(other: dict[str, object]) -> None:
    task_id = TaskIds.for_binding(front(), "t" * 43).mint(RUN, CANDIDATE)
    secret = other.pop("secret", "t" * 43)
    assert secret is None or isinstance(secret, str)
    assert TaskIds.for_binding(front(**other), secret).read(task_id) is None


@given(st.text(max_size=300))
@settings(max_examples=200, deadline=None)
def test_no_forged_or_malformed_id_reads(forged: str) -> None:
    ids = TaskIds.for_binding(front(), "t" * 43)
    assert ids.read(forged) is None


def test_an_altered_id_does_not_read() -> None:
    ids = TaskIds.for_binding(front(), "t" * 43)
    run_id, candidate_id, created, tag = ids.mint(RUN, CANDIDATE).split(".")
    for altered in (f"{run_id}.{'c' * 32}.{created}.{tag}", f"{'d' * 32}.{candidate_id}.{created}.{tag}",
                    f"{run_id}.{candidate_id}.{int(created) + 1}.{tag}", f"{run_id}.{candidate_id}.{created}.{'0' * 32}"):
        assert ids.read(altered) is None
    assert ids.read(42) is None


def test_every_status_maps_to_a_task_state() -> None:
    expected = {"executed": "completed", "withdrawn": "cancelled", "pending_approval": "working",
                "paused": "working", "withdrawal_requested": "working", "interruption_requested": "working",
                "outcome_unknown": "working", "replaced": "working", "rejected": "completed",
                "denied": "completed", "unavailable": "completed"}
    assert set(expected) == set(STATUSES)
    assert {status: tasks.status_of(response(status)) for status in STATUSES} == expected


def test_a_completed_task_carries_the_synchronous_result() -> None:
    ids = TaskIds.for_binding(front(), "t" * 43)
    task_id = ids.mint(RUN, CANDIDATE)
    ref = ids.read(task_id)
    assert ref is not None
    denied = response("denied", "policy.denied")
    done = tasks.snapshot(task_id, ref, denied, updated_ms=ref.created_ms + 5)
    assert done["status"] == "completed"
    expected = results.tool_result(denied).model_dump(by_alias=True, mode="json", exclude_none=True)
    assert done["result"] == {"resultType": "complete", **expected}
    assert done["result"]["isError"] is True
    waiting = tasks.created(task_id, ref, response("pending_approval", "approval.pending"))
    assert (waiting["resultType"], waiting["status"], waiting["ttlMs"]) == ("task", "working", None)
    assert "result" not in waiting and waiting["createdAt"] == waiting["lastUpdatedAt"]


@pytest.mark.parametrize(("meta", "supported"), [
    ({types.CLIENT_CAPABILITIES_META_KEY: {"extensions": {tasks.EXTENSION: {}}}}, True),
    ({types.CLIENT_CAPABILITIES_META_KEY: {"extensions": {tasks.EXTENSION: None}}}, False),
    ({types.CLIENT_CAPABILITIES_META_KEY: {"extensions": {}}}, False),
    ({types.CLIENT_CAPABILITIES_META_KEY: {"extensions": "x"}}, False),
    ({types.CLIENT_CAPABILITIES_META_KEY: "x"}, False),
    ({}, False),
    (None, False),
])
def test_tasks_are_for_clients_that_declare_the_extension(meta: dict[str, object] | None, supported: bool) -> None:
    assert tasks.client_supports_tasks(meta) is supported


def test_a_stateless_call_id_is_its_request_id_tool_and_arguments() -> None:
    args = results.arguments_text({"note": "x"})
    first = results.stateless_call_id_for(1, "case.add_note", args)
    assert results.stateless_call_id_for(1, "case.add_note", args) == first  # a retry
    assert results.stateless_call_id_for("1", "case.add_note", args) != first
    assert results.stateless_call_id_for(2, "case.add_note", args) != first
    assert results.stateless_call_id_for(1, "case.add_note", results.arguments_text({"note": "y"})) != first
    assert results.stateless_call_id_for(1, "case.other", args) != first
    assert results.stateless_call_id_for(1, "case.add_note", args) != results.call_id_for(1)


def test_a_handshake_task_is_that_eras_shape_without_a_result() -> None:
    ids = TaskIds.for_binding(front(), "t" * 43)
    task_id = ids.mint(RUN, CANDIDATE)
    ref = ids.read(task_id)
    assert ref is not None
    task = tasks.handshake_task(task_id, ref, response("executed", "operation.executed"), updated_ms=0)
    assert types.Task.model_validate(task, by_name=False).status == "completed"
    assert set(task) == {"taskId", "status", "statusMessage", "createdAt", "lastUpdatedAt", "ttl", "pollInterval"}
    assert task["lastUpdatedAt"] == task["createdAt"]  # never before it was created
