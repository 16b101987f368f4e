"""CrewAI agents whose tools Lockgate decides (``pip install "lockgate[crewai]"``).

The agent is offered the run's catalogue as CrewAI tools; calling one proposes the call to
Lockgate and hands the model Lockgate's answer. CrewAI never runs a governed effect::

    from lockgate.integrations import GovernedRun
    from lockgate.integrations.crewai import Lockgate

    governed = await GovernedRun.open(tenant="tenant-a", actor="user-42",
                                      context={"case_id": "case-123"}, capabilities=["case.add_note"])
    lockgate = Lockgate(governed)                     # the catalogue as tools, and the guard hook
    agent = Agent(role="notes", goal="Keep the case notes.", backstory="...", llm=llm,
                  tools=lockgate.tools)
    result = await crew.kickoff_async()               # a crew of that agent and its task
    while lockgate.waiting:                           # a reviewer must decide: the crew paused
        await lockgate.resume(wait_s=300)             # asks Lockgate; authorizes nothing
        result = await crew.kickoff_async()           # the same calls again, their answers now
    await lockgate.close()

How it plugs in (crewai 1.15): each catalogue entry is a ``BaseTool`` whose ``_run``
proposes to Lockgate and returns ``Outcome.text()`` (the schema the model sees is the
catalogue's JSON Schema as it is); a ``before_tool_call`` hook (``register_before_tool_call_hook``)
is the guard: it hands each call's task, agent and step to the tool, and blocks a tool of a
governed capability's name that is not Lockgate's. The hook alone could not carry Lockgate's
answer: a blocked call's message is CrewAI's own fixed text ("Tool execution blocked by
hook"), so the tools carry it. Tools run in the crew's worker thread (``kickoff_async``) and
ask Lockgate on the host's event loop.

Call ids: CrewAI hands a tool neither a tool-call id (where a provider gives none, it makes
one up from an object's address) nor the model's argument text. A call's id is derived
(``call_id_for_step``) from the task (``Task.key``), the agent (``BaseAgent.key``), the step
(the executor's iteration), the capability and the arguments as proposed: compact JSON of
what CrewAI parsed, in the model's key order (``proposed_arguments``). A step CrewAI runs
again is the same call; two different calls are not. Every call is recorded (``calls``,
``state()``), and a resumed kickoff answers a call that matches a recorded one (same task,
agent, capability and arguments, in order) under the recorded id, whatever step the model
makes it at: never a second effect.

What CrewAI's approval flow could not express, and how it is handled:

- Its approvals are a person's free text: ``Task(human_input=True)`` and the hook's
  ``request_human_input`` read the console, and a flow's ``@human_feedback`` takes whatever
  string ``resume(feedback)`` is handed (its outcomes collapsed from that text by an LLM).
  Nothing authenticates who answered, nor binds the answer to the exact bytes of a call.
  Here none of them authorizes anything: a call waits in Lockgate for a reviewer's
  decision on its bytes, and ``resume`` only asks Lockgate what became of it.
- A before-tool hook can only block, with a fixed message; it cannot pause a crew. The
  pause is the model's: a waiting call's answer says a reviewer decides and the agent will
  be resumed, the crew's kickoff ends, and ``waiting`` names the candidates. The resume is
  a new kickoff (CrewAI has no mid-task resume), which proposes the same calls again.
- Persisting the pause is the host's, with CrewAI's own state: ``state()`` is plain JSON to
  keep in a ``@persist`` flow's state, and ``Lockgate.attach(state)`` takes it up in a new
  process.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections import deque
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from crewai.hooks import (
    ToolCallHookContext,
    register_before_tool_call_hook,
    unregister_before_tool_call_hook,
)
from crewai.llms.base_llm import BaseLLM
from crewai.tools import BaseTool
from crewai.utilities.string_utils import sanitize_tool_name
from pydantic import BaseModel, ConfigDict, PrivateAttr

from lockgate.client.providers.calls import provider_tool_name
from lockgate.client.sdk import Gateway
from lockgate.contracts.messages import Tool
from lockgate.integrations.governed import GovernedRun, Outcome

__all__ = ["Call", "GovernedTool", "Lockgate", "ScriptedLLM", "call_id_for_step", "proposed_arguments"]

T = TypeVar("T")
#: The statuses of a recorded call a resume asks about again.
_WAITING = frozenset({"pending_approval", "paused"})


@dataclass(frozen=True)
class Call:
    """One governed call as the crew made it, and Lockgate's latest answer to it."""

    task: str
    agent: str
    step: int
    tool: str
    arguments: str
    call_id: str
    candidate_id: str = ""
    status: str = ""

    @property
    def pending(self) -> bool:
        """True while a reviewer (or policy's evidence) has yet to decide."""
        return self.status in _WAITING


