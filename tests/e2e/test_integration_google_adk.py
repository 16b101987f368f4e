"""Google's Agent Development Kit with its tools behind Lockgate, against the real system.

The agent is driven by a scripted ``BaseLlm`` (no live model, no network). Each scenario
reads the case-notes world's ledger (which intent wrote) and what the model was given back
for its call (the ``FunctionResponse`` ADK put in its next request). A review is ADK's own
tool confirmation (``adk_request_confirmation``), decided by the ``lockgate`` command as a
reviewer would, and resumed through ADK's own resume: a ``FunctionResponse`` to it.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncGenerator, Iterator
from pathlib import Path
from typing import Any

import pytest

# Google ADK pins google-genai and OpenTelemetry below the dev tools' versions: this module runs
# in an environment of its own (`make test-adk`); the dev environment's run passes it by.
pytest.importorskip("google.adk", reason="Google ADK has an environment of its own: make test-adk")

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.events.event import Event
from google.adk.models import BaseLlm, LlmRequest, LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import BaseSessionService, InMemorySessionService
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from google.adk.tools import FunctionTool
from google.genai import types
from pydantic import Field

from lockgate.client.sdk import Gateway
from lockgate.core.ids import intent_id_for
from lockgate.integrations.google_adk import (
    RUN_ID_KEY,
    TENANT_KEY,
    GovernedTool,
    GovernedTools,
    proposed_arguments,
)
from lockgate.integrations.governed import GovernedRun, Outcome, call_id_for
from lockgate.operations.status import CHILDREN
from lockgate.runtime.specs import MCP
from lockgate.testing.frameworks import child_env, review, run_quickstart
from lockgate.testing.system import System, running
from lockgate.worlds.casenotes.world import World

NOTE = "case.add_note"
#: How the model is offered ``case.add_note`` (tool names are offered without dots).
OFFERED = "case__add_note"
TENANT = "tenant-a"
USER = "user-42"
APP = "notes"
REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "frameworks" / "google_adk.md"
CONFIRMATION = "adk_request_confirmation"


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    """The whole system, as conftest's; without the MCP adapter where its SDK is not installed.

    ADK's environment installs ``lockgate[google-adk]``, not the MCP extra, and the MCP
    adapter stops at start without its SDK. These scenarios use the case-notes adapter only.
    """
    children = tuple(child for child in CHILDREN
                     if child[0] != MCP.status_name or importlib.util.find_spec("mcp") is not None)
    with running(System(tmp_path_factory.mktemp("system"), children=children)) as s:
        yield s


class Scripted(BaseLlm):
    """A model that answers each request with the next scripted parts; it keeps every request."""

    model: str = "scripted"
    script: list[list[types.Part]] = Field(default_factory=list)
    requests: list[LlmRequest] = Field(default_factory=list)

    async def generate_content_async(self, llm_request: LlmRequest,
                                     stream: bool = False) -> AsyncGenerator[LlmResponse, None]:
        self.requests.append(llm_request)
        yield LlmResponse(content=types.Content(role="model", parts=self.script.pop(0)))


def calls_note(call_id: str, args: dict[str, Any]) -> Scripted:
    """A model that calls ``case.add_note`` once, then ends its turn."""
    call = types.FunctionCall(name=OFFERED, args=args, id=call_id)
    return Scripted(script=[[types.Part(function_call=call)], [types.Part(text="Done.")]])


def answers_only() -> Scripted:
    """The model of a resumed run: it reads the tool's answer and ends its turn."""
    return Scripted(script=[[types.Part(text="Done.")]])


def seen(model: Scripted, call_id: str) -> dict[str, Any]:
    """What the model was given back for ``call_id``, on its latest request."""
    assert model.requests, "the model was never asked"
    responses = [part.function_response for content in model.requests[-1].contents
                 for part in content.parts or []
                 if part.function_response is not None and part.function_response.id == call_id]
    assert len(responses) == 1, model.requests[-1].contents
    response = responses[0].response
    assert response is not None
    return response


def runner_for(lockgate: GovernedTools, model: Scripted,
               sessions: BaseSessionService | None = None) -> Runner:
    agent = LlmAgent(name="notes", model=model, instruction="Keep the case notes.", tools=lockgate.tools)
    return Runner(app=App(name=APP, root_agent=agent, plugins=[lockgate]),
                  session_service=sessions or InMemorySessionService())


