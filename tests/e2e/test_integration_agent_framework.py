"""Microsoft Agent Framework agents with their tools behind Lockgate, against the real system.

Each scenario runs an ``Agent`` with a scripted chat client (no model, no network) and
reads two things: the case-notes world's ledger (one write per intent, or none) and the
tool results the framework fed back to the model. Reviews are decided with the
``lockgate`` command, as a reviewer would; a paused agent resumes through the
framework's own approval answer, in this process or in a new one after a SIGKILL.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from agent_framework import Agent, AgentResponse, AgentSession, Message, tool

from lockgate.client.sdk import Gateway
from lockgate.integrations import GovernedRun, Outcome
from lockgate.integrations.agent_framework import (
    PAUSE_KEY,
    Lockgate,
    ScriptedCall,
    ScriptedChatClient,
)
from lockgate.testing.frameworks import child_env, review, run_quickstart
from lockgate.testing.system import System
from lockgate.worlds.casenotes.world import World

NOTE = "case.add_note"
TENANT = "tenant-a"
ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "frameworks" / "agent_framework.md"


def note(text: str) -> str:
    return json.dumps({"note": text})


class Governed:
    """One agent on one governed run: the agent, its scripted model, the integration."""

    def __init__(self, governed: GovernedRun, calls: list[ScriptedCall], **lockgate: float) -> None:
        self.governed = governed
        #: Every (tool, argument text, call id) the integration proposed, resumes included.
        self.proposed: list[tuple[str, str, str]] = []
        propose = governed.propose

        async def recorded(tool: str, arguments: str, *, call_id: str, **options: float) -> Outcome:
            self.proposed.append((tool, arguments, call_id))
            return await propose(tool, arguments, call_id=call_id, **options)

        governed.propose = recorded  # type: ignore[method-assign]
        self.lockgate = Lockgate(governed, **lockgate)
        self.model = ScriptedChatClient(calls)
        self.agent = Agent(client=self.model, instructions="You keep case notes.",
                           tools=self.lockgate.tools, middleware=self.lockgate.middleware)
        self.session = self.agent.create_session()

    async def run(self, prompt: str | Message | None = "Add the note.") -> AgentResponse[Any]:
        return await self.agent.run(prompt, session=self.session)

    def seen(self) -> list[dict[str, Any]]:
        """The tool results the model read, as JSON."""
        return [json.loads(text) for text in self.model.seen]


async def governed_agent(gw: Gateway, case: str, arguments: str, call_id: str,
                         **lockgate: float) -> Governed:
    governed = await GovernedRun.open(tenant=TENANT, actor="user-42", context={"case_id": case},
                                      capabilities=[NOTE], gateway=gw)
    return Governed(governed, [ScriptedCall(NOTE, arguments, call_id)], **lockgate)


def paused_on(response: AgentResponse[Any]) -> str:
    """The candidate the agent's pause waits for, as the framework's approval request names it."""
    (request,) = response.user_input_requests
    assert request.type == "function_approval_request"
    return str(request.additional_properties[PAUSE_KEY]["candidate_id"])


async def test_an_executed_call_is_one_write_and_the_model_reads_the_result(
    gw: Gateway, world: World,
) -> None:
    before = len(world.ledger())
    g = await governed_agent(gw, "case-123", note("Called back."), "call_af_exec_1")
    response = await g.run()
    assert g.model.offered == ["case__add_note"]  # the catalogue, under a provider-safe name
    (seen,) = g.seen()
    assert seen["status"] == "executed" and "untrusted_data" in seen["result"]
    assert not response.user_input_requests and "executed" in response.text
    # The same call asked again is the same intent: its candidate is the one that wrote.
    assert g.proposed == [(NOTE, note("Called back."), "call_af_exec_1")]  # the model's own text
    again = await g.governed.resume(NOTE, note("Called back."), call_id="call_af_exec_1")
    assert [w["intent_id"] for w in world.ledger()[before:]] == [again.candidate_id]


async def test_an_existing_agents_tools_are_declared_from_the_catalogue_and_never_run(
    gw: Gateway, world: World,
) -> None:
    ran: list[str] = []

    @tool
    def add_note(note: str) -> str:
        """Add a note to the case."""
        ran.append(note)
        return "written by the agent itself"

    before = len(world.ledger())
    governed = await GovernedRun.open(tenant=TENANT, actor="user-42", context={"case_id": "case-123"},
                                      capabilities=[NOTE], gateway=gw)
    lockgate = Lockgate(governed)
    model = ScriptedChatClient([ScriptedCall(NOTE, note("Mine."), "call_af_own_1")])
    agent = Agent(client=model, tools=lockgate.govern([add_note], names={"add_note": NOTE}),
                  middleware=lockgate.middleware)
    await agent.run("Add the note.", session=agent.create_session())
    assert ran == [] and json.loads(model.seen[0])["status"] == "executed"
    assert len(world.ledger()) == before + 1


async def test_a_rejected_call_is_the_models_to_read(gw: Gateway, world: World) -> None:
    before = len(world.ledger())
    g = await governed_agent(gw, "case-123", note(""), "call_af_bad_1")
    response = await g.run()
    (seen,) = g.seen()
    assert seen["status"] == "rejected" and seen["code"] == "argument.note.empty" and seen["field"] == "note"
    assert not response.user_input_requests  # a refusal is a tool result, not a failed run
    assert len(world.ledger()) == before


async def test_the_model_s_own_argument_text_is_what_lockgate_judges(gw: Gateway, world: World) -> None:
    """The framework parses a duplicate key away; Lockgate sees the text the model sent."""
    before = len(world.ledger())
    sent = '{"note": "harmless", "note": "what runs"}'
    g = await governed_agent(gw, "case-123", sent, "call_af_dup_1")
    await g.run()
    (seen,) = g.seen()
    assert seen["status"] == "rejected"  # parsed, it would have been a valid note that runs
    assert g.proposed == [(NOTE, sent, "call_af_dup_1")]
    assert len(world.ledger()) == before


async def test_a_streamed_run_proposes_the_models_text_too(gw: Gateway, world: World) -> None:
    before = len(world.ledger())
    g = await governed_agent(gw, "case-123", note("Streamed."), "call_af_stream_1")
    stream = g.agent.run("Add the note.", session=g.session, stream=True)
    async for _ in stream:
        pass
    await stream.get_final_response()
    (seen,) = g.seen()
    assert seen["status"] == "executed"
    assert g.proposed == [(NOTE, note("Streamed."), "call_af_stream_1")]
    assert len(world.ledger()) == before + 1


async def test_a_denied_call_never_shows_the_internal_reason(gw: Gateway, world: World) -> None:
    before = len(world.ledger())
    g = await governed_agent(gw, "case-closed", note("Reopen it."), "call_af_denied_1")
    await g.run()
    (seen,) = g.seen()
    assert seen["status"] == "unavailable"
    assert "case.closed" not in g.model.seen[0]
    assert len(world.ledger()) == before


async def test_a_review_pauses_the_agent_and_an_approval_resumes_it_once(
    system: System, gw: Gateway, world: World,
) -> None:
    before = len(world.ledger())
    g = await governed_agent(gw, "case-sensitive", note("Refund agreed."), "call_af_review_1",
                             resume_wait_s=0)
    response = await g.run()
    candidate = paused_on(response)
    assert g.model.seen == [] and len(world.ledger()) == before  # paused: nothing ran, nothing read
    assert [w.candidate_id for w in g.lockgate.waiting(g.session)] == [candidate]

    # Resumed before anybody decided: Lockgate still waits, so the agent pauses again.
    early = await g.run(g.lockgate.resume(g.session))
    assert paused_on(early) == candidate and g.model.seen == []

    await review(system, "approve", candidate)
    g.lockgate.resume_wait_s = 20
    done = await g.run(g.lockgate.resume(g.session))
    assert not done.user_input_requests and g.lockgate.waiting(g.session) == []
    (seen,) = g.seen()
    assert seen["status"] == "executed"
    assert [w["intent_id"] for w in world.ledger()[before:]] == [candidate]
    # Proposed, resumed early, resumed: one call, the same id and bytes each time.
    assert g.proposed == [(NOTE, note("Refund agreed."), "call_af_review_1")] * 3


async def test_a_denied_review_is_what_the_resumed_model_reads(
    system: System, gw: Gateway, world: World,
) -> None:
    before = len(world.ledger())
    g = await governed_agent(gw, "case-sensitive", note("Close everything."), "call_af_review_2",
                             resume_wait_s=20)
    candidate = paused_on(await g.run())
    await review(system, "deny", candidate)
    # The host's answer is the framework's "approved": it authorizes nothing.
    await g.run(g.lockgate.resume(g.session))
    (seen,) = g.seen()
    assert seen["status"] == "unavailable"
    assert g.proposed == [(NOTE, note("Close everything."), "call_af_review_2")] * 2
    assert len(world.ledger()) == before


async def test_the_hosts_no_only_asks_lockgate(system: System, gw: Gateway, world: World) -> None:
    """A reviewer approved; the host answers the framework's pause with "no": the model is told
    what happened (it ran), not the framework's "rejected by user"."""
    before = len(world.ledger())
    g = await governed_agent(gw, "case-sensitive", note("Escalated."), "call_af_review_3",
                             resume_wait_s=20)
    response = await g.run()
    candidate = paused_on(response)
    await review(system, "approve", candidate)
    (request,) = response.user_input_requests
    await g.run(Message(role="user", contents=[request.to_function_approval_response(False)]))
    (seen,) = g.seen()
    assert seen["status"] == "executed"
    assert [w["intent_id"] for w in world.ledger()[before:]] == [candidate]


