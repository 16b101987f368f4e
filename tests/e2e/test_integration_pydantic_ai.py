"""Pydantic AI agents behind Lockgate, against the real system, with Pydantic AI's own FunctionModel.

Each scenario reads the case-notes world's ledger (one row per write, with its intent id)
and what the model was fed back (the ``ToolReturnPart`` the framework put in its next
request): an executed call is one write, a refusal is the model's to read, a review is the
framework's pause, and a resume — in this process or a new one after the first was killed —
is the same call, never a second effect.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, ToolApproved
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from lockgate.client.sdk import Gateway
from lockgate.integrations import GovernedRun, Outcome
from lockgate.integrations.pydantic_ai import GovernedTools
from lockgate.intent.codec import decode_event
from lockgate.intent.events import CandidateReceived
from lockgate.operations.deployment import write_run_info
from lockgate.runtime.credentials import RunInfo
from lockgate.testing.system import System
from lockgate.worlds.casenotes.world import World

NOTE = "case.add_note"
TENANT = "tenant-a"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "frameworks" / "pydantic_ai.md"


class Scripted:
    """Pydantic AI's FunctionModel, scripted: one tool call, then a line of text.

    ``seen`` is every tool result the framework fed back to the model, in order.
    """

    def __init__(self, arguments: str | dict[str, Any], call_id: str) -> None:
        self.arguments = arguments
        self.call_id = call_id
        self.offered: list[dict[str, Any]] = []
        self.seen: list[ToolReturnPart] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        returned = [p for p in last.parts if isinstance(p, ToolReturnPart)] \
            if isinstance(last, ModelRequest) else []
        if returned:
            self.seen.extend(returned)
            return ModelResponse(parts=[TextPart("done")])
        self.offered = [{"name": t.name, "description": t.description,
                         "parameters": t.parameters_json_schema} for t in info.function_tools]
        return ModelResponse(parts=[ToolCallPart(NOTE, self.arguments, tool_call_id=self.call_id)])

    def last(self) -> tuple[dict[str, Any], str]:
        """The latest tool result the model read: its content as JSON, and its outcome."""
        part = self.seen[-1]
        assert isinstance(part.content, str)
        return json.loads(part.content), part.outcome


async def governed(gw: Gateway, case: str) -> GovernedRun:
    return await GovernedRun.open(tenant=TENANT, actor="user-42", context={"case_id": case},
                                  capabilities=[NOTE], gateway=gw)


def proposals(run: GovernedRun, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, str]]:
    """Every call the integration proposes through ``run``: (tool, argument text, call id)."""
    made: list[tuple[str, str, str]] = []
    propose = run.propose

    async def recorded(tool: str, arguments: str, *, call_id: str, **options: float) -> Outcome:
        made.append((tool, arguments, call_id))
        return await propose(tool, arguments, call_id=call_id, **options)

    monkeypatch.setattr(run, "propose", recorded)
    return made


def agent(run: GovernedRun, model: Scripted, **options: float) -> Agent[None, str | DeferredToolRequests]:
    return Agent(FunctionModel(model), output_type=[str, DeferredToolRequests],
                 capabilities=[GovernedTools(run, **options)])


def review(system: System, verb: str, candidate_id: str, *options: str) -> str:
    """``lockgate review <verb> <candidate> --as alice``, the way a reviewer types it; its output."""
    lockgate = Path(sys.executable).with_name("lockgate")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKGATE_")}
    env.update(LOCKGATE_VAR_DIR=str(system.root), LOCKGATE_NATS_URL=system.url)
    proc = subprocess.run([str(lockgate), "review", verb, candidate_id, "--tenant", TENANT,
                           "--as", "alice", *options], env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


async def decide(system: System, verb: str, candidate_id: str, *options: str) -> str:
    said = await asyncio.to_thread(review, system, verb, candidate_id, *options)
    done = {"approve": "approved", "deny": "denied"}.get(verb)
    assert done is None or said.startswith(f"{done} by alice"), said
    return said


async def received(system: System, candidate_id: str) -> CandidateReceived:
    nc = await system.connect()
    try:
        history = await system.store(nc).load(TENANT, candidate_id)
    finally:
        await nc.close()
    (event,) = [e for e in map(decode_event, history.events)
                if isinstance(e, CandidateReceived)]
    return event


def waiting(output: object) -> tuple[DeferredToolRequests, dict[str, Any]]:
    """The requests a paused run ended with (one governed call), and what it carries about its review."""
    assert isinstance(output, DeferredToolRequests), output
    (call,) = output.approvals
    return output, output.metadata[call.tool_call_id]


@pytest.fixture
def local(system: System) -> Iterator[dict[str, str]]:
    """What ``make run`` leaves for a process to find the system by, and that process's environment."""
    write_run_info(system.root, RunInfo(url=system.url, pid=os.getpid(),
                                        credentials_dir=str(system.root / "credentials")))
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKGATE_")}
    env["LOCKGATE_VAR_DIR"] = str(system.root)
    try:
        yield env
    finally:
        (system.root / "run.json").unlink()