async def new_session(runner: Runner) -> str:
    session = await runner.session_service.create_session(app_name=APP, user_id=USER)
    return session.id


async def run(runner: Runner, session_id: str, message: types.Content) -> list[Event]:
    return [event async for event in runner.run_async(user_id=USER, session_id=session_id,
                                                      new_message=message)]


def ask(text: str) -> types.Content:
    return types.UserContent(text)


def confirmation(request_id: str, confirmed: bool) -> types.Content:
    """A host's own answer to a pause, written by hand (not ``resume_message``)."""
    return types.Content(role="user", parts=[types.Part(function_response=types.FunctionResponse(
        name=CONFIRMATION, id=request_id, response={"confirmed": confirmed}))])


def writes_of(world: World, before: int) -> list[str]:
    return [row["intent_id"] for row in world.ledger()[before:]]


PROPOSED: dict[str, list[tuple[str, str, str]]] = {}


def spied(governed_run: GovernedRun) -> GovernedRun:
    """``governed_run``, with each proposal made through it kept in ``PROPOSED``."""
    propose = governed_run.propose

    async def recorded(tool: str, arguments: str, *, call_id: str, **options: float) -> Outcome:
        PROPOSED.setdefault(governed_run.run_id, []).append((tool, arguments, call_id))
        return await propose(tool, arguments, call_id=call_id, **options)

    governed_run.propose = recorded  # type: ignore[method-assign]
    return governed_run


def proposals(run_id: str) -> set[tuple[str, str, str]]:
    """The distinct calls proposed in a run: a resume that is the same call adds none."""
    return set(PROPOSED.get(run_id, []))


async def governed(gw: Gateway, case: str) -> GovernedRun:
    return spied(await GovernedRun.open(tenant=TENANT, actor=USER, context={"case_id": case},
                                        capabilities=[NOTE], gateway=gw))


async def paused_on(gw: Gateway, call_id: str, text: str
                    ) -> tuple[GovernedRun, GovernedTools, Scripted, Runner, str, list[Event]]:
    """A run on ``case-sensitive`` whose model's one call waits for a reviewer: ADK's pause."""
    run_ = await governed(gw, "case-sensitive")
    lockgate = GovernedTools(run_)
    model = calls_note(call_id, {"note": text})
    runner = runner_for(lockgate, model)
    session_id = await new_session(runner)
    events = await run(runner, session_id, ask("Note it."))
    return run_, lockgate, model, runner, session_id, events


# --- answered at once ------------------------------------------------------------------


async def test_the_model_is_offered_the_catalogue_and_an_executed_call_is_lockgates(
    gw: Gateway, world: World,
) -> None:
    run_ = await governed(gw, "case-123")
    lockgate = GovernedTools(run_)
    model = calls_note("call_adk_exec_1", {"note": "Called back."})
    runner = runner_for(lockgate, model)
    session_id = await new_session(runner)
    before = len(world.ledger())
    events = await run(runner, session_id, ask("Note the call-back."))

    assert events[-1].content is not None and events[-1].content.parts
    assert events[-1].content.parts[0].text == "Done."
    catalogue = run_.tool(NOTE)
    assert catalogue is not None
    [tool] = lockgate.tools
    assert isinstance(tool, GovernedTool)
    [offered] = model.requests[0].config.tools or []
    [declaration] = offered.function_declarations or []
    assert declaration.name == OFFERED and declaration.description == catalogue.description
    assert declaration.parameters_json_schema == catalogue.parameters  # Lockgate's schema, as it is
    shown = seen(model, "call_adk_exec_1")
    assert shown["status"] == "executed" and "untrusted_data" in shown["result"]
    # The effect is Lockgate's: its intent for this run's call id wrote, once, and what the
    # model read is that intent's answer.
    candidate_id = intent_id_for(TENANT, run_.run_id, "call_adk_exec_1")
    assert writes_of(world, before) == [candidate_id]
    assert shown == json.loads((await run_.outcome(candidate_id)).text())
    session = await runner.session_service.get_session(app_name=APP, user_id=USER, session_id=session_id)
    assert session is not None
    assert session.state[RUN_ID_KEY] == run_.run_id and session.state[TENANT_KEY] == TENANT
    await run_.close()


