"""Lockgate under the OpenAI Agents SDK: a run's tools as ``FunctionTool``s whose effects Lockgate decides.

Install ``pip install "lockgate[openai-agents]"``; then, on the trusted host's side::

    governed = await GovernedRun.open(tenant="tenant-a", actor="user-42",
                                      context={"case_id": "case-123"}, capabilities=["case.add_note"])
    lockgate = GovernedTools(governed)
    agent = agent.clone(tools=lockgate.tools)        # the turn's catalogue; Lockgate executes
    result = await Runner.run(agent, "Note that the customer was called back.")
    while result.interruptions:                      # a reviewer must decide: the SDK's own pause
        state = result.to_state()                    # state.to_string() outlives this process
        await lockgate.prepare_resume(state, wait_s=300)  # asks Lockgate; never authorizes
        result = await Runner.run(agent, state)      # the SDK's own resume
    await governed.close()

How a call goes: the SDK asks the tool's ``needs_approval`` first, which proposes the call to
Lockgate (the SDK's tool-call id as call id) and answers True only when Lockgate waits for a
reviewer; that interruption is the pause. Otherwise (and after a resume) the tool's input
guardrail proposes the same call again, the same intent, and a refusal reaches the model as
the guardrail's ``reject_content`` message; an executed call's projection is the tool's
output. ``prepare_resume`` asks Lockgate about each paused call and ``state.approve``s only
those that no longer wait, which merely lets the SDK invoke the tool again, which asks
Lockgate for that call's answer: executed, or refused (a reviewer said no, the review
expired or was withdrawn), or replaced by a reviewer's edit.

What the SDK's approval flow could not express, and how it is handled:

- Its decision is a boolean the host records (``approve``/``reject``), kept in a run state it
  does not authenticate. Here it authorizes nothing: ``approve`` only lets the tool ask
  Lockgate again. A host that approves before a reviewer decided gets a tool output saying
  the call still waits for a reviewer (the SDK will not pause on that call again); a host's
  ``reject`` stops the agent waiting but not Lockgate's review: ``GovernedRun.withdraw`` or
  ``close`` does that.
- The pause carries no data of Lockgate's: the candidate id is in the outcomes that
  ``prepare_resume`` returns (and derives from the run and the call id).
- ``needs_approval`` is handed the parsed arguments, not their text, so every proposal of a
  call sends one deterministic serialization of them (``proposed_arguments``: compact JSON,
  the model's key order, non-ASCII kept; a key the model repeated is kept once, as the SDK
  read it). Text that is no JSON object is sent as it came: the SDK pauses on it without
  asking ``needs_approval``, and the resume gets Lockgate's refusal.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, NoReturn

from agents import FunctionTool, RunContextWrapper, RunState, ToolApprovalItem
from agents import Tool as AgentsTool
from agents.tool_context import ToolContext
from agents.tool_guardrails import (
    ToolGuardrailFunctionOutput,
    ToolInputGuardrail,
    ToolInputGuardrailData,
)

from lockgate.client.providers.calls import provider_tool_name, tool_names
from lockgate.contracts.messages import Tool
from lockgate.integrations.governed import GovernedRun, Outcome, call_id_for

__all__ = ["GovernedTools", "proposed_arguments"]


class GovernedTools:
    """A governed run's tools for the Agents SDK, and the host's side of a review's pause.

    ``tools`` are the current turn's catalogue entries (name, description, JSON Schema as
    Lockgate offers them); calling one never runs anything here. ``wait_s`` is how long a
    call's first proposal waits for a quick review before the SDK pauses.
    """

    def __init__(self, governed: GovernedRun, *, wait_s: float = 0.0) -> None:
        self.governed = governed
        self.wait_s = wait_s
        #: Answers that cannot change (executed, refused), by (call id, capability, arguments).
        self._settled: dict[tuple[str, str, str], Outcome] = {}
        #: The model-facing tool name of each capability offered (dots are not allowed there).
        self.names = tool_names(governed.tools)
        #: Typed as the SDK's ``Agent(tools=...)`` takes them: list is invariant.
        self.tools: list[AgentsTool] = [self._function_tool(provider_tool_name(tool.name), tool)
                                          for tool in governed.tools]

    async def prepare_resume(self, state: RunState[Any, Any], *, wait_s: float = 0.0) -> list[Outcome]:
        """Ask Lockgate about each governed call ``state`` is paused on; let the decided ones run.

        Each paused call is proposed again (the same call: its intent's current answer), for
        up to ``wait_s`` until a reviewer decides. A call that no longer waits is approved in
        the SDK, which only lets the tool be invoked again, where it asks Lockgate for that
        answer; one still waiting stays paused, and ``Runner.run(agent, state)`` pauses on
        it again. Interruptions of tools that are not Lockgate's are left to the host.

        Returns:
            The outcome of each governed paused call (``pending``: still waiting; its
            ``candidate_id`` is what a reviewer decides).
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s  # one wait for them all, not one each
        outcomes = []
        for item in state.get_interruptions():
            call = self._paused_call(item)
            if call is None:
                continue
            capability, arguments, framework_id = call
            outcome = await self._ask(capability, arguments, framework_id,
                                      wait_s=max(0.0, deadline - loop.time()))
            if not outcome.pending:
                state.approve(item)
            outcomes.append(outcome)
        return outcomes

    def _paused_call(self, item: ToolApprovalItem) -> tuple[str, str, str] | None:
        """The capability, proposed arguments and SDK call id of an interruption of ours."""
        capability = self.names.get(item.tool_name or "")
        raw = item.raw_item
        arguments = raw.get("arguments") if isinstance(raw, dict) else getattr(raw, "arguments", None)
        call_id = raw.get("call_id") if isinstance(raw, dict) else getattr(raw, "call_id", None)
        if capability is None or not isinstance(arguments, str) or not isinstance(call_id, str):
            return None
        return capability, proposed_arguments(arguments), call_id

    async def _ask(self, capability: str, arguments: str, framework_id: str, *,
                   wait_s: float = 0.0) -> Outcome:
        """Propose one call (again): its intent's current answer, never a second effect."""
        key = (framework_id, capability, arguments)
        settled = self._settled.get(key)
        if settled is not None:
            return settled
        outcome = await self.governed.propose(capability, arguments, call_id=call_id_for(framework_id),
                                              wait_s=wait_s)
        if outcome.executed or outcome.refused:
            self._settled[key] = outcome
        return outcome

    def _function_tool(self, offered: str, tool: Tool) -> FunctionTool:
        capability = tool.name

        async def needs_approval(_: RunContextWrapper[Any], params: dict[str, Any], call_id: str) -> bool:
            # The first proposal: the SDK pauses (its interruption) only while a person decides.
            outcome = await self._ask(capability, _serialized(params), call_id, wait_s=self.wait_s)
            return outcome.pending

        async def refused(data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
            context = data.context
            outcome = await self._ask(capability, proposed_arguments(context.tool_arguments),
                                      context.tool_call_id)
            info = {"candidate_id": outcome.candidate_id, "status": outcome.final.status}
            if outcome.refused:
                return ToolGuardrailFunctionOutput.reject_content(outcome.text(), output_info=info)
            return ToolGuardrailFunctionOutput.allow(output_info=info)

        async def invoke(context: ToolContext[Any], arguments: str) -> str:
            outcome = await self._ask(capability, proposed_arguments(arguments), context.tool_call_id)
            return outcome.text()

        return FunctionTool(
            name=offered, description=tool.description, params_json_schema=dict(tool.parameters),
            on_invoke_tool=invoke,
            # Strict mode would rewrite the schema (every property required, no others), so the
            # model could not send what Lockgate's schema allows; intake checks the schema itself.
            strict_json_schema=False,
            tool_input_guardrails=[ToolInputGuardrail(refused, name="lockgate")],
            needs_approval=needs_approval,
        )


def proposed_arguments(text: str) -> str:
    """The argument text proposed for a call whose raw text is ``text``.

    The SDK hands ``needs_approval`` the arguments parsed (as it parses them), the tool its
    text: both become this one serialization, so every proposal of a call is the same bytes.
    Text that is no JSON object is proposed as it came (Lockgate refuses it).
    """
    parsed = _object(text)
    return text if parsed is None else _serialized(parsed)


def _serialized(params: dict[str, Any]) -> str:
    return json.dumps(params, ensure_ascii=False, separators=(",", ":"))


def _no_constant(value: str) -> NoReturn:
    raise ValueError(f"not JSON: {value}")


def _object(text: str) -> dict[str, Any] | None:
    """``text`` parsed the way the SDK parses it for ``needs_approval``, if it is an object."""
    if not text.strip():
        return None
    try:
        parsed = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return None
    return parsed if isinstance(parsed, dict) else None