async def test_a_reviewers_edit_is_what_the_model_reads(system: System, gw: Gateway, world: World) -> None:
    before = len(world.ledger())
    g = await governed_agent(gw, "case-sensitive", note("Customer Jane Doe, DOB 1970-01-01."),
                             "call_af_edit_1", resume_wait_s=0)
    candidate = paused_on(await g.run())
    await review(system, "edit", candidate, "--arguments", note("Customer escalated."))
    # The edited call is judged again: the agent pauses on it, the original never runs.
    edited = paused_on(await g.run(g.lockgate.resume(g.session)))
    assert edited != candidate and g.model.seen == []
    await review(system, "approve", edited)
    g.lockgate.resume_wait_s = 20
    await g.run(g.lockgate.resume(g.session))
    (seen,) = g.seen()
    assert seen["status"] == "replaced" and seen["replacement"]["status"] == "executed"
    assert [w["intent_id"] for w in world.ledger()[before:]] == [edited]
    assert world.notes("case-sensitive")[-1] == "Customer escalated."


async def test_a_resume_after_the_run_ended_tells_the_model_it_was_withdrawn(
    system: System, gw: Gateway, world: World,
) -> None:
    before = len(world.ledger())
    g = await governed_agent(gw, "case-sensitive", note("Nobody waits for this."), "call_af_ended_1")
    paused_on(await g.run())
    await g.governed.close(why="the user left")  # the host ends the run: Lockgate withdraws the call
    await g.run(g.lockgate.resume(g.session))
    (seen,) = g.seen()
    assert seen["status"] == "withdrawn"
    assert len(world.ledger()) == before


