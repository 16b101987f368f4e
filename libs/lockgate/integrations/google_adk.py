"""Lockgate under Google's Agent Development Kit: a plugin that proposes every governed tool call.

Install ``pip install "lockgate[google-adk]"``; then, on the trusted host's side::

    governed = await GovernedRun.open(tenant="tenant-a", actor="user-42",
                                      context={"case_id": "case-123"}, capabilities=["case.add_note"])
    lockgate = GovernedTools(governed)               # a BasePlugin; .tools: the turn's catalogue
    agent = LlmAgent(name="notes", model=model, instruction="Keep the case notes.", tools=lockgate.tools)
    runner = InMemoryRunner(app=App(name="notes", root_agent=agent, plugins=[lockgate]))
    session = await runner.session_service.create_session(app_name="notes", user_id="user-42")
    message = types.UserContent("Note that the customer called back.")
    while message is not None:                        # a reviewer must decide: ADK's confirmation pause
        events = [e async for e in runner.run_async(user_id="user-42", session_id=session.id,
                                                    new_message=message)]
        message = await lockgate.resume_message(events, wait_s=300)  # asks Lockgate; authorizes nothing
    await governed.close()

How a call goes: the plugin's ``before_tool_callback`` answers every call of a tool the run's
catalogue offers (``GovernedTool``s, or the host's own tools of the same name) with a dict, so
ADK never runs the tool's function. It proposes the call to Lockgate with ADK's
``function_call_id`` as call id and the model's arguments, and returns Lockgate's projection
(``Outcome.text()`` as the JSON object a ``FunctionResponse`` carries): executed, or refused
(rejected, denied, unavailable, …) for the model to read and go on. A call a reviewer must
decide is ADK's own tool confirmation: ``tool_context.request_confirmation`` (the payload
carries ``candidate_id``, ``run_id`` and ``tenant``), so the invocation ends with an
``adk_request_confirmation`` function call and the model reads nothing yet. The host resumes
by sending that call's ``FunctionResponse``; ADK then calls the tool again, with the same
``function_call_id`` and arguments, and the plugin asks Lockgate for that same call's current
answer. ``resume_message`` builds that response for the calls Lockgate no longer waits on.
Each model step opens a Lockgate turn (``before_model_callback``).
The run's id and tenant are kept in the session's state (``lockgate_run_id``,
``lockgate_tenant``), so a new process can ``GovernedRun.attach`` to it and resume a session
it reopens (a ``SqliteSessionService`` file, say).

What ADK's approval flow could not express, and how it is handled:

- Its decision is the host's ``ToolConfirmation.confirmed``, a boolean in the session, and
  "confirmed" would run the tool. Here no answer of the host's decides: whatever it sends
  (confirmed or not, any payload), the plugin asks Lockgate again for the same call (same id,
  same bytes), and only a reviewer's decision on those bytes makes an effect. A host that
  confirms before a reviewer decided gets a tool result saying the call still waits for a
  reviewer, which the model reads: ADK consumes a confirmation once and cannot pause the same
  call again, so use ``resume_message``, which confirms only the calls Lockgate decided. A
  host's "not confirmed" stops the agent waiting, not the review: ``GovernedRun.withdraw`` or
  ``close`` does that.
- A reviewer's edit has no place in a confirmation: it is said in the tool result (the call
  was ``replaced``, and what the replacement did).
- ADK hands the callback parsed arguments (a dict), not the model's text. Every proposal of a
  call sends one deterministic serialization of the call's arguments as the session recorded
  them (``proposed_arguments``: compact JSON, keys sorted, non-ASCII kept), so the first
  proposal, the resumed one and one from another process after the session was stored and
  reopened are the same bytes, the same intent.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from google.adk.agents.callback_context import CallbackContext
from google.adk.events.event import Event
from google.adk.flows.llm_flows.functions import REQUEST_CONFIRMATION_FUNCTION_CALL_NAME
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from lockgate.client.providers.calls import NO_ARGUMENTS, provider_tool_name, tool_names
from lockgate.contracts.messages import Tool
from lockgate.integrations.governed import GovernedRun, Outcome, call_id_for

__all__ = ["GovernedTool", "GovernedTools", "PausedCall", "proposed_arguments"]

#: The plugin's name on the ``App`` (ADK requires plugin names to be unique).
PLUGIN_NAME = "lockgate"
#: Session state keys naming the Lockgate run a session's governed calls belong to.
RUN_ID_KEY = "lockgate_run_id"
TENANT_KEY = "lockgate_tenant"
#: How long a resumed call waits for its settled answer (a review just approved is executing).
RESUME_WAIT_S = 10.0


class GovernedTool(BaseTool):
    """One entry of the run's catalogue as ADK offers it: Lockgate's name, description, schema.

    Its function never runs anything: ``GovernedTools.before_tool_callback`` answers every call
    of it. Should the plugin not be on the ``App``, ``run_async`` proposes the same way.
    """

    def __init__(self, tool: Tool, plugin: GovernedTools) -> None:
        super().__init__(name=provider_tool_name(tool.name), description=tool.description)
        self.capability = tool.name
        self.parameters: dict[str, Any] = dict(tool.parameters)
        self._plugin = plugin

    def _get_declaration(self) -> types.FunctionDeclaration:
        # The catalogue's JSON Schema as it is: not converted to ADK's OpenAPI subset.
        return types.FunctionDeclaration(name=self.name, description=self.description,
                                         parameters_json_schema=self.parameters)

    async def run_async(self, *, args: dict[str, Any], tool_context: ToolContext) -> Any:
        return await self._plugin.answer(self.capability, self.name, args, tool_context)


@dataclass(frozen=True)
class PausedCall:
    """A governed call an ADK session is paused on (its ``adk_request_confirmation``)."""

    #: The ``adk_request_confirmation`` call's id: what the host's resume answers.
    request_id: str
    #: The model's call, as the session recorded it.
    call: types.FunctionCall
    capability: str
    #: What the pause carried of Lockgate's: ``candidate_id``, ``run_id``, ``tenant``, ``status``.
    payload: Mapping[str, Any]

    @property
    def candidate_id(self) -> str:
        """The candidate a reviewer decides (``lockgate review approve <candidate_id>``)."""
        return str(self.payload.get("candidate_id", ""))


class GovernedTools(BasePlugin):
    """A governed run's tools for ADK, and the plugin that makes Lockgate answer every call of them.

    Put ``tools`` on the agent and the plugin on the ``App`` (``plugins=[lockgate]``). Calls of
    tools the catalogue does not offer are left to ADK.
    """

    def __init__(self, governed: GovernedRun, *, wait_s: float = 0.0,
                 resume_wait_s: float = RESUME_WAIT_S, name: str = PLUGIN_NAME) -> None:
        """Govern ``governed``'s tools.

        Args:
            governed: The run, opened by the trusted host (or attached to in a new process).
            wait_s: How long a call's first proposal waits for a quick review before ADK pauses.
            resume_wait_s: How long a resumed call waits for its review's outcome.
            name: The plugin's name on the ``App``.
        """
        super().__init__(name=name)
        self.governed = governed
        self.wait_s = wait_s
        self.resume_wait_s = resume_wait_s
        #: The model-facing tool name of each capability offered, to its capability.
        self.names = tool_names(governed.tools)
        #: Typed as ``LlmAgent(tools=...)`` takes them: list is invariant.
        self.tools: list[BaseTool] = [GovernedTool(tool, self) for tool in governed.tools]
        self._stepped = False

    async def before_model_callback(self, *, callback_context: CallbackContext,
                                    llm_request: LlmRequest) -> LlmResponse | None:
        """Open the Lockgate turn of this model step (the first uses the turn the run opened with)."""
        if self._stepped:
            await self.governed.new_turn()
        self._stepped = True
        return None

    async def before_tool_callback(self, *, tool: BaseTool, tool_args: dict[str, Any],
                                   tool_context: ToolContext) -> dict[str, Any] | None:
        """Answer a governed call with Lockgate's projection; the tool's function never runs."""
        capability = self.names.get(tool.name)
        if capability is None:
            return None  # not a tool of the run's catalogue: the host's own, left to ADK
        return await self.answer(capability, tool.name, tool_args, tool_context)

    async def answer(self, capability: str, offered: str, tool_args: Mapping[str, Any],
                     tool_context: ToolContext) -> dict[str, Any]:
        """Propose one call (again, on a resume): its intent's current answer, as the model reads it.

        Raises:
            ValueError: ADK gave no function-call id (no way to make a resume the same intent).
        """
        framework_id = tool_context.function_call_id
        if not framework_id:
            raise ValueError(f"no function-call id for a call to {offered!r}: it cannot be proposed once")
        model_call = _model_call(tool_context, framework_id, offered)
        arguments = proposed_arguments(model_call.args if model_call is not None else tool_args)
        resumed = tool_context.tool_confirmation is not None
        outcome = await self.governed.propose(
            capability, arguments, call_id=call_id_for(framework_id),
            wait_s=self.resume_wait_s if resumed else self.wait_s)
        tool_context.state[RUN_ID_KEY] = self.governed.run_id
        tool_context.state[TENANT_KEY] = self.governed.tenant
        if outcome.pending and not resumed:
            # ADK's pause: an adk_request_confirmation call ends the invocation, and the model
            # reads this call's answer only once the host resumes it.
            tool_context.request_confirmation(hint=_hint(outcome), payload=self._payload(outcome))
            tool_context.actions.skip_summarization = True
        content: dict[str, Any] = json.loads(outcome.text())
        return content

    def paused(self, events: Iterable[Event]) -> list[PausedCall]:
        """The governed calls ``events`` (an invocation's, or ``session.events``) leave paused."""
        events = list(events)
        answered = {response.id for event in events for response in event.get_function_responses()
                    if response.name == REQUEST_CONFIRMATION_FUNCTION_CALL_NAME}
        paused = []
        for event in events:
            for request in event.get_function_calls():
                if (request.name != REQUEST_CONFIRMATION_FUNCTION_CALL_NAME or not request.id
                        or request.id in answered or not request.args):
                    continue
                original = request.args.get("originalFunctionCall")
                confirmation = request.args.get("toolConfirmation")
                if not isinstance(original, dict):
                    continue
                call = types.FunctionCall.model_validate(original)
                capability = self.names.get(call.name or "")
                if capability is None or not call.id:
                    continue  # another tool's confirmation: the host's to answer
                payload = confirmation.get("payload") if isinstance(confirmation, dict) else None
                paused.append(PausedCall(request.id, call, capability,
                                         payload if isinstance(payload, dict) else {}))
        return paused

    async def resume_message(self, events: Iterable[Event], *,
                             wait_s: float = 0.0) -> types.Content | None:
        """ADK's resume for the paused governed calls in ``events`` that Lockgate no longer waits on.

        Each paused call is proposed again (the same call id and bytes: its intent's current
        answer), for up to ``wait_s`` in all until a reviewer decides. For each decided one the
        message holds the ``adk_request_confirmation`` response (``confirmed``: it only lets
        ADK call the tool again, where Lockgate is asked once more).

        Returns:
            The message for ``Runner.run_async(new_message=...)``, or None when no governed
            call is paused, or none was decided within ``wait_s`` (the run stays paused:
            ask again later, from this process or another).
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s  # one wait for them all, not one each
        parts = []
        for paused in self.paused(events):
            outcome = await self.governed.resume(
                paused.capability, proposed_arguments(paused.call.args or {}),
                call_id=call_id_for(paused.call.id or ""), wait_s=max(0.0, deadline - loop.time()))
            if outcome.pending:
                continue
            confirmation = {"confirmed": True, "payload": self._payload(outcome)}
            parts.append(types.Part(function_response=types.FunctionResponse(
                name=REQUEST_CONFIRMATION_FUNCTION_CALL_NAME, id=paused.request_id,
                response=confirmation)))
        return types.Content(role="user", parts=parts) if parts else None

    def _payload(self, outcome: Outcome) -> dict[str, Any]:
        """What a pause carries of Lockgate's: enough to attach, find and check the review."""
        payload: dict[str, Any] = {"candidate_id": outcome.candidate_id, "run_id": self.governed.run_id,
                                   "tenant": self.governed.tenant, "status": outcome.final.status}
        if outcome.replacement is not None:
            payload["replacement_candidate_id"] = outcome.replacement.candidate_id
        return payload


def proposed_arguments(args: Mapping[str, Any] | None) -> str:
    """The argument text proposed for a call ADK hands over parsed (``FunctionCall.args``).

    Compact JSON with sorted keys and non-ASCII kept: the same arguments are always the same
    bytes, before a pause, on the resume, and after the session was stored and reopened.
    """
    if not args:
        return NO_ARGUMENTS
    return json.dumps(args, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _model_call(tool_context: ToolContext, call_id: str, name: str) -> types.FunctionCall | None:
    """The call as the model made it (the latest model event holding its id), from the session.

    What a plugin ahead of this one did to ``tool_args`` is not what the model proposed.
    """
    for event in reversed(tool_context.session.events):
        if event.author == "user":
            continue
        for call in event.get_function_calls():
            if call.id == call_id and call.name == name:
                return call
    return None


def _hint(outcome: Outcome) -> str:
    waiting = outcome.replacement or outcome.response
    return (f"A Lockgate reviewer decides this call (candidate {waiting.candidate_id}). "
            "Confirming only resumes the agent, which then asks Lockgate for the answer.")
