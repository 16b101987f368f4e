"""Pydantic AI agents whose tools Lockgate decides: a capability, a toolset, a deferred call.

Put an agent's tools behind Lockgate (the run is opened by the trusted host)::

    from pydantic_ai import Agent, DeferredToolRequests
    from lockgate.integrations import GovernedRun
    from lockgate.integrations.pydantic_ai import GovernedTools

    governed = await GovernedRun.open(tenant="tenant-a", actor="user-42",
                                      context={"case_id": "case-123"}, capabilities=["case.add_note"])
    agent = Agent(model, output_type=[str, DeferredToolRequests], capabilities=[GovernedTools(governed)])
    result = await agent.run("Note that the customer called back.")
    if isinstance(result.output, DeferredToolRequests):  # a reviewer decides; resume later:
        result = await agent.run(message_history=result.all_messages(),
                                 deferred_tool_results=result.output.build_results(approve_all=True))

What the model sees: the tools are the run's current turn's catalogue (name, description,
JSON Schema); a call proposes the model's own argument text (``ToolCallPart.args`` when it
is a string; a dict is serialized deterministically) under the model's tool-call id, and its
tool result is Lockgate's projection (``Outcome.text()``). The agent never runs an effect.

- Executed: a normal tool return (the candidate id in the part's ``metadata``).
- Refused (rejected, denied, withdrawn, unavailable, …): Pydantic AI's own denial,
  ``ToolDenied`` carrying the projection (``ToolReturnPart.outcome == "denied"``). Not
  ``ModelRetry``: a retry prompt is the framework's channel for arguments that failed its
  validation, it spends the tool's retry budget, and running out of it ends the run with
  ``UnexpectedModelBehavior``. Lockgate's refusal is an answer, not a parse error; the model
  reads it and may propose something else (a new call).
- Waiting for a reviewer: the call raises ``ApprovalRequired``, so the run ends with
  ``DeferredToolRequests`` naming it, ``metadata[tool_call_id]`` carrying ``candidate_id``,
  ``run_id``, ``tenant`` and ``status``. The host persists ``result.all_messages()`` and the
  requests, and resumes with ``agent.run(message_history=..., deferred_tool_results=...)``.

What Pydantic AI's approval flow cannot express, and how it is handled: its
``DeferredToolResults`` is the host's answer (approve, deny, override the arguments, or
supply the result). Here no host answer decides: before the resumed step runs, every result
given for a governed call is replaced by a plain ``ToolApproved()``, which only makes the
toolset ask Lockgate again with the same tool-call id and the same argument text (from the
message history, never ``override_args``). The framework's "approve" authorizes nothing, its
"deny" does not refuse (the review stays open; withdraw it with ``GovernedRun.withdraw``),
an edit is a reviewer's in Lockgate, and a supplied result is ignored. A call whose review is
still open pauses again. A ``HandleDeferredToolCalls`` handler answering inside the run is
not intercepted: leave the governed calls to the host's resume.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from pydantic_ai import ApprovalRequired, ToolApproved, ToolDenied, ToolReturn
from pydantic_ai.agent import CallToolsNode
from pydantic_ai.capabilities import AbstractCapability, AgentNode
from pydantic_ai.messages import ModelResponse, ToolCallPart
from pydantic_ai.tools import RunContext, ToolDefinition
from pydantic_ai.toolsets import AbstractToolset
from pydantic_ai.toolsets.abstract import ToolsetTool

from lockgate.client.providers.calls import NO_ARGUMENTS
from lockgate.integrations.governed import GovernedRun, Outcome, call_id_for

#: The toolset's id (Pydantic AI names toolsets for durable execution and error messages).
TOOLSET_ID = "lockgate"
#: How long a resumed call waits for its settled answer (a review just approved is executing).
RESUME_WAIT_S = 10.0


class _Verbatim:
    """Arguments left for Lockgate to judge: never refused here, so every call is proposed.

    Pydantic AI validates a call's arguments before it calls the tool; an invalid call would
    become the framework's own retry prompt and never reach Lockgate's intake (nor its record).
    """

    def validate_json(self, input: str | bytes | bytearray, *, allow_partial: Any = False,
                      **kwargs: Any) -> Any:
        try:
            value = json.loads(input)
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}

    def validate_python(self, input: Any, *, allow_partial: Any = False, **kwargs: Any) -> Any:
        return dict(input) if isinstance(input, dict) else {}


def arguments_text(args: str | dict[str, Any] | None) -> str:
    """The argument text to propose: the provider's own string as it is, else a dict as JSON.

    A dict (a provider that parsed the arguments, a test model) is serialized
    deterministically (sorted keys, no spaces), so the same call is always the same bytes.
    """
    if isinstance(args, str):
        return args or NO_ARGUMENTS
    if not args:
        return NO_ARGUMENTS
    return json.dumps(args, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _model_call(ctx: RunContext[Any], name: str) -> ToolCallPart | None:
    """The call as the model made it (the latest response holding its id), from the history."""
    for message in reversed(ctx.messages):
        if isinstance(message, ModelResponse):
            for part in message.parts:
                if (isinstance(part, ToolCallPart) and part.tool_call_id == ctx.tool_call_id
                        and part.tool_name == name):
                    return part
    return None


def _review_metadata(governed: GovernedRun, outcome: Outcome) -> dict[str, Any]:
    """What the host keeps of a waiting call: enough to attach, find and check the review."""
    metadata: dict[str, Any] = {"candidate_id": outcome.candidate_id, "run_id": governed.run_id,
                                "tenant": governed.tenant, "status": outcome.final.status}
    if outcome.replacement is not None:
        metadata["replacement_candidate_id"] = outcome.replacement.candidate_id
    return metadata


class GovernedToolset(AbstractToolset[Any]):
    """The run's catalogue as a Pydantic AI toolset: a call proposes, Lockgate answers.

    Each run step opens a Lockgate turn (one model step, the catalogue offered in it).
    """

    def __init__(self, governed: GovernedRun, *, wait_s: float = 0.0,
                 resume_wait_s: float = RESUME_WAIT_S, id: str = TOOLSET_ID) -> None:
        """Offer ``governed``'s tools.

        Args:
            governed: The run, opened by the trusted host (or attached to in a new process).
            wait_s: How long a new call waits for a reviewer before the run pauses.
            resume_wait_s: How long a resumed call waits for its review's outcome.
            id: The toolset's id.
        """
        self.governed = governed
        self.wait_s = wait_s
        self.resume_wait_s = resume_wait_s
        self._id = id
        self._step: tuple[str | None, int] | None = None

    @property
    def id(self) -> str | None:
        return self._id

    async def for_run_step(self, ctx: RunContext[Any]) -> AbstractToolset[Any]:
        """Open the Lockgate turn of this step (the first step uses the turn the run opened with)."""
        step = (ctx.run_id, ctx.run_step)
        if step != self._step:
            if self._step is not None or self.governed.turn is None:
                await self.governed.new_turn()
            self._step = step
        return self

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        """The current turn's catalogue entries, with their JSON Schemas as Lockgate gave them."""
        return {
            tool.name: ToolsetTool(
                toolset=self,
                tool_def=ToolDefinition(name=tool.name, description=tool.description,
                                        parameters_json_schema=tool.parameters),
                max_retries=1, args_validator=_Verbatim())
            for tool in self.governed.tools
        }

    async def call_tool(self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any],
                        tool: ToolsetTool[Any]) -> Any:
        """Propose the call as the model made it; return Lockgate's projection of the answer.

        Raises:
            ApprovalRequired: a reviewer (or policy's evidence) has yet to decide: the run
                pauses with the candidate id in the request's metadata.
            ValueError: the framework gave no tool-call id (no way to make a retry the same intent).
        """
        if not ctx.tool_call_id:
            raise ValueError(f"no tool-call id for a call to {name!r}: it cannot be proposed once")
        made = _model_call(ctx, name)
        arguments = arguments_text(made.args if made is not None else tool_args)
        outcome = await self.governed.propose(
            name, arguments, call_id=call_id_for(ctx.tool_call_id),
            wait_s=self.resume_wait_s if ctx.tool_call_approved else self.wait_s)
        if outcome.pending:
            raise ApprovalRequired(metadata=_review_metadata(self.governed, outcome))
        if outcome.refused:
            return ToolDenied(outcome.text())
        return ToolReturn(return_value=outcome.text(),
                          metadata={"candidate_id": outcome.candidate_id,
                                    "status": outcome.final.status})


