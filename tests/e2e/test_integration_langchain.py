"""A LangChain agent (``create_agent``) whose tools Lockgate decides, against the real system.

The model is LangChain's own fake chat model with scripted tool calls; what it saw is what
the agent fed back to it. Every scenario counts the case-notes world's writes: LangChain
never runs the tool itself, a review is a LangGraph interrupt, a resume (in this process or
a new one, after the first was killed) is the same call and never a second effect.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatResult
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from pydantic import Field

from lockgate.client.sdk import Gateway
from lockgate.integrations import GovernedRun
from lockgate.integrations.langchain import LockgateMiddleware
from lockgate.testing.frameworks import child_env, lockgate_command, run_quickstart
from lockgate.testing.system import System
from lockgate.worlds.casenotes.world import World

NOTE = "case.add_note"
OFFERED = "case__add_note"
TENANT = "tenant-a"
ROOT = Path(__file__).resolve().parents[2]
LOCKGATE = Path(sys.executable).with_name("lockgate")


class ScriptedModel(GenericFakeChatModel):
    """LangChain's fake chat model, able to take tools, keeping what it was offered and shown."""

    offered: list[list[str]] = Field(default_factory=list)
    seen: list[list[BaseMessage]] = Field(default_factory=list)

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedModel:
        self.offered.append([t.name for t in tools])
        return self

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: Any = None, **kwargs: Any) -> ChatResult:
        self.seen.append(list(messages))
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)

    def tool_results(self) -> list[ToolMessage]:
        """The tool results the model was shown, in the order it saw them first."""
        results: dict[str, ToolMessage] = {}
        for messages in self.seen:
            for m in messages:
                if isinstance(m, ToolMessage):
                    results.setdefault(m.tool_call_id, m)
        return list(results.values())


def add_note(text: str, call_id: str) -> AIMessage:
    return AIMessage(content="", tool_calls=[
        {"name": OFFERED, "args": {"note": text}, "id": call_id, "type": "tool_call"}])


def scripted(*steps: AIMessage) -> ScriptedModel:
    return ScriptedModel(messages=iter([*steps, AIMessage(content="Done.")]))


async def governed(gw: Gateway, case: str) -> GovernedRun:
    return await GovernedRun.open(tenant=TENANT, actor="user-42", context={"case_id": case},
                                  capabilities=[NOTE], gateway=gw)


class Agent:
    """One agent on one LangGraph thread, with a checkpointer so it can pause."""

    def __init__(self, run: GovernedRun, model: ScriptedModel, tools: Sequence[BaseTool] = (),
                 **options: Any) -> None:
        self.model = model
        self.middleware = LockgateMiddleware(run, **options)
        self.graph = create_agent(model, tools=list(tools), middleware=[self.middleware],
                                  checkpointer=InMemorySaver())
        self.config: Any = {"configurable": {"thread_id": run.run_id}}

    async def ask(self, text: str = "Note the call on the case.") -> dict[str, Any]:
        state: dict[str, Any] = await self.graph.ainvoke(
            {"messages": [{"role": "user", "content": text}]}, self.config)
        return state

    async def resume(self, answer: object) -> dict[str, Any]:
        state: dict[str, Any] = await self.graph.ainvoke(Command(resume=answer), self.config)
        return state


def interrupts(state: dict[str, Any]) -> list[dict[str, Any]]:
    return [i.value for i in state.get("__interrupt__", ())]


def content(message: ToolMessage) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(str(message.content))
    return loaded