async def test_two_calls_paused_at_once_beside_a_refused_one(
    system: System, gw: Gateway, world: World,
) -> None:
    before = len(world.ledger())
    governed = await GovernedRun.open(tenant=TENANT, actor="user-42", context={"case_id": "case-sensitive"},
                                      capabilities=[NOTE], gateway=gw)
    g = Governed(governed, [ScriptedCall(NOTE, note("First."), "call_af_two_1"),
                            ScriptedCall(NOTE, note(""), "call_af_two_2"),
                            ScriptedCall(NOTE, note("Second."), "call_af_two_3")], resume_wait_s=20)
    response = await g.run()
    candidates = [str(r.additional_properties[PAUSE_KEY]["candidate_id"]) for r in response.user_input_requests]
    assert len(candidates) == 2 and g.model.seen == []
    for candidate in candidates:
        await review(system, "approve", candidate)
    await g.run(g.lockgate.resume(g.session))
    assert sorted(seen["status"] for seen in g.seen()) == ["executed", "executed", "rejected"]
    assert sorted(w["intent_id"] for w in world.ledger()[before:]) == sorted(candidates)


async def test_a_pause_resumed_twice_is_one_effect(system: System, gw: Gateway, world: World) -> None:
    before = len(world.ledger())
    g = await governed_agent(gw, "case-sensitive", note("Twice resumed."), "call_af_review_4")
    candidate = paused_on(await g.run())
    saved = json.dumps(g.session.to_dict())
    await review(system, "approve", candidate)
    for _ in range(2):  # two hosts resume the same saved pause, each with its own agent
        other = Governed(g.governed, [ScriptedCall(NOTE, note("Twice resumed."), "call_af_review_4")],
                         resume_wait_s=20)
        other.session = AgentSession.from_dict(json.loads(saved))
        await other.run(other.lockgate.resume(other.session))
        (seen,) = other.seen()
        assert seen["status"] == "executed"
        assert other.proposed == [(NOTE, note("Twice resumed."), "call_af_review_4")]
    assert [w["intent_id"] for w in world.ledger()[before:]] == [candidate]


