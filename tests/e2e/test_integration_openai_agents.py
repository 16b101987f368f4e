"""The OpenAI Agents SDK with its tools behind Lockgate, against the real system.

The agent is driven by the SDK's own scripted model (``agents.testing.ScriptedModel``): no
live model, no network. Each scenario reads the case-notes world's ledger (which intent
wrote) and what the model was given back for its call (the ``function_call_output`` the
SDK fed it on its next step). Reviews are decided by the ``lockgate`` command, as a
reviewer would.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, FunctionTool, RunConfig, Runner, RunResult, RunState, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from lockgate.client.sdk import Gateway
from lockgate.core.ids import intent_id_for
from lockgate.integrations.governed import GovernedRun, call_id_for
from lockgate.integrations.openai_agents import GovernedTools, proposed_arguments
from lockgate.testing import frameworks
from lockgate.testing.frameworks import review
from lockgate.testing.system import System
from lockgate.worlds.casenotes.world import World

NOTE = "case.add_note"
#: How the model is offered ``case.add_note`` (provider tool names may not hold dots).
OFFERED = "case__add_note"
TENANT = "tenant-a"
REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "frameworks" / "openai_agents.md"
#: Nothing leaves the machine: the SDK's trace export is off in every process here.
NO_TRACES = RunConfig(tracing_disabled=True)


@pytest.fixture(autouse=True, scope="module")
def no_trace_export() -> Iterator[None]:
    set_tracing_disabled(True)
    yield
    set_tracing_disabled(False)


def child_env(system: System) -> dict[str, str]:
    """A child process's environment: this system found, no model key, no trace export."""
    return frameworks.child_env(system, OPENAI_AGENTS_DISABLE_TRACING="1")


async def governed(gw: Gateway, case: str) -> GovernedRun:
    return await GovernedRun.open(tenant=TENANT, actor="user-42", context={"case_id": case},
                                  capabilities=[NOTE], gateway=gw)


def scripted(call_id: str, arguments: str) -> ScriptedModel:
    """A model that calls ``case.add_note`` once, then ends its turn."""
    return ScriptedModel([[function_call(OFFERED, arguments, call_id=call_id)],
                          [assistant_message("Done.")]])


def notes_agent(lockgate: GovernedTools, model: ScriptedModel) -> Agent[Any]:
    return Agent(name="notes", instructions="Keep the case notes.", model=model, tools=lockgate.tools)


def seen(model: ScriptedModel, call_id: str) -> dict[str, Any]:
    """What the model was given back for ``call_id``, on its latest step."""
    last = model.last_call
    assert last is not None and isinstance(last.input, list)
    outputs = [item["output"] for item in last.input
               if isinstance(item, dict) and item.get("type") == "function_call_output"
               and item.get("call_id") == call_id]
    assert len(outputs) == 1, last.input
    parsed: dict[str, Any] = json.loads(outputs[0])
    return parsed


def writes_of(world: World, before: int) -> list[str]:
    return [row["intent_id"] for row in world.ledger()[before:]]


def note(text: str) -> str:
    return json.dumps({"note": text})


async def run_agent(agent: Agent[Any], start: str | RunState[Any, Any]) -> RunResult:
    return await Runner.run(agent, start, run_config=NO_TRACES)


# --- answered at once ------------------------------------------------------------------


async def test_the_model_is_offered_the_catalogue_and_an_executed_call_is_lockgates(
    gw: Gateway, world: World,
) -> None:
    run = await governed(gw, "case-123")
    lockgate = GovernedTools(run)
    model = scripted("call_oa_exec_1", note("Called back."))
    before = len(world.ledger())
    result = await run_agent(notes_agent(lockgate, model), "Note the call-back.")

    assert not result.interruptions and result.final_output == "Done."
    offered = model.first_call.tools if model.first_call else []
    catalogue = run.tool(NOTE)
    assert catalogue is not None and [t.name for t in offered] == [OFFERED]
    assert isinstance(offered[0], FunctionTool)
    assert offered[0].params_json_schema == catalogue.parameters  # not rewritten by strict mode
    shown = seen(model, "call_oa_exec_1")
    assert shown["status"] == "executed" and "untrusted_data" in shown["result"]
    # The effect is Lockgate's: its intent for this run's call id wrote, once, and what the
    # model read is that intent's answer.
    candidate_id = intent_id_for(TENANT, run.run_id, "call_oa_exec_1")
    assert writes_of(world, before) == [candidate_id]
    assert shown == json.loads((await run.outcome(candidate_id)).text())
    await run.close()