@dataclass(frozen=True)
class _Step:
    """What the guard hook learned of the call about to run, for the tool it hands it to."""

    tool: str
    arguments: dict[str, Any]
    task: str
    agent: str
    step: int


def proposed_arguments(arguments: Mapping[str, Any]) -> str:
    """The argument text proposed for a call CrewAI parsed into ``arguments``.

    CrewAI keeps no model's text for a tool: it parses it and passes keywords. Every
    proposal of a call is this one serialization (compact JSON, the model's key order,
    non-ASCII kept), so the same call is the same bytes in any kickoff and any process.
    """
    return json.dumps(dict(arguments), ensure_ascii=False, separators=(",", ":"))


def call_id_for_step(task: str, agent: str, step: int, tool: str, arguments: str) -> str:
    """A stable Lockgate call id for a call CrewAI gives no id of its own.

    Derived from the task's key, the agent's key, the step (the executor's iteration), the
    capability and the proposed argument text: the same step run again is the same call;
    any difference is another call.
    """
    source = json.dumps([task, agent, step, tool, arguments], ensure_ascii=False, separators=(",", ":"))
    return "crewai-" + hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()[:40]


class _CatalogueSchema(BaseModel):
    """Arguments CrewAI passes through unvalidated: Lockgate's intake judges them."""

    model_config = ConfigDict(extra="allow")
    #: The catalogue entry's JSON Schema, what the model is offered (set per tool).
    catalogue: ClassVar[dict[str, Any]] = {}

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        copy: dict[str, Any] = json.loads(json.dumps(cls.catalogue))  # CrewAI edits what it is given
        return copy


def _schema_for(tool: Tool) -> type[BaseModel]:
    """A fieldless model (so CrewAI validates nothing) whose JSON Schema is the catalogue's."""
    name = "".join(part.title() for part in sanitize_tool_name(tool.name).split("_")) + "Arguments"
    return type(name, (_CatalogueSchema,), {"catalogue": dict(tool.parameters), "__module__": __name__})


def _never_cache(_arguments: Any = None, _result: Any = None) -> bool:
    # A waiting call's answer changes: CrewAI's tool cache must never answer for Lockgate.
    return False


class GovernedTool(BaseTool):
    """A catalogue entry as a CrewAI tool: proposing the call is all it does."""

    capability: str
    _lockgate: Lockgate | None = PrivateAttr(default=None)

    def _run(self, **arguments: Any) -> str:
        if self._lockgate is None:
            raise RuntimeError(f"{self.capability} runs only through Lockgate")
        return self._lockgate.answer(self, arguments)


