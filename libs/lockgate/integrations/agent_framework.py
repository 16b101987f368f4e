"""Microsoft Agent Framework agents whose tools Lockgate decides (``lockgate[agent-framework]``).

An ``Agent`` keeps its client, instructions and session; its tools become the run's
catalogue and a middleware answers every call with Lockgate's answer, so the framework
never runs a governed effect itself::

    from agent_framework import Agent
    from lockgate.integrations import GovernedRun
    from lockgate.integrations.agent_framework import Lockgate

    governed = await GovernedRun.open(tenant="tenant-a", actor="user-42",
                                      context={"case_id": "case-123"}, capabilities=["case.add_note"])
    lockgate = Lockgate(governed)
    agent = Agent(client=client, tools=lockgate.tools, middleware=lockgate.middleware)
    session = agent.create_session()
    response = await agent.run("Note that the customer called back.", session=session)
    # A reviewer has to decide first: response.user_input_requests holds the pause.
    response = await agent.run(lockgate.resume(session), session=session)  # later, any process

``lockgate.govern(existing_tools)`` declares an existing agent's own tools (matched by
name) from the catalogue instead; their bodies never run.

How it plugs in (agent-framework-core 1.26): a ``FunctionMiddleware`` that never calls
``call_next`` and sets ``context.result``; the call id is ``context.metadata["call_id"]``
(the model's tool-call id). The function middleware is handed the arguments parsed, not
the model's text, so a ``ChatMiddleware`` keeps each call's argument text off the model's
answer (streamed or not) and that text is proposed; where a client hands the framework
parsed arguments only, they are proposed as compact JSON with sorted keys. A replay
proposes the text its pause recorded: the same bytes. A pending review is the framework's
own approval pause: the middleware answers with a ``function_approval_request`` (its
``additional_properties["lockgate"]`` names the candidate), the run returns it in
``response.user_input_requests`` and the session records it. The host resumes with a
``function_approval_response``; the replayed call is proposed again, the same call id
and bytes, and the model reads Lockgate's answer.

What the framework's approval flow cannot express: its answer is the host's boolean, and
a "no" is turned into "rejected by user" without asking anyone. Here neither answer
decides anything: an agent middleware turns every answer to a Lockgate pause into a
replay, so both only ask Lockgate for the call's current state (a reviewer's approval of
the exact bytes is the only approval; a call the host no longer wants is withdrawn with
``GovernedRun.withdraw``). A call still waiting pauses again.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, cast

from agent_framework import (
    AgentContext,
    AgentMiddleware,
    AgentSession,
    BaseChatClient,
    ChatContext,
    ChatMiddleware,
    ChatMiddlewareLayer,
    ChatResponse,
    ChatResponseUpdate,
    Content,
    FunctionInvocationContext,
    FunctionInvocationLayer,
    FunctionMiddleware,
    FunctionTool,
    Message,
    MiddlewareFailure,
    ResponseStream,
    normalize_tools,
)
from pydantic import BaseModel

from lockgate.client.providers.calls import NO_ARGUMENTS, provider_tool_name, tool_names
from lockgate.client.sdk import ClientError, Gateway
from lockgate.contracts.messages import Tool
from lockgate.integrations.governed import GovernedRun, Outcome, call_id_for

#: The key of the session state this integration keeps: its run and the pauses it made.
STATE_KEY = "lockgate"
#: The key of a pause's (and its answer's) ``additional_properties`` that names the candidate.
PAUSE_KEY = "lockgate"


def arguments_text(arguments: BaseModel | Mapping[str, Any]) -> str:
    """The argument text proposed when the model's own text is not known: compact JSON, keys sorted.

    The function middleware sees arguments only once the framework parsed them; the model's
    text is kept by a chat middleware where the client hands it over as text. Either way the
    text proposed first is the one a replay proposes again, so it is the same intent.
    """
    data = arguments.model_dump(mode="json") if isinstance(arguments, BaseModel) else dict(arguments)
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class Waiting:
    """A call paused for a reviewer, as the session recorded it."""

    candidate_id: str
    call_id: str
    tool: str
    status: str


class Lockgate:
    """The tools and middleware that put an ``Agent``'s tool calls behind one governed run.

    Args:
        governed: the run, opened by the trusted host (tenant, actor, context, capabilities).
        wait_s: how long a new call waiting for a reviewer is waited for before the agent pauses.
        resume_wait_s: how long a resumed call still waiting is waited for (a decision just
            made takes a moment to be carried out) before the agent pauses again.

    Raises:
        ProviderError: two offered capabilities would be offered under one tool name.
    """

    def __init__(self, governed: GovernedRun, *, wait_s: float = 0.0, resume_wait_s: float = 5.0) -> None:
        self.governed = governed
        self.wait_s = wait_s
        self.resume_wait_s = resume_wait_s
        self._names = tool_names(governed.tools)
        #: The argument text of each tool call the model sent, by its call id, until proposed.
        self._sent: dict[str, str] = {}
        self._middleware: list[AgentMiddleware | ChatMiddleware | FunctionMiddleware] = [
            _AskLockgate(), _KeepArgumentText(self._sent), _ProposeToLockgate(self)]

    @classmethod
    async def attach(cls, session: AgentSession, *, gateway: Gateway | None = None,
                     credentials: str | Path | None = None, var_dir: Path | None = None,
                     wait_s: float = 0.0, resume_wait_s: float = 5.0) -> Lockgate:
        """Take up the run a restored session was paused in (a new process resuming it).

        Raises:
            LookupError: the session holds no Lockgate run.
        """
        state = session.state.get(STATE_KEY)
        if not isinstance(state, dict) or not state.get("run_id"):
            raise LookupError("this session was not paused by Lockgate: it names no run")
        governed = await GovernedRun.attach(tenant=str(state["tenant"]), run_id=str(state["run_id"]),
                                            gateway=gateway, credentials=credentials, var_dir=var_dir)
        return cls(governed, wait_s=wait_s, resume_wait_s=resume_wait_s)

    @property
    def tools(self) -> list[FunctionTool]:
        """The current turn's catalogue as the framework's tools (name, description, JSON Schema)."""
        return [_declared(tool) for tool in self.governed.tools]

    def govern(self, tools: Sequence[FunctionTool | Callable[..., Any]], *,
               names: Mapping[str, str] | None = None) -> list[FunctionTool]:
        """An existing agent's tools, each declared from the catalogue entry of its name.

        A tool matches the capability of its name (``case.add_note`` or ``case__add_note``),
        or the one ``names`` maps it to. Its body never runs: Lockgate's adapter acts.

        Raises:
            LookupError: a tool stands for no capability this run offers.
        """
        offered = {tool.name: tool for tool in self.governed.tools}
        offered |= {provider_tool_name(tool.name): tool for tool in self.governed.tools}
        declared = []
        for tool in normalize_tools(list(tools)):
            name = str(getattr(tool, "name", ""))
            entry = offered.get((names or {}).get(name, name))
            if entry is None:
                raise LookupError(f"tool {name!r} is no capability offered in this run "
                                  f"(offered: {', '.join(sorted(self._names.values())) or 'none'})")
            declared.append(_declared(entry))
        return declared

    @property
    def middleware(self) -> list[AgentMiddleware | ChatMiddleware | FunctionMiddleware]:
        """The three middleware, for ``Agent(middleware=...)``: they work together."""
        return list(self._middleware)

    def waiting(self, session: AgentSession) -> list[Waiting]:
        """The calls this session is paused on, each waiting for a reviewer."""
        return [_waiting(Content.from_dict(request)) for request in _pauses(session).values()]

    def resume(self, session: AgentSession) -> Message | None:
        """The message that resumes a paused session, or None when it waits for nothing.

        It answers each pause the framework's way; the answer only makes the call be asked
        again (the same call id, the same bytes), and Lockgate says what became of it.
        """
        answers = [Content.from_dict(request).to_function_approval_response(True)
                   for request in _pauses(session).values()]
        return Message(role="user", contents=answers) if answers else None

    async def detach(self) -> None:
        """Close this process's connection, leaving paused calls for the reviewer and a resume.

        ``GovernedRun.close`` ends the run and withdraws them: use it when the agent is done.
        """
        await self.governed.detach()

    async def answer(self, context: FunctionInvocationContext) -> None:
        """Answer one tool call with Lockgate's answer: what the function middleware does.

        Raises:
            MiddlewareFailure: Lockgate could not be asked (the run stops, nothing ran).
        """
        framework_id = context.metadata.get("call_id")
        if not isinstance(framework_id, str) or not framework_id:
            raise MiddlewareFailure("a tool call without a call id cannot be proposed to Lockgate")
        tool = self._names.get(context.function.name, context.function.name)
        approval = context.metadata.get("approval_response")
        replay = approval is not None
        arguments = self._text(framework_id, context.arguments, approval)
        call_id = call_id_for(framework_id)
        try:
            if replay:
                outcome = await self.governed.resume(tool, arguments, call_id=call_id,
                                                     wait_s=self.resume_wait_s)
            else:
                outcome = await self.governed.propose(tool, arguments, call_id=call_id, wait_s=self.wait_s)
        except ClientError as exc:
            raise MiddlewareFailure(f"Lockgate did not answer call {call_id} ({exc.code})") from exc
        occurrence = context.metadata.get("function_call_occurrence_id")
        request_id = occurrence if isinstance(occurrence, str) and occurrence else framework_id
        pauses = self._state(context.session)
        if outcome.pending:
            pause = self._pause(request_id, framework_id, context.function.name, arguments, tool, outcome)
            pauses[request_id] = pause.to_dict()
            context.result = pause
        else:
            pauses.pop(request_id, None)
            context.result = outcome.text()

    def _text(self, framework_id: str, parsed: BaseModel | Mapping[str, Any], approval: object) -> str:
        """The argument text of a call: the one its pause recorded, for a replay; else the
        model's own text as the client handed it over; else the parsed arguments as JSON."""
        sent = self._sent.pop(framework_id, None)
        if isinstance(approval, Content) and approval.function_call is not None:
            recorded = approval.function_call.arguments
            if isinstance(recorded, str):
                return recorded
        if sent is not None:
            return sent if sent.strip() else NO_ARGUMENTS  # how providers spell "no arguments"
        return arguments_text(parsed)

    def _state(self, session: AgentSession | None) -> dict[str, Any]:
        """The session's record of this run and its pauses (a throwaway one without a session)."""
        if session is None:
            return {}
        state = session.state.setdefault(STATE_KEY, {})
        state.update(tenant=self.governed.tenant, run_id=self.governed.run_id)
        return cast(dict[str, Any], state.setdefault("waiting", {}))

    def _pause(self, request_id: str, framework_id: str, name: str, arguments: str, tool: str,
               outcome: Outcome) -> Content:
        """The framework's approval request for a call waiting in Lockgate."""
        call = Content.from_function_call(call_id=framework_id, name=name, arguments=arguments,
                                          id=request_id)
        named = {"candidate_id": outcome.final.candidate_id, "call_id": outcome.call_id, "tool": tool,
                 "status": outcome.final.status, "tenant": self.governed.tenant,
                 "run_id": self.governed.run_id, "message": outcome.content().get("message", "")}
        if outcome.replacement is not None:
            named["replaces"] = outcome.candidate_id
        return Content.from_function_approval_request(id=request_id, function_call=call,
                                                      additional_properties={PAUSE_KEY: named})