class GovernedTools(AbstractCapability[Any]):
    """A capability that puts an agent's tools behind Lockgate: ``capabilities=[GovernedTools(run)]``.

    It contributes the run's catalogue as a ``GovernedToolset`` and, when a paused run is
    resumed, sees to it that only Lockgate's answer decides a governed call (see the module).
    """

    def __init__(self, governed: GovernedRun, *, wait_s: float = 0.0,
                 resume_wait_s: float = RESUME_WAIT_S) -> None:
        """Govern ``governed``'s tools; ``wait_s``/``resume_wait_s`` as ``GovernedToolset``'s."""
        super().__init__()
        self.governed = governed
        self.toolset = GovernedToolset(governed, wait_s=wait_s, resume_wait_s=resume_wait_s)

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None  # holds a live run: not something an agent spec can name

    def get_toolset(self) -> AbstractToolset[Any]:
        return self.toolset

    async def before_node_run(self, ctx: RunContext[Any], *, node: AgentNode[Any]) -> AgentNode[Any]:
        """On a resume, turn the host's answer for each governed call into "ask Lockgate again"."""
        if not isinstance(node, CallToolsNode) or not node.tool_call_results:
            return node
        governed = {t.name for t in self.governed.tools}
        names = {call.tool_call_id: call.tool_name for call in node.model_response.tool_calls}
        results = {
            call_id: ToolApproved() if result != "skip" and names.get(call_id) in governed else result
            for call_id, result in node.tool_call_results.items()
        }
        return replace(node, tool_call_results=results)