async def test_the_hosts_own_tool_of_that_name_never_runs(gw: Gateway, world: World) -> None:
    """A tool of the host's named as the catalogue offers it: the plugin answers, Lockgate acts."""
    run_ = await governed(gw, "case-123")
    lockgate = GovernedTools(run_)
    ran: list[str] = []

    def case__add_note(note: str) -> dict[str, str]:
        """Add a note to the case (the host's own implementation)."""
        ran.append(note)
        return {"status": "written by the host"}

    model = calls_note("call_adk_own_1", {"note": "Mine."})
    agent = LlmAgent(name="notes", model=model, instruction="Keep the case notes.",
                     tools=[FunctionTool(case__add_note)])
    runner = Runner(app=App(name=APP, root_agent=agent, plugins=[lockgate]),
                    session_service=InMemorySessionService())
    session_id = await new_session(runner)
    before = len(world.ledger())
    await run(runner, session_id, ask("Note it."))
    assert ran == []
    assert seen(model, "call_adk_own_1")["status"] == "executed"
    assert writes_of(world, before) == [intent_id_for(TENANT, run_.run_id, "call_adk_own_1")]
    await run_.close()


async def test_without_the_plugin_the_tool_still_only_proposes(gw: Gateway, world: World) -> None:
    """``GovernedTool``s on an agent whose ``App`` lacks the plugin: still Lockgate's effect."""
    run_ = await governed(gw, "case-123")
    model = calls_note("call_adk_bare_tool_1", {"note": "No plugin."})
    agent = LlmAgent(name="notes", model=model, instruction="Keep the case notes.",
                     tools=GovernedTools(run_).tools)
    runner = Runner(app=App(name=APP, root_agent=agent), session_service=InMemorySessionService())
    before = len(world.ledger())
    await run(runner, await new_session(runner), ask("Note it."))
    assert seen(model, "call_adk_bare_tool_1")["status"] == "executed"
    assert writes_of(world, before) == [intent_id_for(TENANT, run_.run_id, "call_adk_bare_tool_1")]
    await run_.close()


async def test_a_tool_call_id_that_is_no_call_id_is_mapped_to_one_stable_id(
    gw: Gateway, world: World,
) -> None:
    run_ = await governed(gw, "case-123")
    lockgate = GovernedTools(run_)
    model = calls_note("fc:7/step 3#1", {"note": "Odd ids too."})
    runner = runner_for(lockgate, model)
    before = len(world.ledger())
    await run(runner, await new_session(runner), ask("Note it."))
    assert seen(model, "fc:7/step 3#1")["status"] == "executed"
    assert writes_of(world, before) == [intent_id_for(TENANT, run_.run_id, call_id_for("fc:7/step 3#1"))]
    await run_.close()


async def test_a_rejected_call_is_a_tool_result_and_the_run_goes_on(gw: Gateway, world: World) -> None:
    run_ = await governed(gw, "case-123")
    model = calls_note("call_adk_empty_1", {"note": ""})
    runner = runner_for(GovernedTools(run_), model)
    before = len(world.ledger())
    events = await run(runner, await new_session(runner), ask("Add an empty note."))

    assert len(model.requests) == 2  # the model read the refusal and ended its turn
    assert events[-1].content is not None and events[-1].content.parts
    assert events[-1].content.parts[0].text == "Done."
    shown = seen(model, "call_adk_empty_1")
    assert shown["status"] == "rejected" and shown["code"] == "argument.note.empty"
    assert writes_of(world, before) == []
    await run_.close()


async def test_a_policy_denial_reaches_the_model_without_its_internal_reason(
    gw: Gateway, world: World,
) -> None:
    run_ = await governed(gw, "case-closed")
    model = calls_note("call_adk_closed_1", {"note": "Reopen it."})
    runner = runner_for(GovernedTools(run_), model)
    before = len(world.ledger())
    await run(runner, await new_session(runner), ask("Reopen the case."))

    shown = seen(model, "call_adk_closed_1")
    assert shown["status"] == "unavailable"
    assert shown == json.loads((await run_.outcome(
        intent_id_for(TENANT, run_.run_id, "call_adk_closed_1"))).text())
    assert "case.closed" not in json.dumps(shown)
    assert writes_of(world, before) == []
    await run_.close()