class _ProposeToLockgate(FunctionMiddleware):
    """Answers every tool call with Lockgate's answer; the function itself never runs."""

    def __init__(self, lockgate: Lockgate) -> None:
        self.lockgate = lockgate

    async def process(self, context: FunctionInvocationContext,
                      call_next: Callable[[], Awaitable[None]]) -> None:
        await self.lockgate.answer(context)


class _KeepArgumentText(ChatMiddleware):
    """Keeps the argument text of each tool call as the model sent it, for its proposal.

    The function middleware is handed parsed arguments only; Lockgate judges the model's
    own text (a duplicate key, text that is no JSON), so it is read off the model's answer.
    """

    def __init__(self, sent: dict[str, str]) -> None:
        self.sent = sent

    async def process(self, context: ChatContext, call_next: Callable[[], Awaitable[None]]) -> None:
        if context.stream:
            context.stream_result_hooks.append(self._keep)
        await call_next()
        if not context.stream and isinstance(context.result, ChatResponse):
            self._keep(context.result)

    def _keep(self, response: ChatResponse[Any]) -> None:
        for message in response.messages:
            for content in message.contents:
                if content.type == "function_call" and content.call_id and isinstance(content.arguments, str):
                    self.sent[content.call_id] = content.arguments


class _AskLockgate(AgentMiddleware):
    """Makes every host answer to a Lockgate pause a replay of the call.

    The framework would turn a "no" into a rejection without asking anyone, and a "yes"
    into running the function; either way only Lockgate knows what became of the call.
    """

    async def process(self, context: AgentContext, call_next: Callable[[], Awaitable[None]]) -> None:
        ours = set(_pauses(context.session))
        context.messages = [_asking(message, ours) for message in context.messages]
        await call_next()