AGENT = textwrap.dedent('''
    import asyncio, json, sys
    from agent_framework import Agent, AgentSession
    from lockgate.integrations import GovernedRun, Outcome
    from lockgate.integrations.agent_framework import Lockgate, ScriptedCall, ScriptedChatClient

    async def main(mode: str, path: str) -> None:
        model = ScriptedChatClient([ScriptedCall("case.add_note", '{"note": "After the crash."}',
                                                 "call_af_crash_1")])
        if mode == "propose":
            governed = await GovernedRun.open(tenant="tenant-a", actor="user-42",
                                              context={"case_id": "case-sensitive"},
                                              capabilities=["case.add_note"])
            lockgate = Lockgate(governed)
            agent = Agent(client=model, tools=lockgate.tools, middleware=lockgate.middleware)
            session = agent.create_session()
            response = await agent.run("Add the note.", session=session)
            (request,) = response.user_input_requests
            with open(path, "w") as saved:
                json.dump(session.to_dict(), saved)
            print(request.additional_properties["lockgate"]["candidate_id"], flush=True)
            await asyncio.sleep(600)  # killed here, between the proposal and its resume
        else:
            with open(path) as saved:
                session = AgentSession.from_dict(json.load(saved))
            lockgate = await Lockgate.attach(session, resume_wait_s=20)
            agent = Agent(client=model, tools=lockgate.tools, middleware=lockgate.middleware)
            response = await agent.run(lockgate.resume(session), session=session)
            await lockgate.governed.close()
            print(json.dumps({"seen": model.seen, "paused": len(response.user_input_requests)}))

    asyncio.run(main(sys.argv[1], sys.argv[2]))
''')


async def test_an_agent_killed_while_paused_is_resumed_by_a_new_process_once(
    system: System, world: World, tmp_path: Path,
) -> None:
    before = len(world.ledger())
    saved = tmp_path / "session.json"
    first = subprocess.Popen([sys.executable, "-c", AGENT, "propose", str(saved)], env=child_env(system),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert first.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(first.stdout.readline), timeout=60)
        candidate = line.strip()
        assert candidate and saved.exists(), first.stderr.read() if first.stderr else ""
    finally:
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
    assert first.returncode == -signal.SIGKILL and len(world.ledger()) == before

    await review(system, "approve", candidate)
    second = await asyncio.to_thread(subprocess.run, [sys.executable, "-c", AGENT, "resume", str(saved)],
                                     env=child_env(system), capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    answer = json.loads(second.stdout.strip().splitlines()[-1])
    assert answer["paused"] == 0 and json.loads(answer["seen"][0])["status"] == "executed"
    assert [w["intent_id"] for w in world.ledger()[before:]] == [candidate]


async def test_the_quickstart_runs_as_written(system: System, world: World, tmp_path: Path) -> None:
    before = len(world.ledger())
    done = await asyncio.to_thread(run_quickstart, system, DOC, tmp_path)
    assert done.returncode == 0, done.stderr
    assert '"status": "executed"' in done.stdout
    assert len(world.ledger()) == before + 1 and world.ledger()[-1]["case_id"] == "case-123"
    assert world.notes("case-123")[-1] == "Customer called back."