# --- a review is ADK's tool confirmation ------------------------------------------------


async def test_a_review_pauses_and_an_approved_call_runs_once_on_adks_resume(
    system: System, gw: Gateway, world: World,
) -> None:
    before = len(world.ledger())
    run_, lockgate, model, runner, session_id, events = await paused_on(
        gw, "call_adk_review_1", "Refund agreed.")

    # ADK's pause: the invocation ended on an adk_request_confirmation call carrying the
    # candidate id, before the model read anything.
    [paused] = lockgate.paused(events)
    candidate_id = intent_id_for(TENANT, run_.run_id, "call_adk_review_1")
    assert paused.candidate_id == candidate_id and paused.payload["run_id"] == run_.run_id
    assert paused.call.id == "call_adk_review_1"
    assert any(paused.request_id in (event.long_running_tool_ids or set()) for event in events)
    assert len(model.requests) == 1
    assert await lockgate.resume_message(events) is None  # nobody decided yet: stays paused
    assert writes_of(world, before) == []

    await review(system, "approve", candidate_id)
    message = await lockgate.resume_message(events, wait_s=20)
    assert message is not None
    resumed = await run(runner, session_id, message)
    assert len(model.requests) == 2
    assert seen(model, "call_adk_review_1")["status"] == "executed"
    assert lockgate.paused(resumed) == []
    assert writes_of(world, before) == [candidate_id]
    # Asked four times (the first proposal, resume_message before and after the approval,
    # the resumed tool): one call.
    assert len(PROPOSED[run_.run_id]) == 4
    assert proposals(run_.run_id) == {(NOTE, '{"note":"Refund agreed."}', "call_adk_review_1")}
    await run_.close()


async def test_a_denied_review_is_what_the_resumed_model_reads(
    system: System, gw: Gateway, world: World,
) -> None:
    before = len(world.ledger())
    run_, lockgate, model, runner, session_id, events = await paused_on(
        gw, "call_adk_review_2", "Close everything.")
    [paused] = lockgate.paused(events)

    await review(system, "deny", paused.candidate_id, "--why", "not now")
    message = await lockgate.resume_message(events, wait_s=20)
    assert message is not None
    await run(runner, session_id, message)
    shown = seen(model, "call_adk_review_2")
    assert shown["status"] == "unavailable" and "not now" not in json.dumps(shown)
    assert writes_of(world, before) == []
    assert proposals(run_.run_id) == {(NOTE, '{"note":"Close everything."}', "call_adk_review_2")}
    await run_.close()


async def test_a_withdrawn_review_is_what_the_resumed_model_reads(gw: Gateway, world: World) -> None:
    before = len(world.ledger())
    run_, lockgate, model, runner, session_id, events = await paused_on(
        gw, "call_adk_withdrawn_1", "Nobody waits for this.")
    [paused] = lockgate.paused(events)
    await run_.withdraw(paused.candidate_id, why="the customer hung up")
    message = await lockgate.resume_message(events, wait_s=20)
    assert message is not None
    await run(runner, session_id, message)
    assert seen(model, "call_adk_withdrawn_1")["status"] == "withdrawn"
    assert writes_of(world, before) == []
    await run_.close()


async def test_the_hosts_own_confirmation_authorizes_nothing(
    system: System, gw: Gateway, world: World,
) -> None:
    """A host that confirms in ADK before any reviewer did: the plugin asks Lockgate, which
    still waits; the model is told so, and nothing happens."""
    before = len(world.ledger())
    run_, lockgate, model, runner, session_id, events = await paused_on(
        gw, "call_adk_bare_1", "Approved by nobody.")
    [paused] = lockgate.paused(events)
    await run(runner, session_id, confirmation(paused.request_id, True))
    assert seen(model, "call_adk_bare_1")["status"] == "pending_approval"
    assert writes_of(world, before) == []
    await run_.close()  # withdraws what it left waiting
    assert writes_of(world, before) == []