def _asking(message: Message, ours: set[str]) -> Message:
    """``message`` with each host answer to a Lockgate pause made a replay (a copy if any changed)."""
    contents = [_replay(content) if _answers_a_pause(content, ours) else content
                for content in message.contents]
    if all(new is old for new, old in zip(contents, message.contents, strict=True)):
        return message
    return Message(role=message.role, contents=contents, author_name=message.author_name,
                   message_id=message.message_id, additional_properties=dict(message.additional_properties),
                   raw_representation=message.raw_representation)


def _answers_a_pause(content: Content, ours: set[str]) -> bool:
    return content.type == "function_approval_response" and content.approved is not True and (
        content.id in ours or PAUSE_KEY in (content.additional_properties or {}))


def _replay(answer: Content) -> Content:
    """The host's answer as the framework's "run it again": Lockgate answers the replay."""
    properties = dict(answer.additional_properties or {})
    properties["lockgate_host_answer"] = answer.approved
    return Content.from_function_approval_response(
        approved=True, id=str(answer.id), function_call=cast(Content, answer.function_call),
        annotations=answer.annotations, additional_properties=properties,
        raw_representation=answer.raw_representation)


def _pauses(session: AgentSession | None) -> dict[str, Any]:
    state = session.state.get(STATE_KEY) if session is not None else None
    waiting = state.get("waiting") if isinstance(state, dict) else None
    return cast(dict[str, Any], waiting) if isinstance(waiting, dict) else {}


