"""A LangChain agent's tools behind Lockgate: an ``AgentMiddleware`` for ``create_agent``.

The host opens the run; the middleware offers the model the run's catalogue and turns
every tool call into a proposal, so LangChain never runs a governed tool itself::

    governed = await GovernedRun.open(tenant="tenant-a", actor="user-42",
                                      context={"case_id": "case-123"}, capabilities=["case.add_note"])
    agent = create_agent(model, middleware=[LockgateMiddleware(governed)], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": governed.run_id}}
    state = await agent.ainvoke({"messages": [{"role": "user", "content": "Note the call."}]}, config)
    if "__interrupt__" in state:  # a reviewer must approve the exact bytes first
        ...  # later, in this process or another one with the same checkpointer:
        state = await agent.ainvoke(Command(resume={"type": "approve"}), config)

An agent that already has tools keeps them: ``LockgateMiddleware(governed, names={"add_note":
"case.add_note"})`` governs the agent's own ``add_note`` (its function never runs; the model
sees the catalogue's description and schema under that name), and ``ungoverned=["search"]``
lets tools that are no effects run in LangChain as before. Any other tool call is proposed
to Lockgate, which refuses what the run was not offered: the default is closed.

What the model reads is ``Outcome.text()`` in a ``ToolMessage`` (``status="error"`` for a
refusal, which the model reads and the run goes on). A call that waits for a reviewer is a
LangGraph ``interrupt`` whose value has the shape of ``HumanInTheLoopMiddleware``'s per-call
``ToolApprovalRequest`` plus the candidate id; ``Command(resume=...)`` re-runs the tool
node, which proposes the same call again (same tool-call id, same bytes: the same intent)
and returns Lockgate's current answer.

What LangChain's approval flow cannot express, and what this middleware does instead:

- ``approve`` authorizes nothing: any resume value only makes the middleware ask Lockgate,
  whose reviewer decides on the exact bytes. Still waiting, it pauses again.
- ``edit`` changes nothing that runs: only a Lockgate reviewer edits, and the model is told
  truthfully (``Outcome.replacement``). ``respond`` (a host answering for the tool) is
  ignored the same way: the model reads only Lockgate's answer.
- ``reject`` and ``ignore`` come from the trusted host: they withdraw the waiting candidate
  (``GovernedRun.withdraw``), and the model reads Lockgate's answer, ``withdrawn`` (or
  ``executed`` if a reviewer's approval got there first).
- A chat model hands the arguments parsed; the provider's raw argument text is used when
  the message still carries it (``tool_call_chunks`` or an OpenAI-style ``additional_kwargs``)
  and it parses to the same arguments, else the dict is serialized deterministically
  (``json.dumps(args, sort_keys=True, ensure_ascii=False)``).
- ``invoke``/``stream`` (synchronous) work on a run opened on a loop of its own:
  ``GovernedRun.in_thread(lambda: GovernedRun.open(...))``; from the loop's own thread they
  are refused rather than wait forever.

Put ``LockgateMiddleware`` first in ``middleware=[...]`` (outermost), so no other
middleware runs, retries or edits a call before Lockgate sees it.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any, Literal, NotRequired, TypedDict

from langchain.agents.middleware import (
    AgentMiddleware,
    AgentState,
    ModelRequest,
    ModelResponse,
    ToolCallRequest,
)
from langchain.agents.middleware.types import ExtendedModelResponse
from langchain_core.messages import AIMessage, AnyMessage, ToolCall, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.types import Command, interrupt

from lockgate.client.providers.calls import provider_tool_name
from lockgate.client.sdk import CandidateTooLarge, InvalidCandidate, Refused
from lockgate.contracts.messages import Tool
from lockgate.core.errors import LockgateError
from lockgate.integrations.governed import GovernedRun, Outcome, call_id_for

__all__ = ["LockgateMiddleware", "LockgateReviewRequest", "RawArguments", "raw_arguments"]

#: Resume decisions from the host that withdraw the waiting call (the host's own "no").
WITHDRAWING = frozenset({"reject", "ignore"})

#: What ``Command(resume=...)`` may carry: shown to clients, never validated, never obeyed
#: beyond ``WITHDRAWING``.
RESUME_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": ("Any answer resumes the agent, which then asks Lockgate: only a Lockgate "
                    "reviewer approves. 'reject' or 'ignore' withdraws the waiting call."),
    "properties": {
        "type": {"enum": ["approve", "edit", "reject", "respond", "ignore"]},
        "message": {"type": "string"},
    },
}


class LockgateIntegrationError(LockgateError):
    """The agent cannot be governed as it is configured (not retryable)."""


class LockgateReviewRequest(TypedDict):
    """The interrupt value for a call that waits for a Lockgate reviewer.

    ``type``, ``tool_call_id``, ``name``, ``args`` and ``description`` are those of
    ``HumanInTheLoopMiddleware``'s per-call ``ToolApprovalRequest``; the rest says which
    candidate waits and where (``lockgate review approve <candidate_id> --tenant <tenant>``).
    """

    type: Literal["tool_approval"]
    tool_call_id: str
    name: str
    args: dict[str, Any]
    description: str
    candidate_id: str
    run_id: str
    tenant: str
    status: str
    capability: str
    arguments: str
    replaces: NotRequired[str]


class RawArguments(TypedDict):
    """The argument text proposed for a tool call, and where it came from."""

    text: str
    #: ``provider``: the model's own text, as LangChain received it; ``serialized``: the
    #: parsed dict, serialized deterministically.
    source: Literal["provider", "serialized"]


class LockgateMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """Every tool call of a ``create_agent`` agent proposed to Lockgate, never run by LangChain.

    One middleware (and one agent) per run: each model step opens the run's next turn.

    Args:
        governed: the run, opened by the trusted host (``GovernedRun.open``), or taken up
            in a new process (``GovernedRun.attach``).
        names: the agent's own tool names mapped to the capabilities they stand for.
            Catalogue entries not named here are offered under ``provider_tool_name``
            (``case.add_note`` as ``case__add_note``).
        ungoverned: the agent's own tools that are no effects, run by LangChain as before.
        wait_s: how long a resumed call waits for a decided review to finish running.
    """

    def __init__(self, governed: GovernedRun, *, names: Mapping[str, str] | None = None,
                 ungoverned: Collection[str] = (), wait_s: float = 10.0) -> None:
        super().__init__()
        self.governed = governed
        self.names = dict(names or {})
        self.ungoverned = frozenset(ungoverned)
        self.wait_s = wait_s
        clash = self.ungoverned & set(self.names)
        if clash:
            raise LockgateIntegrationError(f"tools both governed and ungoverned: {sorted(clash)}",
                                           code="integration.tool-names-clash")
        # The first turn was opened with the run: the first model step uses it.
        self._turn_fresh = True
        self.tools = [self._offered_tool(name, tool) for name, tool in self._offer().items()
                      if name not in self.names]

    # --- what the model sees ------------------------------------------------------------

    async def awrap_model_call(
        self, request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        """Open the model step's turn and offer its catalogue (and the ungoverned tools)."""
        if not self._turn_fresh:
            await self.governed.new_turn()
        self._turn_fresh = False
        return await handler(self._offered(request))

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        """``awrap_model_call`` for ``invoke``: the run must be open ``GovernedRun.in_thread``."""
        if not self._turn_fresh:
            self.governed.call(self.governed.new_turn())
        self._turn_fresh = False
        return handler(self._offered(request))

    # --- what a tool call becomes -------------------------------------------------------

    async def awrap_tool_call(
        self, request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        """Propose a governed call (``handler`` is never called for it); pause while it waits."""
        if request.tool_call["name"] in self.ungoverned:
            return await handler(request)
        return await self._governed_call(request)

    def wrap_tool_call(
        self, request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        """``awrap_tool_call`` for ``invoke``: the run must be open ``GovernedRun.in_thread``.

        The proposal runs on the run's own loop with this node's context, so a pause is
        LangGraph's ``interrupt`` as in the asynchronous path.
        """
        if request.tool_call["name"] in self.ungoverned:
            return handler(request)
        return self.governed.call(self._governed_call(request), context=contextvars.copy_context())

    async def _governed_call(self, request: ToolCallRequest) -> ToolMessage:
        call = request.tool_call
        tool_call_id = call.get("id")
        if not tool_call_id:
            raise LockgateIntegrationError(
                f"tool call {call['name']!r} has no id: without one a resumed step would be a "
                "new intent. Use a chat model that returns tool-call ids.",
                code="integration.tool-call-id-missing")
        capability = self._capability(call["name"])
        arguments = raw_arguments(_messages(request.state), call)["text"]
        call_id = call_id_for(tool_call_id)
        try:
            outcome = await self.governed.propose(capability, arguments, call_id=call_id)
            while outcome.pending:
                # The first time, this pauses the run; after Command(resume=...), LangGraph
                # re-runs this node from the start and interrupt() returns the host's answer.
                answer = interrupt(self._review_request(call, capability, arguments, outcome),
                                   response_schema=RESUME_SCHEMA)
                if _withdraws(answer):
                    await self._withdraw(outcome, answer)
                outcome = await self.governed.resume(capability, arguments, call_id=call_id,
                                                     wait_s=self.wait_s)
        except (CandidateTooLarge, InvalidCandidate) as exc:
            # Nothing was sent: the model can fix it, as it would a rejection.
            return ToolMessage(content=json.dumps({"status": "rejected", "code": exc.code}),
                               tool_call_id=tool_call_id, name=call["name"], status="error")
        return tool_message(outcome, call)

    def _offered(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        """The request with the current turn's catalogue as its tools (and the ungoverned)."""
        kept: list[BaseTool | dict[str, Any]] = [t for t in request.tools
                                                 if _tool_name(t) in self.ungoverned]
        offered = [self._offered_tool(name, tool) for name, tool in self._offer().items()]
        return request.override(tools=[*kept, *offered])

    # --- helpers ------------------------------------------------------------------------

    def _offer(self) -> dict[str, Tool]:
        """The current turn's catalogue by the name the model sees each entry under."""
        by_capability = {capability: name for name, capability in self.names.items()}
        offer: dict[str, Tool] = {}
        for tool in self.governed.tools:
            name = by_capability.get(tool.name) or provider_tool_name(tool.name)
            if name in offer or name in self.ungoverned:
                raise LockgateIntegrationError(f"{tool.name} would be offered as {name}, taken",
                                               code="integration.tool-names-clash")
            offer[name] = tool
        return offer

    def _capability(self, name: str) -> str:
        """The capability a tool call's name stands for; a name never offered passes as it
        is, and intake refuses it on the record."""
        if name in self.names:
            return self.names[name]
        offered = {provider_tool_name(t.name): t.name for t in self.governed.tools}
        return offered.get(name, name)

    @staticmethod
    def _offered_tool(name: str, tool: Tool) -> StructuredTool:
        """A catalogue entry as a LangChain tool: its name, description and JSON Schema.

        Its function refuses to run: the middleware answers every call to it.
        """

        def refuse(**_: Any) -> str:
            raise LockgateIntegrationError(
                f"{name} is governed by Lockgate and never runs in LangChain: add "
                "LockgateMiddleware to the agent's middleware",
                code="integration.governed-tool-ran")

        return StructuredTool.from_function(func=refuse, name=name, description=tool.description,
                                            args_schema=dict(tool.parameters), infer_schema=False)

    def _review_request(self, call: ToolCall, capability: str, arguments: str,
                        outcome: Outcome) -> LockgateReviewRequest:
        waiting = outcome.final
        request = LockgateReviewRequest(
            type="tool_approval", tool_call_id=str(call.get("id")), name=call["name"],
            args=dict(call["args"]),
            description=(f"Lockgate holds this call for a reviewer ({waiting.status}); "
                         f"it runs only once they approve candidate {waiting.candidate_id}. "
                         "Resuming asks Lockgate again: it does not approve."),
            candidate_id=waiting.candidate_id, run_id=self.governed.run_id,
            tenant=self.governed.tenant, status=waiting.status, capability=capability,
            arguments=arguments)
        if outcome.replacement is not None:
            request["replaces"] = outcome.response.candidate_id
        return request

    async def _withdraw(self, outcome: Outcome, answer: object) -> None:
        why = ""
        if isinstance(answer, Mapping) and isinstance(answer.get("message"), str):
            why = answer["message"]
        # Too late to withdraw is no error: Lockgate's answer says what became of it.
        with contextlib.suppress(Refused):
            await self.governed.withdraw(outcome.final.candidate_id,
                                         why=why or "the host rejected the call")


def raw_arguments(messages: list[AnyMessage], call: ToolCall) -> RawArguments:
    """The argument text to propose for ``call``: the model's own when LangChain kept it.

    The provider's text is found on the ``AIMessage`` that made the call (a streamed
    message's ``tool_call_chunks``, or OpenAI-style ``additional_kwargs["tool_calls"]``)
    and used only when it parses to the call's arguments; otherwise (Anthropic, Gemini,
    a fake model, or arguments a middleware changed) the dict is serialized with sorted
    keys, so the same call is always the same bytes.
    """
    args = call["args"]
    tool_call_id = call.get("id")
    for message in reversed(messages):
        if not isinstance(message, AIMessage):
            continue
        if not any(c.get("id") == tool_call_id for c in message.tool_calls):
            continue
        for text in _provider_texts(message, tool_call_id):
            try:
                if json.loads(text) == args:
                    return RawArguments(text=text, source="provider")
            except ValueError:
                continue
        break
    return RawArguments(text=json.dumps(args, ensure_ascii=False, sort_keys=True),
                        source="serialized")


def tool_message(outcome: Outcome, call: ToolCall) -> ToolMessage:
    """What the model reads of an outcome: the projection, an error when it did not run."""
    return ToolMessage(content=outcome.text(), tool_call_id=str(call.get("id")),
                       name=call["name"], status="success" if outcome.executed else "error")


def _provider_texts(message: AIMessage, tool_call_id: str | None) -> list[str]:
    texts: list[str] = []
    for chunk in getattr(message, "tool_call_chunks", None) or ():
        if chunk.get("id") == tool_call_id and isinstance(chunk.get("args"), str):
            texts.append(chunk["args"])
    for item in message.additional_kwargs.get("tool_calls") or ():
        if isinstance(item, Mapping) and item.get("id") == tool_call_id:
            function = item.get("function")
            if isinstance(function, Mapping) and isinstance(function.get("arguments"), str):
                texts.append(function["arguments"])
    return texts


def _messages(state: Any) -> list[AnyMessage]:
    messages = state.get("messages") if isinstance(state, Mapping) else getattr(state, "messages", None)
    return list(messages) if isinstance(messages, list) else []


def _tool_name(tool: BaseTool | dict[str, Any]) -> str | None:
    if isinstance(tool, BaseTool):
        return tool.name
    name = tool.get("name")
    return name if isinstance(name, str) else None


def _withdraws(answer: object) -> bool:
    """True for the host's own "no" (``reject``/``ignore``), in either HITL shape."""
    if isinstance(answer, Mapping) and isinstance(answer.get("decisions"), list):
        decisions = answer["decisions"]
        answer = decisions[0] if len(decisions) == 1 else None
    return isinstance(answer, Mapping) and answer.get("type") in WITHDRAWING