async def test_a_tool_call_id_that_is_no_call_id_is_mapped_to_one_stable_id(
    gw: Gateway, world: World,
) -> None:
    run = await governed(gw, "case-123")
    model = scripted("fc:7/step 3#1", note("Odd ids too."))
    before = len(world.ledger())
    result = await run_agent(notes_agent(GovernedTools(run), model), "Note it.")
    assert seen(model, "fc:7/step 3#1")["status"] == "executed" and not result.interruptions
    assert writes_of(world, before) == [intent_id_for(TENANT, run.run_id, call_id_for("fc:7/step 3#1"))]
    await run.close()


async def test_a_refusal_is_the_guardrails_message_and_the_run_goes_on(gw: Gateway, world: World) -> None:
    run = await governed(gw, "case-123")
    model = scripted("call_oa_empty_1", '{"note": ""}')
    before = len(world.ledger())
    result = await run_agent(notes_agent(GovernedTools(run), model), "Add an empty note.")

    assert not result.interruptions and result.final_output == "Done."
    shown = seen(model, "call_oa_empty_1")
    assert shown["status"] == "rejected" and shown["code"] == "argument.note.empty"
    # Through the SDK's reject-with-message path: the tool's input guardrail rejected it.
    [guard] = result.tool_input_guardrail_results
    assert guard.output.behavior["type"] == "reject_content"
    assert writes_of(world, before) == []
    await run.close()


async def test_a_policy_denial_reaches_the_model_without_its_internal_reason(
    gw: Gateway, world: World,
) -> None:
    run = await governed(gw, "case-closed")
    model = scripted("call_oa_closed_1", note("Reopen it."))
    before = len(world.ledger())
    result = await run_agent(notes_agent(GovernedTools(run), model), "Reopen the case.")

    assert not result.interruptions and result.final_output == "Done."
    shown = seen(model, "call_oa_closed_1")
    assert shown["status"] == "unavailable"
    assert shown == json.loads((await run.outcome(
        intent_id_for(TENANT, run.run_id, "call_oa_closed_1"))).text())
    assert "case.closed" not in json.dumps(shown)
    assert writes_of(world, before) == []
    await run.close()


async def test_arguments_that_are_no_object_are_lockgates_to_refuse(gw: Gateway, world: World) -> None:
    """The SDK pauses on text it cannot parse without asking ``needs_approval``; the resume asks
    Lockgate, whose refusal the model reads."""
    run = await governed(gw, "case-123")
    lockgate = GovernedTools(run)
    model = scripted("call_oa_torn_1", '{"note": "Called')
    agent = notes_agent(lockgate, model)
    before = len(world.ledger())
    result = await run_agent(agent, "Note it.")
    assert len(result.interruptions) == 1
    state = result.to_state()
    [outcome] = await lockgate.prepare_resume(state)
    assert outcome.refused
    result = await run_agent(agent, state)
    assert seen(model, "call_oa_torn_1")["status"] == "rejected"
    assert writes_of(world, before) == []
    await run.close()


# --- a review is the SDK's pause --------------------------------------------------------


async def test_a_review_pauses_and_an_approved_call_runs_once_on_the_resume(
    system: System, gw: Gateway, world: World,
) -> None:
    run = await governed(gw, "case-sensitive")
    lockgate = GovernedTools(run)
    model = scripted("call_oa_review_1", note("Refund agreed."))
    agent = notes_agent(lockgate, model)
    before = len(world.ledger())
    result = await run_agent(agent, "Record the refund.")

    [paused] = result.interruptions
    assert paused.tool_name == OFFERED and model.remaining_steps == 1  # paused before the model read
    state = result.to_state()
    [waiting] = await lockgate.prepare_resume(state)  # nobody decided yet: still paused
    assert waiting.pending and waiting.candidate_id == intent_id_for(TENANT, run.run_id, "call_oa_review_1")
    result = await run_agent(agent, state)
    assert len(result.interruptions) == 1 and model.remaining_steps == 1
    assert writes_of(world, before) == []

    await review(system, "approve", waiting.candidate_id)
    state = result.to_state()
    [decided] = await lockgate.prepare_resume(state, wait_s=20)
    assert decided.executed
    result = await run_agent(agent, state)
    assert not result.interruptions and result.final_output == "Done."
    assert seen(model, "call_oa_review_1")["status"] == "executed"
    assert writes_of(world, before) == [waiting.candidate_id]
    await run.close()