def cli_review(system: System, verb: str, candidate_id: str) -> None:
    """``lockgate review <verb>`` as alice, the way a reviewer does it."""
    args = [*lockgate_command(), "review", verb, candidate_id, "--tenant", TENANT, "--as", "alice"]
    if verb == "deny":
        args += ["--why", "not on this case"]
    done = subprocess.run(args, env=child_env(system), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


async def written(world: World, before: int, count: int = 1, timeout_s: float = 20.0) -> list[dict[str, str]]:
    """The world's writes since ``before``, once there are ``count`` of them (or the time is up)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while len(world.ledger()) < before + count and loop.time() < deadline:
        await asyncio.sleep(0.05)
    return world.ledger()[before:]


async def test_a_call_is_proposed_and_its_result_is_what_the_model_reads(gw: Gateway, world: World) -> None:
    run = await governed(gw, "case-123")
    agent = Agent(run, scripted(add_note("Called back.", "call_lc_exec")))
    before = len(world.ledger())
    state = await agent.ask()
    assert not interrupts(state)
    assert agent.model.offered[0] == [OFFERED]  # the turn's catalogue, under a provider-safe name
    (shown,) = agent.model.tool_results()
    assert shown.tool_call_id == "call_lc_exec" and shown.status == "success"
    seen = content(shown)
    assert seen["status"] == "executed" and "untrusted_data" in seen["result"]
    # The same call proposed again is the same intent: the bytes were the model's call,
    # serialized deterministically, under the framework's own call id.
    again = await run.propose(NOTE, json.dumps({"note": "Called back."}), call_id="call_lc_exec")
    assert again.executed
    assert [w["intent_id"] for w in world.ledger()[before:]] == [again.candidate_id]


async def test_the_models_raw_argument_text_is_what_is_proposed(gw: Gateway, world: World) -> None:
    raw = '{ "note" : "Raw text." }'
    call = AIMessage(content="", tool_calls=[
        {"name": OFFERED, "args": {"note": "Raw text."}, "id": "call_lc_raw", "type": "tool_call"}],
        additional_kwargs={"tool_calls": [{"id": "call_lc_raw", "type": "function",
                                           "function": {"name": OFFERED, "arguments": raw}}]})
    run = await governed(gw, "case-123")
    before = len(world.ledger())
    await Agent(run, scripted(call)).ask()
    again = await run.propose(NOTE, raw, call_id="call_lc_raw")  # the provider's bytes: same intent
    assert again.executed
    other = await run.propose(NOTE, json.dumps({"note": "Raw text."}), call_id="call_lc_raw")
    assert other.refused  # other bytes under the same call id are not that call
    assert [w["intent_id"] for w in world.ledger()[before:]] == [again.candidate_id]


async def test_an_agents_own_tools_are_governed_by_name_and_the_rest_is_closed(
    gw: Gateway, world: World,
) -> None:
    ran: list[str] = []

    @tool
    def add_note(note: str) -> str:
        """Add a note to the case."""
        ran.append("add_note")
        return "noted without Lockgate"

    @tool
    def lookup(case_id: str) -> str:
        """Look a case up (reads only)."""
        ran.append("lookup")
        return "open"

    @tool
    def delete_case(case_id: str) -> str:
        """Delete a case."""
        ran.append("delete_case")
        return "deleted without Lockgate"

    calls = AIMessage(content="", tool_calls=[
        {"name": "lookup", "args": {"case_id": "case-123"}, "id": "call_lc_look", "type": "tool_call"},
        {"name": "add_note", "args": {"note": "Own tool."}, "id": "call_lc_own", "type": "tool_call"},
        {"name": "delete_case", "args": {"case_id": "case-123"}, "id": "call_lc_del", "type": "tool_call"},
    ])
    run = await governed(gw, "case-123")
    agent = Agent(run, scripted(calls), tools=[add_note, lookup, delete_case],
                  names={"add_note": NOTE}, ungoverned=["lookup"])
    before = len(world.ledger())
    await agent.ask()
    # Offered: the ungoverned tool, and the catalogue's entry under the agent's own name.
    assert sorted(agent.model.offered[0]) == ["add_note", "lookup"]
    assert ran == ["lookup"]  # neither governed function ran in LangChain
    shown = {m.tool_call_id: m for m in agent.model.tool_results()}
    assert shown["call_lc_look"].content == "open"
    assert content(shown["call_lc_own"])["status"] == "executed"
    assert shown["call_lc_del"].status == "error"  # not offered: Lockgate refuses it
    assert content(shown["call_lc_del"])["status"] == "rejected"
    assert len(world.ledger()[before:]) == 1


async def test_a_rejected_call_is_the_models_to_read_and_the_run_goes_on(gw: Gateway, world: World) -> None:
    run = await governed(gw, "case-123")
    agent = Agent(run, scripted(add_note("", "call_lc_empty")))
    before = len(world.ledger())
    state = await agent.ask()
    (shown,) = agent.model.tool_results()
    assert shown.status == "error" and content(shown)["code"] == "argument.note.empty"
    assert state["messages"][-1].content == "Done."  # the model read it and answered
    assert world.ledger()[before:] == []


async def test_a_denied_call_never_shows_the_internal_reason(gw: Gateway, world: World) -> None:
    run = await governed(gw, "case-closed")
    agent = Agent(run, scripted(add_note("Reopen it.", "call_lc_denied")))
    before = len(world.ledger())
    await agent.ask()
    (shown,) = agent.model.tool_results()
    assert shown.status == "error" and content(shown)["status"] == "unavailable"
    assert "case.closed" not in str(shown.content)
    assert world.ledger()[before:] == []


async def test_a_review_pauses_the_agent_and_only_lockgates_approval_runs_it(
    system: System, gw: Gateway, world: World,
) -> None:
    run = await governed(gw, "case-sensitive")
    agent = Agent(run, scripted(add_note("Refund agreed.", "call_lc_review")), wait_s=1.0)
    before = len(world.ledger())
    (waiting,) = interrupts(await agent.ask())
    assert waiting["type"] == "tool_approval" and waiting["tool_call_id"] == "call_lc_review"
    assert waiting["status"] == "pending_approval" and waiting["args"] == {"note": "Refund agreed."}
    assert agent.model.tool_results() == []
    # The host's "approve" and "edit" authorize and change nothing: the agent asks Lockgate
    # again and pauses again on the same candidate.
    (still,) = interrupts(await agent.resume({"type": "approve"}))
    edit = {"type": "edit", "edited_action": {"name": OFFERED, "args": {"note": "Refund all."}}}
    (again,) = interrupts(await agent.resume(edit))
    assert still["candidate_id"] == again["candidate_id"] == waiting["candidate_id"]
    assert world.ledger()[before:] == []

    cli_review(system, "approve", waiting["candidate_id"])
    assert [w["intent_id"] for w in await written(world, before)] == [waiting["candidate_id"]]
    state = await agent.resume({"type": "approve"})
    assert not interrupts(state)
    (shown,) = agent.model.tool_results()
    assert shown.tool_call_id == "call_lc_review" and content(shown)["status"] == "executed"
    # Resumed twice: the run is over, and nothing runs again.
    await agent.resume({"type": "approve"})
    assert [w["intent_id"] for w in world.ledger()[before:]] == [waiting["candidate_id"]]


def test_a_synchronous_agent_runs_on_a_run_with_a_loop_of_its_own(system: System, world: World) -> None:
    """``invoke`` (LangChain's synchronous path): executed, paused, resumed once, as with ``ainvoke``."""
    async def opening() -> GovernedRun:
        gateway = await system.gateway(TENANT)  # on the run's own loop, as open() connects
        opened = await GovernedRun.open(tenant=TENANT, actor="user-42", gateway=gateway,
                                        context={"case_id": "case-sensitive"}, capabilities=[NOTE])
        opened.owned = gateway  # closed with the run
        return opened

    run = GovernedRun.in_thread(opening)
    try:
        agent = Agent(run, scripted(add_note("Called back, in sync.", "call_lc_sync")), wait_s=1.0)
        before = len(world.ledger())
        state = agent.graph.invoke({"messages": [{"role": "user", "content": "Note it."}]}, agent.config)
        (waiting,) = interrupts(state)
        assert waiting["tool_call_id"] == "call_lc_sync" and world.ledger()[before:] == []
        cli_review(system, "approve", waiting["candidate_id"])
        state = agent.graph.invoke(Command(resume={"type": "approve"}), agent.config)
        assert not interrupts(state)
        (shown,) = agent.model.tool_results()
        assert content(shown)["status"] == "executed"
        agent.graph.invoke(Command(resume={"type": "approve"}), agent.config)  # once more: nothing new
        assert [w["intent_id"] for w in world.ledger()[before:]] == [waiting["candidate_id"]]
    finally:
        run.call(run.close())
        run.stop()


async def test_a_synchronous_call_from_the_runs_own_loop_is_refused(gw: Gateway) -> None:
    run = await governed(gw, "case-123")
    try:
        run.call(run.new_turn())
    except RuntimeError as exc:
        assert "GovernedRun.in_thread" in str(exc)
    else:
        raise AssertionError("a blocking call on the run's own loop would wait forever")


async def test_two_calls_waiting_at_once_are_two_pauses_answered_each_by_lockgate(
    system: System, gw: Gateway, world: World,
) -> None:
    calls = AIMessage(content="", tool_calls=[
        {"name": OFFERED, "args": {"note": "First."}, "id": "call_lc_two_a", "type": "tool_call"},
        {"name": OFFERED, "args": {"note": "Second."}, "id": "call_lc_two_b", "type": "tool_call"},
    ])
    run = await governed(gw, "case-sensitive")
    agent = Agent(run, scripted(calls))
    before = len(world.ledger())
    state = await agent.ask()
    paused = {i.value["tool_call_id"]: i for i in state["__interrupt__"]}
    assert sorted(paused) == ["call_lc_two_a", "call_lc_two_b"]
    cli_review(system, "approve", paused["call_lc_two_a"].value["candidate_id"])
    cli_review(system, "deny", paused["call_lc_two_b"].value["candidate_id"])
    await written(world, before)
    state = await agent.resume({i.id: {"type": "approve"} for i in paused.values()})
    assert not interrupts(state)
    shown = {m.tool_call_id: content(m)["status"] for m in agent.model.tool_results()}
    assert shown == {"call_lc_two_a": "executed", "call_lc_two_b": "unavailable"}
    assert [w["intent_id"] for w in world.ledger()[before:]] == [
        paused["call_lc_two_a"].value["candidate_id"]]


async def test_a_denied_review_is_what_the_resume_tells_the_model(
    system: System, gw: Gateway, world: World,
) -> None:
    run = await governed(gw, "case-sensitive")
    agent = Agent(run, scripted(add_note("Close everything.", "call_lc_deny")))
    before = len(world.ledger())
    (waiting,) = interrupts(await agent.ask())
    cli_review(system, "deny", waiting["candidate_id"])
    state = await agent.resume({"type": "approve"})  # the host's approval is no approval
    assert not interrupts(state)
    (shown,) = agent.model.tool_results()
    assert shown.status == "error" and content(shown)["status"] == "unavailable"
    assert world.ledger()[before:] == []


async def test_the_hosts_reject_withdraws_the_waiting_call(
    system: System, gw: Gateway, world: World,
) -> None:
    run = await governed(gw, "case-sensitive")
    agent = Agent(run, scripted(add_note("Never mind.", "call_lc_reject")))
    before = len(world.ledger())
    (waiting,) = interrupts(await agent.ask())
    await agent.resume({"type": "reject", "message": "not needed"})
    (shown,) = agent.model.tool_results()
    assert shown.status == "error" and content(shown)["status"] == "withdrawn"
    after = await gw.run(tenant=TENANT, run_id=run.run_id).wait(
        waiting["candidate_id"], past="", timeout_s=5)
    assert after.status == "withdrawn"
    assert world.ledger()[before:] == []


async def test_a_reviewers_edit_is_what_the_model_is_told(
    system: System, gw: Gateway, reviewer: Gateway, world: World,
) -> None:
    run = await governed(gw, "case-sensitive")
    agent = Agent(run, scripted(add_note("Jane Doe, DOB 1970-01-01, escalated.", "call_lc_edit")),
                  wait_s=1.0)
    before = len(world.ledger())
    (waiting,) = interrupts(await agent.ask())
    shown_to_reviewer = await reviewer.show_review(tenant=TENANT, candidate_id=waiting["candidate_id"])
    edited = await reviewer.edit_review(
        tenant=TENANT, candidate_id=waiting["candidate_id"], review_id=shown_to_reviewer.review_id,
        digest=shown_to_reviewer.digest, arguments=json.dumps({"note": "Escalated."}),
        reason="no personal data")
    # The edited call waits for its own approval: the agent pauses on it.
    (replacing,) = interrupts(await agent.resume({"type": "approve"}))
    assert replacing["candidate_id"] == edited.candidate_id
    assert replacing["replaces"] == waiting["candidate_id"]
    cli_review(system, "approve", edited.candidate_id)
    assert [w["intent_id"] for w in await written(world, before)] == [edited.candidate_id]
    await agent.resume({"type": "approve"})
    (shown,) = agent.model.tool_results()
    seen = content(shown)
    assert seen["status"] == "replaced" and seen["replacement"]["status"] == "executed"
    assert shown.status == "success"
    assert [w["intent_id"] for w in world.ledger()[before:]] == [edited.candidate_id]


CHILD = textwrap.dedent('''
    """An agent process: phase "pause" proposes and waits to be killed; "resume" takes it up."""
    import asyncio, json, pickle, sys
    from collections import defaultdict
    from pathlib import Path

    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, ToolMessage
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command

    from lockgate.client.sdk import connect
    from lockgate.integrations import GovernedRun
    from lockgate.integrations.langchain import LockgateMiddleware

    phase, root, url, state_file = sys.argv[1], Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4])

    class Model(GenericFakeChatModel):
        def bind_tools(self, tools, **kwargs):
            return self

    def save(saver):
        """The checkpointer's own state, as LangGraph wrote it, to a file."""
        data = ({k: dict(v) for k, v in saver.storage.items()}, dict(saver.writes), dict(saver.blobs))
        state_file.write_bytes(pickle.dumps(data))

    def load():
        saver = InMemorySaver()
        storage, writes, blobs = pickle.loads(state_file.read_bytes())
        for thread, namespaces in storage.items():
            saver.storage[thread].update(namespaces)
        saver.writes.update(writes)
        saver.blobs.update(blobs)
        return saver

    async def main():
        creds = root / "credentials"
        gw = await connect(url, credentials=creds / "agent-tenant-a.json", host=creds / "host.json")
        done = AIMessage(content="Done.")
        if phase == "pause":
            run = await GovernedRun.open(tenant="tenant-a", actor="user-42",
                                         context={"case_id": "case-sensitive"},
                                         capabilities=["case.add_note"], gateway=gw)
            call = {"name": "case__add_note", "args": {"note": "Crash-proof note."},
                    "id": "call_lc_crash", "type": "tool_call"}
            model, saver = Model(messages=iter([AIMessage(content="", tool_calls=[call]), done])), InMemorySaver()
        else:
            run = await GovernedRun.attach(tenant="tenant-a", run_id=sys.argv[5], gateway=gw)
            model, saver = Model(messages=iter([done])), load()
        agent = create_agent(model, middleware=[LockgateMiddleware(run)], checkpointer=saver)
        config = {"configurable": {"thread_id": "crash-thread"}}
        if phase == "pause":
            state = await agent.ainvoke({"messages": [{"role": "user", "content": "Note it."}]}, config)
            (waiting,) = state["__interrupt__"]
            save(saver)
            print(json.dumps({"run_id": run.run_id, "candidate_id": waiting.value["candidate_id"]}),
                  flush=True)
            await asyncio.sleep(3600)  # killed here, between propose and resume
        state = await agent.ainvoke(Command(resume={"type": "approve"}), config)
        shown = [m for m in state["messages"] if isinstance(m, ToolMessage)]
        print(json.dumps({"interrupted": "__interrupt__" in state,
                          "shown": [[m.tool_call_id, json.loads(m.content)] for m in shown]}), flush=True)
        await gw.close()

    asyncio.run(main())
''')


async def test_a_killed_agent_is_resumed_from_its_checkpoint_in_a_new_process(
    system: System, world: World, tmp_path: Path,
) -> None:
    script, state_file = tmp_path / "agent.py", tmp_path / "checkpoint.pickle"
    script.write_text(CHILD)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKGATE_")}
    args = [str(system.root), system.url, str(state_file)]
    before = len(world.ledger())
    first = subprocess.Popen([sys.executable, str(script), "pause", *args], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = await asyncio.wait_for(asyncio.to_thread(first.stdout.readline), 120)  # type: ignore[union-attr]
        assert line, first.stderr.read()  # type: ignore[union-attr]
        paused = json.loads(line)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    assert first.returncode == -signal.SIGKILL
    assert world.ledger()[before:] == []

    cli_review(system, "approve", paused["candidate_id"])
    second = await asyncio.to_thread(
        subprocess.run, [sys.executable, str(script), "resume", *args, paused["run_id"]],
        env=env, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    resumed = json.loads(second.stdout.splitlines()[-1])
    assert not resumed["interrupted"]
    ((call_id, seen),) = resumed["shown"]
    assert call_id == "call_lc_crash" and seen["status"] == "executed"
    assert [w["intent_id"] for w in await written(world, before)] == [paused["candidate_id"]]


async def test_the_quickstart_runs_as_written(system: System, world: World, tmp_path: Path) -> None:
    before = len(world.ledger())
    done = await asyncio.to_thread(run_quickstart, system, ROOT / "docs" / "frameworks" / "langchain.md",
                                   tmp_path)
    assert done.returncode == 0, done.stderr
    assert '"status": "executed"' in done.stdout
    writes = await written(world, before)
    assert len(writes) == 1 and writes[0]["case_id"] == "case-123"


def test_the_core_install_does_not_import_langchain() -> None:
    code = ("import sys, lockgate.integrations; "
            "assert 'langchain' not in sys.modules and 'langgraph' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