class Lockgate:
    """A governed run's tools for CrewAI agents, the guard hook, and the host's pause.

    Construct it on the host's event loop (the one ``GovernedRun.open`` ran on) and run the
    crew with ``kickoff_async``: the tools ask Lockgate on that loop from the crew's thread.

    Args:
        governed: the run, opened by the trusted host (tenant, actor, context, capabilities).
        wait_s: how long a new call waiting for a reviewer is waited for before the model is
            told it waits.
        calls: the calls a paused crew recorded (``state()["calls"]``), for a resume.

    Raises:
        ValueError: two offered capabilities would be offered under one tool name.
    """

    def __init__(self, governed: GovernedRun, *, wait_s: float = 0.0,
                 calls: Sequence[Call] = ()) -> None:
        self.governed = governed
        self.wait_s = wait_s
        self._loop = asyncio.get_running_loop()
        self._lock = threading.Lock()
        self._steps = threading.local()
        self._calls: list[Call] = list(calls)
        self._replay: dict[tuple[str, str, str, str], deque[str]] = {}
        self._arm_replay()
        self._names: dict[str, str] = {}
        for entry in governed.tools:
            offered = sanitize_tool_name(provider_tool_name(entry.name))
            if self._names.setdefault(offered, entry.name) != entry.name:
                raise ValueError(f"{entry.name} and {self._names[offered]} are both offered as {offered}")
        self.tools: list[BaseTool] = [self._tool(offered, self.governed.tool(name))
                                      for offered, name in self._names.items()]
        register_before_tool_call_hook(self._guard)

    @classmethod
    async def attach(cls, state: Mapping[str, Any], *, gateway: Gateway | None = None,
                     credentials: str | Path | None = None, var_dir: Path | None = None,
                     wait_s: float = 0.0) -> Lockgate:
        """Take up a paused crew's run in a new process, from what ``state()`` returned."""
        governed = await GovernedRun.attach(tenant=str(state["tenant"]), run_id=str(state["run_id"]),
                                            gateway=gateway, credentials=credentials, var_dir=var_dir)
        calls = [Call(**call) for call in state.get("calls", ())]
        return cls(governed, wait_s=wait_s, calls=calls)

    @property
    def calls(self) -> list[Call]:
        """Every governed call the crew made in this run, with Lockgate's latest answer."""
        with self._lock:
            return list(self._calls)

    @property
    def waiting(self) -> list[Call]:
        """The calls that wait for a reviewer: while there are any, the crew is paused."""
        return [call for call in self.calls if call.pending]

    def state(self) -> dict[str, Any]:
        """What a paused crew needs to be resumed in another process: plain JSON."""
        return {"tenant": self.governed.tenant, "run_id": self.governed.run_id,
                "calls": [asdict(call) for call in self.calls]}

    async def resume(self, *, wait_s: float = 0.0) -> list[Outcome]:
        """Ask Lockgate about each waiting call (its exact bytes, its call id), for up to ``wait_s``.

        Then the next kickoff answers each call the model makes again under its recorded
        id. The answer only tells what a reviewer decided: this authorizes nothing.

        Returns:
            The outcome of each call that was waiting (``pending``: still waiting).
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s  # one wait for them all, not one each
        outcomes = []
        for call in self.waiting:
            outcome = await self.governed.resume(call.tool, call.arguments, call_id=call.call_id,
                                                 wait_s=max(0.0, deadline - loop.time()))
            self._record(replace(call, candidate_id=outcome.candidate_id, status=outcome.final.status))
            outcomes.append(outcome)
        self._arm_replay()
        return outcomes

    async def close(self, *, why: str = "the crew's run ended") -> None:
        """Remove the guard hook and end the run (withdrawing what it left waiting)."""
        unregister_before_tool_call_hook(self._guard)
        await self.governed.close(why=why)

    async def detach(self) -> None:
        """Remove the guard hook and leave the run as it is, for a resume elsewhere."""
        unregister_before_tool_call_hook(self._guard)
        await self.governed.detach()

    def answer(self, tool: GovernedTool, arguments: dict[str, Any]) -> str:
        """Propose one call the crew makes (in its worker thread); the model's answer.

        Raises:
            RuntimeError: the call did not pass the guard hook (Lockgate was closed, or the
                tool was called outside a crew), or it runs on the host's own event loop.
        """
        step = getattr(self._steps, "step", None)
        self._steps.step = None
        if not isinstance(step, _Step) or step.tool != tool.name or step.arguments != arguments:
            raise RuntimeError(f"{tool.capability} runs only in a crew, through Lockgate's hook")
        text = proposed_arguments(arguments)
        call_id = self._call_id(step, tool.capability, text)
        outcome = self._on_host(self.governed.propose(tool.capability, text, call_id=call_id,
                                                      wait_s=self.wait_s))
        self._record(Call(task=step.task, agent=step.agent, step=step.step, tool=tool.capability,
                          arguments=text, call_id=call_id, candidate_id=outcome.candidate_id,
                          status=outcome.final.status))
        return outcome.text()

    def _guard(self, context: ToolCallHookContext) -> bool | None:
        """CrewAI's before-tool hook: hands our tool its step; blocks an impostor of ours.

        A tool of another ``Lockgate`` (another run in this process) is left to that one's
        guard; a tool under a governed capability's name that is none of Lockgate's is
        blocked, so it never runs an effect Lockgate did not decide.
        """
        tool = context.tool
        original = tool if isinstance(tool, GovernedTool) else getattr(tool, "_original_tool", None)
        if isinstance(original, GovernedTool):
            if original._lockgate is self:
                executor = getattr(context.agent, "agent_executor", None)
                self._steps.step = _Step(
                    tool=original.name, arguments=dict(context.tool_input),
                    task=str(getattr(context.task, "key", "")),
                    agent=str(getattr(context.agent, "key", "")),
                    step=int(getattr(executor, "iterations", 0) or 0))
            return None
        if sanitize_tool_name(context.tool_name) in self._names:
            return False
        return None

    def _call_id(self, step: _Step, tool: str, arguments: str) -> str:
        """The recorded id of a call made again after a resume, else the step's derived id."""
        with self._lock:
            replayed = self._replay.get((step.task, step.agent, tool, arguments))
            if replayed:
                return replayed.popleft()
        return call_id_for_step(step.task, step.agent, step.step, tool, arguments)

    def _arm_replay(self) -> None:
        with self._lock:
            self._replay = {}
            for call in self._calls:
                key = (call.task, call.agent, call.tool, call.arguments)
                self._replay.setdefault(key, deque()).append(call.call_id)

    def _record(self, call: Call) -> None:
        with self._lock:
            for index, known in enumerate(self._calls):
                if known.call_id == call.call_id:
                    self._calls[index] = replace(call, task=known.task, agent=known.agent, step=known.step)
                    return
            self._calls.append(call)

    def _on_host(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the host's loop, where the run's connection lives."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            coroutine.close()
            raise RuntimeError("run the crew with kickoff_async: its tools wait on the host's event loop")
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def _tool(self, offered: str, entry: Tool | None) -> GovernedTool:
        if entry is None:  # the names came from this turn's catalogue
            raise LookupError(offered)
        tool = GovernedTool(name=offered, description=entry.description, capability=entry.name,
                            args_schema=_schema_for(entry), cache_function=_never_cache)
        tool._lockgate = self
        return tool


class ScriptedLLM(BaseLLM):
    """A model for trying and testing without one (no network): it calls tools, then answers.

    Its first step calls ``calls`` (capability, argument text) through native function
    calling; ``steps``, when given, are one such list per step instead. With
    ``native=False`` it writes ReAct text instead (``Action:`` / ``Action Input:``), one
    call a step. Once CrewAI fed the last step's results back, it answers ``reply``.
    ``seen`` holds the tool results it read, ``offered`` the tools of its last request.
    Swap it for a real ``crewai.LLM``.
    """

    calls: list[tuple[str, str]] = []
    steps: list[list[tuple[str, str]]] = []
    native: bool = True
    reply: str = "Done."
    seen: list[str] = []
    offered: list[dict[str, Any]] = []

    def supports_function_calling(self) -> bool:
        return self.native

    def call(self, messages: str | list[Any], tools: list[dict[str, Any]] | None = None,
             callbacks: list[Any] | None = None, available_functions: dict[str, Any] | None = None,
             from_task: Any = None, from_agent: Any = None, response_model: Any = None,
             **kwargs: Any) -> str | Any:
        """One step: the next step's tool calls, or the reply once their results came back."""
        self.offered = list(tools or [])
        history = [m for m in ([messages] if isinstance(messages, str) else messages) if isinstance(m, dict)]
        steps = self.steps or ([self.calls] if self.calls else [])
        if not self.native:
            return self._react(history, [call for step in steps for call in step])
        taken = sum(1 for m in history if m.get("role") == "assistant" and m.get("tool_calls"))
        if taken >= len(steps):
            self.seen = [str(m.get("content")) for m in history if m.get("role") == "tool"]
            return self.reply
        return [{"id": f"call_{taken}_{index}", "type": "function",
                 "function": {"name": sanitize_tool_name(provider_tool_name(tool)), "arguments": arguments}}
                for index, (tool, arguments) in enumerate(steps[taken], start=1)]

    def _react(self, history: list[dict[str, Any]], calls: list[tuple[str, str]]) -> str:
        """ReAct text: CrewAI appends each result to the step's text after ``Observation:``."""
        observed = [str(m.get("content")).split("\nObservation: ", 1)[1] for m in history
                    if m.get("role") == "assistant" and "\nObservation: " in str(m.get("content"))]
        if len(observed) >= len(calls):
            self.seen = observed
            return f"Thought: I know what became of it.\nFinal Answer: {self.reply}"
        tool, arguments = calls[len(observed)]
        return (f"Thought: I call the tool.\nAction: {sanitize_tool_name(provider_tool_name(tool))}\n"
                f"Action Input: {arguments}")

    async def acall(self, messages: str | list[Any], tools: list[dict[str, Any]] | None = None,
                    callbacks: list[Any] | None = None, available_functions: dict[str, Any] | None = None,
                    from_task: Any = None, from_agent: Any = None, response_model: Any = None,
                    **kwargs: Any) -> str | Any:
        """``call``, for CrewAI's async paths."""
        return self.call(messages, tools, callbacks, available_functions, from_task, from_agent,
                         response_model)