async def test_a_denied_review_is_what_the_resumed_model_reads(
    system: System, gw: Gateway, world: World,
) -> None:
    run = await governed(gw, "case-sensitive")
    lockgate = GovernedTools(run)
    model = scripted("call_oa_review_2", note("Close everything."))
    agent = notes_agent(lockgate, model)
    before = len(world.ledger())
    result = await run_agent(agent, "Close everything.")
    state = result.to_state()
    [waiting] = await lockgate.prepare_resume(state)

    await review(system, "deny", waiting.candidate_id, "--why", "not now")
    [decided] = await lockgate.prepare_resume(state, wait_s=20)
    assert decided.refused
    result = await run_agent(agent, state)
    assert not result.interruptions and result.final_output == "Done."
    shown = seen(model, "call_oa_review_2")
    assert shown["status"] == "unavailable" and "not now" not in json.dumps(shown)
    assert writes_of(world, before) == []
    await run.close()


async def test_the_sdks_own_approve_authorizes_nothing(system: System, gw: Gateway, world: World) -> None:
    """A host that approves in the SDK before any reviewer did: the tool asks Lockgate, which
    still waits; the model is told so, and nothing happens."""
    run = await governed(gw, "case-sensitive")
    model = scripted("call_oa_bare_1", note("Approved by nobody."))
    agent = notes_agent(GovernedTools(run), model)
    before = len(world.ledger())
    result = await run_agent(agent, "Note it.")
    state = result.to_state()
    [item] = state.get_interruptions()
    state.approve(item)
    result = await run_agent(agent, state)
    assert seen(model, "call_oa_bare_1")["status"] == "pending_approval"
    assert writes_of(world, before) == []
    await run.close()  # withdraws what it left waiting
    assert writes_of(world, before) == []


async def test_resumed_twice_from_the_same_state_is_one_effect(
    system: System, gw: Gateway, world: World,
) -> None:
    run = await governed(gw, "case-sensitive")
    model = scripted("call_oa_twice_1", note("Twice is once."))
    result = await run_agent(notes_agent(GovernedTools(run), model), "Note it.")
    saved = result.to_state().to_string()
    before = len(world.ledger())
    await review(system, "approve", intent_id_for(TENANT, run.run_id, "call_oa_twice_1"))

    for _ in range(2):  # two resumes of the same saved state, each with its own tools
        again = GovernedTools(await GovernedRun.attach(tenant=TENANT, run_id=run.run_id, gateway=gw))
        resumed = ScriptedModel([[assistant_message("Done.")]])
        agent = notes_agent(again, resumed)
        state = await RunState.from_string(agent, saved)
        [decided] = await again.prepare_resume(state, wait_s=20)
        assert decided.executed
        result = await run_agent(agent, state)
        assert seen(resumed, "call_oa_twice_1")["status"] == "executed"
    assert writes_of(world, before) == [intent_id_for(TENANT, run.run_id, "call_oa_twice_1")]
    await run.close()


async def test_a_reviewers_edit_is_what_the_model_reads(system: System, gw: Gateway, world: World) -> None:
    run = await governed(gw, "case-sensitive")
    lockgate = GovernedTools(run)
    model = scripted("call_oa_edit_1", note("Customer Jane Doe, DOB 1970-01-01, escalated."))
    agent = notes_agent(lockgate, model)
    before = len(world.ledger())
    result = await run_agent(agent, "Escalate.")
    state = result.to_state()
    [waiting] = await lockgate.prepare_resume(state)
    await review(system, "edit", waiting.candidate_id, "--arguments", note("Escalated."),
                 "--why", "no personal data")
    [replaced] = await lockgate.prepare_resume(state)  # the edit waits for its own approval
    assert replaced.status == "replaced" and replaced.pending and replaced.replacement is not None
    await review(system, "approve", replaced.replacement.candidate_id)
    [done] = await lockgate.prepare_resume(state, wait_s=20)
    assert done.executed
    result = await run_agent(agent, state)
    shown = seen(model, "call_oa_edit_1")
    assert shown["status"] == "replaced" and shown["replacement"]["status"] == "executed"
    assert writes_of(world, before) == [replaced.replacement.candidate_id]
    await run.close()


# --- a crash between the pause and the resume -------------------------------------------