def _waiting(request: Content) -> Waiting:
    named = (request.additional_properties or {}).get(PAUSE_KEY, {})
    return Waiting(candidate_id=str(named.get("candidate_id", "")), call_id=str(named.get("call_id", "")),
                   tool=str(named.get("tool", "")), status=str(named.get("status", "")))


def _declared(tool: Tool) -> FunctionTool:
    """A catalogue entry as a framework tool: what the model is offered, never run here."""

    def not_here(**arguments: Any) -> NoReturn:
        # Reached only when Lockgate's function middleware is missing: stop the run rather
        # than let the framework act (MiddlewareFailure is the loop's fail-closed exit).
        raise MiddlewareFailure(f"{tool.name} runs only through Lockgate: install Lockgate.middleware")

    return FunctionTool(name=provider_tool_name(tool.name), description=tool.description,
                        input_model=dict(tool.parameters), func=not_here)


@dataclass(frozen=True)
class ScriptedCall:
    """One tool call a ``ScriptedChatClient`` makes: the capability, the argument text, the call id."""

    tool: str
    arguments: str
    call_id: str


class ScriptedChatClient(FunctionInvocationLayer, ChatMiddlewareLayer, BaseChatClient):
    """A chat client for trying and testing without a model (the framework ships none).

    Its first step calls the scripted tools (under their provider-facing names); once the
    framework fed their results back, it answers with them. ``seen`` holds each tool result
    text it read, ``offered`` the tool names of its last request. Swap it for a real client.
    """

    def __init__(self, calls: Sequence[ScriptedCall], *, reply: str = "Done.") -> None:
        super().__init__()
        self.calls = tuple(calls)
        self.reply = reply
        self.seen: list[str] = []
        self.offered: list[str] = []

    def _inner_get_response(
        self, *, messages: Sequence[Message], stream: bool, options: Mapping[str, Any], **kwargs: Any,
    ) -> Awaitable[ChatResponse] | ResponseStream[ChatResponseUpdate, ChatResponse]:
        self.offered = [str(getattr(tool, "name", "")) for tool in options.get("tools") or ()]
        ours = {call.call_id for call in self.calls}
        results = [content for message in messages for content in message.contents
                   if content.type == "function_result" and content.call_id in ours]
        if results:
            self.seen = [str(content.result) for content in results]
            reply = Message(role="assistant", contents=[" ".join([self.reply, *self.seen])])
        else:
            reply = Message(role="assistant", contents=[
                Content.from_function_call(call_id=call.call_id, name=provider_tool_name(call.tool),
                                           arguments=call.arguments) for call in self.calls])
        response = ChatResponse(messages=[reply])
        if stream:
            async def updates() -> Any:
                yield ChatResponseUpdate(role="assistant", contents=list(reply.contents))
            return self._build_response_stream(updates())

        async def answered() -> ChatResponse:
            return response
        return answered()