async def test_the_hosts_refusal_is_not_the_decision_either(
    system: System, gw: Gateway, world: World,
) -> None:
    """A reviewer approved; the host answers ADK "not confirmed": Lockgate's answer stands."""
    before = len(world.ledger())
    run_, lockgate, model, runner, session_id, events = await paused_on(
        gw, "call_adk_nay_1", "Approved by the reviewer.")
    [paused] = lockgate.paused(events)
    await review(system, "approve", paused.candidate_id)
    await run(runner, session_id, confirmation(paused.request_id, False))
    assert seen(model, "call_adk_nay_1")["status"] == "executed"
    assert writes_of(world, before) == [paused.candidate_id]
    assert proposals(run_.run_id) == {(NOTE, '{"note":"Approved by the reviewer."}', "call_adk_nay_1")}
    await run_.close()


async def test_resumed_twice_is_one_effect(system: System, gw: Gateway, world: World,
                                           tmp_path: Path) -> None:
    """The paused session stored, copied, and each copy resumed: the same call, one effect."""
    run_ = await governed(gw, "case-sensitive")
    lockgate = GovernedTools(run_)
    first = runner_for(lockgate, calls_note("call_adk_twice_1", {"note": "Twice is once."}),
                       SqliteSessionService(str(tmp_path / "a.db")))
    session_id = await new_session(first)
    events = await run(first, session_id, ask("Note it."))
    [paused] = lockgate.paused(events)
    shutil.copy(tmp_path / "a.db", tmp_path / "b.db")
    before = len(world.ledger())
    await review(system, "approve", paused.candidate_id)

    for db in ("a.db", "b.db"):  # two resumes of the same paused state, each with its own plugin
        again = GovernedTools(spied(await GovernedRun.attach(tenant=TENANT, run_id=run_.run_id, gateway=gw)))
        model = answers_only()
        runner = runner_for(again, model, SqliteSessionService(str(tmp_path / db)))
        session = await runner.session_service.get_session(app_name=APP, user_id=USER,
                                                           session_id=session_id)
        assert session is not None
        message = await again.resume_message(session.events, wait_s=20)
        assert message is not None
        await run(runner, session_id, message)
        assert seen(model, "call_adk_twice_1")["status"] == "executed"
        # The same resume sent again: ADK has consumed it, and nothing more happens.
        await run(runner, session_id, message)
    assert writes_of(world, before) == [paused.candidate_id]
    assert proposals(run_.run_id) == {(NOTE, '{"note":"Twice is once."}', "call_adk_twice_1")}
    await run_.close()


async def test_a_reviewers_edit_is_what_the_model_reads(system: System, gw: Gateway, world: World) -> None:
    before = len(world.ledger())
    run_, lockgate, model, runner, session_id, events = await paused_on(
        gw, "call_adk_edit_1", "Customer Jane Doe, DOB 1970-01-01, escalated.")
    [paused] = lockgate.paused(events)
    await review(system, "edit", paused.candidate_id, "--arguments", json.dumps({"note": "Escalated."}),
                 "--why", "no personal data")
    replaced = await run_.outcome(paused.candidate_id)
    assert replaced.status == "replaced" and replaced.replacement is not None
    assert await lockgate.resume_message(events) is None  # the edit waits for its own approval
    await review(system, "approve", replaced.replacement.candidate_id)
    message = await lockgate.resume_message(events, wait_s=20)
    assert message is not None
    await run(runner, session_id, message)
    shown = seen(model, "call_adk_edit_1")
    assert shown["status"] == "replaced" and shown["replacement"]["status"] == "executed"
    assert writes_of(world, before) == [replaced.replacement.candidate_id]
    await run_.close()


# --- a crash between the pause and the resume -------------------------------------------