async def test_an_executed_call_is_the_models_own_bytes_and_one_write(
    system: System, gw: Gateway, world: World,
) -> None:
    run = await governed(gw, "case-123")
    raw = '{ "note" :   "Called back\\u0021" }'  # spacing and escapes the model chose
    model = Scripted(raw, "call_pa_exec")
    before = len(world.ledger())
    result = await agent(run, model).run("Note that the customer called back.")
    assert result.output == "done"
    assert model.offered == [{"name": t.name, "description": t.description, "parameters": t.parameters}
                             for t in run.tools] and [t["name"] for t in model.offered] == [NOTE]
    content, outcome = model.last()
    assert outcome == "success" and content["status"] == "executed"
    assert "untrusted_data" in content["result"]
    candidate_id = model.seen[-1].metadata["candidate_id"]
    assert [w["intent_id"] for w in world.ledger()[before:]] == [candidate_id]
    got = await received(system, candidate_id)
    assert got.raw_arguments == raw and got.call_id == "call_pa_exec"


async def test_arguments_a_model_gave_parsed_are_proposed_as_deterministic_json(
    system: System, gw: Gateway, world: World,
) -> None:
    run = await governed(gw, "case-123")
    model = Scripted({"note": "Parsed, with a \u00e9."}, "call_pa_dict")
    result = await agent(run, model).run("Note it.")
    assert result.output == "done" and model.last()[0]["status"] == "executed"
    got = await received(system, model.seen[-1].metadata["candidate_id"])
    assert got.raw_arguments == '{"note":"Parsed, with a \u00e9."}'


async def test_a_rejected_call_is_a_denial_the_model_reads(gw: Gateway, world: World) -> None:
    run = await governed(gw, "case-123")
    model = Scripted('{"note": ""}', "call_pa_bad")
    before = len(world.ledger())
    result = await agent(run, model).run("Add an empty note.")
    assert result.output == "done"  # the run goes on: the model read the refusal
    content, outcome = model.last()
    assert outcome == "denied" and content["status"] == "rejected"
    assert content["code"] == "argument.note.empty"
    assert len(world.ledger()) == before


async def test_a_policy_denial_never_shows_the_internal_reason(gw: Gateway, world: World) -> None:
    run = await governed(gw, "case-closed")
    model = Scripted(json.dumps({"note": "Reopen it."}), "call_pa_denied")
    before = len(world.ledger())
    result = await agent(run, model).run("Reopen the case.")
    assert result.output == "done"
    content, outcome = model.last()
    assert outcome == "denied" and content["status"] == "unavailable"
    assert "case.closed" not in model.seen[-1].model_response_str()
    assert len(world.ledger()) == before