PAUSE = '''
import asyncio, json, sys
from agents import Agent, FunctionTool, RunConfig, Runner
from agents.testing import ScriptedModel, assistant_message, function_call
from lockgate.integrations.governed import GovernedRun, call_id_for
from lockgate.integrations.openai_agents import GovernedTools

async def main(out):
    governed = await GovernedRun.open(tenant="tenant-a", actor="user-42",
                                      context={"case_id": "case-sensitive"}, capabilities=["case.add_note"])
    model = ScriptedModel([[function_call("case__add_note", '{"note": "Survives a crash."}',
                                          call_id="call_oa_crash_1")], [assistant_message("Done.")]])
    agent = Agent(name="notes", instructions="Keep the case notes.", model=model,
                  tools=GovernedTools(governed).tools)
    result = await Runner.run(agent, "Note it.", run_config=RunConfig(tracing_disabled=True))
    assert result.interruptions
    with open(out + ".tmp", "w") as f:
        json.dump({"run_id": governed.run_id, "state": result.to_state().to_string()}, f)
    import os; os.replace(out + ".tmp", out)
    await asyncio.sleep(3600)  # killed here, between the pause and the resume

asyncio.run(main(sys.argv[1]))
'''

RESUME = '''
import asyncio, json, sys
from agents import Agent, FunctionTool, RunConfig, Runner, RunState
from agents.testing import ScriptedModel, assistant_message
from lockgate.integrations.governed import GovernedRun, call_id_for
from lockgate.integrations.openai_agents import GovernedTools

async def main(saved):
    with open(saved) as f:
        paused = json.load(f)
    governed = await GovernedRun.attach(tenant="tenant-a", run_id=paused["run_id"])
    lockgate = GovernedTools(governed)
    model = ScriptedModel([[assistant_message("Done.")]])
    agent = Agent(name="notes", instructions="Keep the case notes.", model=model, tools=lockgate.tools)
    state = await RunState.from_string(agent, paused["state"])
    await lockgate.prepare_resume(state, wait_s=20)
    result = await Runner.run(agent, state, run_config=RunConfig(tracing_disabled=True))
    print(json.dumps([item for item in model.last_call.input
                      if isinstance(item, dict) and item.get("type") == "function_call_output"]))
    await governed.close()

asyncio.run(main(sys.argv[1]))
'''


async def test_an_agent_killed_while_paused_is_resumed_by_a_new_process_once(
    system: System, world: World, tmp_path: Path,
) -> None:
    (tmp_path / "pause.py").write_text(PAUSE)
    (tmp_path / "resume.py").write_text(RESUME)
    saved = tmp_path / "state.json"
    before = len(world.ledger())
    agent = subprocess.Popen([sys.executable, str(tmp_path / "pause.py"), str(saved)],
                             env=child_env(system), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while not saved.exists():
            assert agent.poll() is None, agent.communicate()
            assert loop.time() < deadline, "the agent never paused"
            await asyncio.sleep(0.1)
    finally:
        agent.send_signal(signal.SIGKILL)
        agent.wait(timeout=10)
    assert agent.returncode == -signal.SIGKILL
    run_id = json.loads(saved.read_text())["run_id"]
    candidate_id = intent_id_for(TENANT, run_id, "call_oa_crash_1")
    assert writes_of(world, before) == []

    await review(system, "approve", candidate_id)
    resumed = await asyncio.to_thread(subprocess.run, [sys.executable, str(tmp_path / "resume.py"),
                                                       str(saved)],
                                      env=child_env(system), capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    [shown] = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert shown["call_id"] == "call_oa_crash_1"
    assert json.loads(shown["output"])["status"] == "executed"
    assert writes_of(world, before) == [candidate_id]


# --- the quickstart page ----------------------------------------------------------------


async def test_the_quickstart_runs_as_written(system: System, world: World, tmp_path: Path) -> None:
    before = len(world.ledger())
    env = frameworks.child_env(system, found_by_run_json=True, OPENAI_AGENTS_DISABLE_TRACING="1")
    proc = await asyncio.to_thread(frameworks.run_quickstart, system, DOC, tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    written = world.ledger()[before:]
    assert [(w["case_id"], w["actor"]) for w in written] == [("case-123", "user-42")]


def test_every_proposal_of_a_call_is_the_same_bytes() -> None:
    raw = '{ "note" : "Caf\\u00e9 \u2615",  "n": 1.50 }'
    assert proposed_arguments(raw) == '{"note":"Café ☕","n":1.5}'
    assert proposed_arguments(raw) == proposed_arguments(proposed_arguments(raw))
    assert proposed_arguments('{"note": ') == '{"note": '  # no object: as it came
    assert proposed_arguments('[1]') == '[1]' and proposed_arguments('{"x": NaN}') == '{"x": NaN}'