AGENT = '''
import asyncio, json, os, sys
from typing import Any, AsyncGenerator
from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.models import BaseLlm, LlmRequest, LlmResponse
from google.adk.runners import Runner
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from google.genai import types
from pydantic import Field
from lockgate.integrations.governed import GovernedRun
from lockgate.integrations.google_adk import RUN_ID_KEY, TENANT_KEY, GovernedTools


class Scripted(BaseLlm):
    model: str = "scripted"
    script: list[list[types.Part]] = Field(default_factory=list)
    requests: list[LlmRequest] = Field(default_factory=list)

    async def generate_content_async(self, llm_request: LlmRequest,
                                     stream: bool = False) -> AsyncGenerator[LlmResponse, None]:
        self.requests.append(llm_request)
        yield LlmResponse(content=types.Content(role="model", parts=self.script.pop(0)))


def runner(lockgate, model, db):
    agent = LlmAgent(name="notes", model=model, instruction="Keep the case notes.", tools=lockgate.tools)
    return Runner(app=App(name="notes", root_agent=agent, plugins=[lockgate]),
                  session_service=SqliteSessionService(db))


async def pause(db, out):
    governed = await GovernedRun.open(tenant="tenant-a", actor="user-42",
                                      context={"case_id": "case-sensitive"}, capabilities=["case.add_note"])
    call = types.FunctionCall(name="case__add_note", args={"note": "Survives a crash."}, id="call_adk_crash_1")
    lockgate = GovernedTools(governed)
    adk = runner(lockgate, Scripted(script=[[types.Part(function_call=call)], [types.Part(text="Done.")]]), db)
    session = await adk.session_service.create_session(app_name="notes", user_id="user-42")
    events = [e async for e in adk.run_async(user_id="user-42", session_id=session.id,
                                             new_message=types.UserContent("Note it."))]
    [paused] = lockgate.paused(events)
    with open(out + ".tmp", "w") as f:
        json.dump({"session_id": session.id, "candidate_id": paused.candidate_id}, f)
    os.replace(out + ".tmp", out)
    await asyncio.sleep(3600)  # killed here, between the pause and the resume


async def resume(db, out):
    with open(out) as f:
        saved = json.load(f)
    model = Scripted(script=[[types.Part(text="Done.")]])
    sessions = SqliteSessionService(db)
    session = await sessions.get_session(app_name="notes", user_id="user-42", session_id=saved["session_id"])
    governed = await GovernedRun.attach(tenant=session.state[TENANT_KEY], run_id=session.state[RUN_ID_KEY])
    lockgate = GovernedTools(governed)
    adk = runner(lockgate, model, db)
    message = await lockgate.resume_message(session.events, wait_s=20)
    assert message is not None
    [e async for e in adk.run_async(user_id="user-42", session_id=session.id, new_message=message)]
    print(json.dumps([part.function_response.model_dump(mode="json", exclude_none=True)
                      for content in model.requests[-1].contents for part in content.parts
                      if part.function_response is not None]))
    await governed.close()

asyncio.run({"pause": pause, "resume": resume}[sys.argv[1]](sys.argv[2], sys.argv[3]))
'''


async def test_an_agent_killed_while_paused_is_resumed_by_a_new_process_once(
    system: System, world: World, tmp_path: Path,
) -> None:
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    db, saved = str(tmp_path / "sessions.db"), tmp_path / "paused.json"
    before = len(world.ledger())
    agent = subprocess.Popen([sys.executable, str(script), "pause", db, str(saved)],
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
    candidate_id = json.loads(saved.read_text())["candidate_id"]
    assert writes_of(world, before) == []

    await review(system, "approve", candidate_id)
    resumed = await asyncio.to_thread(subprocess.run, [sys.executable, str(script), "resume", db, str(saved)],
                                      env=child_env(system), capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    [shown] = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert shown["id"] == "call_adk_crash_1" and shown["response"]["status"] == "executed"
    assert writes_of(world, before) == [candidate_id]


# --- the quickstart page ----------------------------------------------------------------


async def test_the_quickstart_runs_as_written(system: System, world: World, tmp_path: Path) -> None:
    before = len(world.ledger())
    proc = await asyncio.to_thread(run_quickstart, system, DOC, tmp_path)
    assert proc.returncode == 0, proc.stderr
    written = world.ledger()[before:]
    assert [(w["case_id"], w["actor"]) for w in written] == [("case-123", "user-42")]


def test_every_proposal_of_a_call_is_the_same_bytes() -> None:
    args = {"note": "Caf\u00e9 \u2615", "n": 1.5, "a": {"z": 1, "b": [True, None]}}
    assert proposed_arguments(args) == '{"a":{"b":[true,null],"z":1},"n":1.5,"note":"Café ☕"}'
    reordered = dict(reversed(list(args.items())))
    assert proposed_arguments(reordered) == proposed_arguments(json.loads(json.dumps(args)))
    assert proposed_arguments({}) == proposed_arguments(None) == "{}"