async def test_a_review_pauses_the_run_and_its_approval_resumes_it_once(
    system: System, gw: Gateway, world: World, monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = await governed(gw, "case-sensitive")
    made = proposals(run, monkeypatch)
    model = Scripted(json.dumps({"note": "Refund agreed."}), "call_pa_review")
    before = len(world.ledger())
    paused = await agent(run, model).run("Record the refund.")
    requests, meta = waiting(paused.output)
    assert requests.approvals[0].tool_call_id == "call_pa_review" and meta["status"] == "pending_approval"
    assert meta["run_id"] == run.run_id and model.seen == []  # nothing fed back yet
    history = paused.all_messages()

    # The host resumes before anyone decided: its "approve" authorizes nothing.
    early = await agent(run, model, resume_wait_s=0.5).run(
        message_history=history, deferred_tool_results=requests.build_results(approve_all=True))
    assert waiting(early.output)[1]["candidate_id"] == meta["candidate_id"]
    assert len(world.ledger()) == before

    await decide(system, "approve", meta["candidate_id"])
    resumed = await agent(run, model).run(
        message_history=history, deferred_tool_results=requests.build_results(approve_all=True))
    assert resumed.output == "done"
    content, outcome = model.last()
    assert outcome == "success" and content["status"] == "executed"
    assert model.seen[-1].metadata["candidate_id"] == meta["candidate_id"]

    # Resumed twice (a retried resume, a second worker): the same intent, its answer, no new write.
    again = await agent(run, model).run(
        message_history=history, deferred_tool_results=requests.build_results(approve_all=True))
    assert again.output == "done" and model.last()[0]["status"] == "executed"
    assert [w["intent_id"] for w in world.ledger()[before:]] == [meta["candidate_id"]]
    assert made == [(NOTE, json.dumps({"note": "Refund agreed."}), "call_pa_review")] * 4


async def test_a_denied_review_is_what_the_resumed_model_reads(
    system: System, gw: Gateway, world: World, monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = await governed(gw, "case-sensitive")
    made = proposals(run, monkeypatch)
    model = Scripted(json.dumps({"note": "Close everything."}), "call_pa_deny")
    before = len(world.ledger())
    paused = await agent(run, model).run("Close everything.")
    _, meta = waiting(paused.output)
    await decide(system, "deny", meta["candidate_id"])
    # The host says "approved"; Lockgate's reviewer said no, and that is what the model reads.
    resumed = await agent(run, model).run(
        message_history=paused.all_messages(),
        deferred_tool_results=DeferredToolResults(approvals={"call_pa_deny": True}))
    assert resumed.output == "done"
    content, outcome = model.last()
    assert outcome == "denied" and content["status"] == "unavailable"
    assert len(world.ledger()) == before
    assert made == [(NOTE, json.dumps({"note": "Close everything."}), "call_pa_deny")] * 2


async def test_the_hosts_deny_and_edit_do_not_decide(
    system: System, gw: Gateway, world: World,
) -> None:
    run = await governed(gw, "case-sensitive")
    model = Scripted(json.dumps({"note": "Escalated to legal."}), "call_pa_host")
    before = len(world.ledger())
    paused = await agent(run, model).run("Escalate.")
    _, meta = waiting(paused.output)
    history = paused.all_messages()
    # The host's "deny" does not refuse: the review is still open, the run pauses again.
    denied = await agent(run, model, resume_wait_s=0.5).run(
        message_history=history, deferred_tool_results=DeferredToolResults(approvals={"call_pa_host": False}))
    assert waiting(denied.output)[1]["candidate_id"] == meta["candidate_id"] and model.seen == []

    await decide(system, "approve", meta["candidate_id"])
    # The host "approves" other arguments: only the reviewed bytes run, once.
    edited = ToolApproved(override_args={"note": "Something else entirely."})
    resumed = await agent(run, model).run(
        message_history=history, deferred_tool_results=DeferredToolResults(approvals={"call_pa_host": edited}))
    assert resumed.output == "done" and model.last()[0]["status"] == "executed"
    assert [w["intent_id"] for w in world.ledger()[before:]] == [meta["candidate_id"]]
    assert (await received(system, meta["candidate_id"])).raw_arguments == json.dumps(
        {"note": "Escalated to legal."})


async def test_a_reviewers_edit_is_what_the_resumed_model_is_told(
    system: System, gw: Gateway, world: World, monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = await governed(gw, "case-sensitive")
    made = proposals(run, monkeypatch)
    asked = json.dumps({"note": "Customer Jane Doe, DOB 1970-01-01, escalated."})
    model = Scripted(asked, "call_pa_edit")
    before = len(world.ledger())
    paused = await agent(run, model).run("Escalate.")
    requests, meta = waiting(paused.output)
    edited = json.loads(await decide(system, "edit", meta["candidate_id"], "--arguments",
                                     json.dumps({"note": "Escalated."}), "--why", "no personal data",
                                     "--json"))["edited_into"]
    # The edit is judged again: resuming now pauses on the replacement's own review.
    again = await agent(run, model, resume_wait_s=0.5).run(
        message_history=paused.all_messages(), deferred_tool_results=requests.build_results(approve_all=True))
    _, still = waiting(again.output)
    assert still["status"] == "pending_approval" and still["replacement_candidate_id"] == edited
    await decide(system, "approve", edited)
    resumed = await agent(run, model).run(
        message_history=paused.all_messages(), deferred_tool_results=requests.build_results(approve_all=True))
    assert resumed.output == "done"
    content, outcome = model.last()
    assert outcome == "success" and content["status"] == "replaced"
    assert content["replacement"]["status"] == "executed"
    assert model.seen[-1].metadata == {"candidate_id": meta["candidate_id"], "status": "executed"}
    assert [w["intent_id"] for w in world.ledger()[before:]] == [edited]
    assert {m[1:] for m in made} == {(asked, "call_pa_edit")}


CHILD = r'''
import asyncio, json, sys
from pathlib import Path

from pydantic import TypeAdapter
from pydantic_ai import Agent, DeferredToolRequests, ModelMessagesTypeAdapter
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import FunctionModel

from lockgate.integrations import GovernedRun, Outcome
from lockgate.integrations.pydantic_ai import GovernedTools

REQUESTS = TypeAdapter(DeferredToolRequests)
seen = []


def model(messages, info):
    returned = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
    if returned:
        seen.extend({"content": p.content, "outcome": p.outcome, "metadata": p.metadata} for p in returned)
        return ModelResponse(parts=[TextPart("done")])
    return ModelResponse(parts=[ToolCallPart("case.add_note", '{"note": "Survives a crash."}',
                                             tool_call_id="call_pa_crash")])


def agent(governed):
    return Agent(FunctionModel(model), output_type=[str, DeferredToolRequests],
                 capabilities=[GovernedTools(governed)])


async def pause(state: Path) -> None:
    governed = await GovernedRun.open(tenant="tenant-a", actor="user-42",
                                      context={"case_id": "case-sensitive"}, capabilities=["case.add_note"])
    result = await agent(governed).run("Record it.")
    saved = {"messages": json.loads(result.all_messages_json()),
             "requests": REQUESTS.dump_python(result.output, mode="json")}
    state.with_suffix(".tmp").write_text(json.dumps(saved))
    state.with_suffix(".tmp").replace(state)
    print("paused", flush=True)
    await asyncio.sleep(120)  # killed here, with the review still open


async def resume(state: Path) -> None:
    saved = json.loads(state.read_text())
    messages = ModelMessagesTypeAdapter.validate_python(saved["messages"])
    requests = REQUESTS.validate_python(saved["requests"])
    meta = requests.metadata[requests.approvals[0].tool_call_id]
    async with await GovernedRun.attach(tenant=meta["tenant"], run_id=meta["run_id"]) as governed:
        result = await agent(governed).run(message_history=messages,
                                           deferred_tool_results=requests.build_results(approve_all=True))
    print(json.dumps({"output": result.output, "seen": seen}), flush=True)


asyncio.run({"pause": pause, "resume": resume}[sys.argv[1]](Path(sys.argv[2])))
'''


async def test_an_agent_killed_while_paused_is_resumed_by_a_new_process_once(
    system: System, world: World, local: dict[str, str], tmp_path: Path,
) -> None:
    script, state = tmp_path / "agent.py", tmp_path / "state.json"
    script.write_text(CHILD)
    before = len(world.ledger())
    first = subprocess.Popen([sys.executable, str(script), "pause", str(state)], env=local,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert first.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(first.stdout.readline), 60)
        assert line.strip() == "paused", first.stderr.read() if first.stderr else line
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    assert first.returncode == -signal.SIGKILL
    saved = json.loads(state.read_text())
    (meta,) = saved["requests"]["metadata"].values()
    assert meta["status"] == "pending_approval" and len(world.ledger()) == before

    await decide(system, "approve", meta["candidate_id"])
    second = await asyncio.to_thread(
        subprocess.run, [sys.executable, str(script), "resume", str(state)], env=local,
        capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    told = json.loads(second.stdout.strip().splitlines()[-1])
    (seen,) = told["seen"]
    assert told["output"] == "done" and seen["outcome"] == "success"
    assert json.loads(seen["content"])["status"] == "executed"
    assert seen["metadata"]["candidate_id"] == meta["candidate_id"]
    assert [w["intent_id"] for w in world.ledger()[before:]] == [meta["candidate_id"]]


def test_the_quickstart_runs_as_written(world: World, local: dict[str, str], tmp_path: Path) -> None:
    found = re.search(r"```python\n(.*?)```", DOCS.read_text(), re.DOTALL)
    assert found is not None, "the page has no python block"
    script = tmp_path / "quickstart.py"
    script.write_text(found.group(1))
    before = len(world.ledger())
    proc = subprocess.run([sys.executable, str(script)], env=local, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    writes = world.ledger()[before:]
    assert len(writes) == 1 and writes[0]["case_id"] == "case-123"
    assert writes[0]["intent_id"] in proc.stdout  # the model read what Lockgate did
