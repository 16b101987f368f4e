"""A run's tools behind Lockgate, the way every framework integration uses them.

An agent framework runs tools; with Lockgate it never runs a governed one itself. Each
integration in this package turns the framework's tool call into a proposal here and
the answer into what the framework shows the model::

    governed = await GovernedRun.open(tenant="tenant-a", actor="user-42",
                                      context={"case_id": "case-123"}, capabilities=["case.add_note"])
    outcome = await governed.propose("case.add_note", '{"note": "Called back."}', call_id=tool_call_id)
    outcome.text()        # what the model reads: executed (result as untrusted data), refused, waiting
    outcome.pending       # a reviewer decides: pause the framework's run, resume it later with resume()

What holds, whatever the framework:

- The run (tenant, actor, context, the capabilities its agent uses) is opened by the
  trusted host's side: the model never chooses them.
- The call id is the framework's own tool-call id, and the argument text the model's
  own: the same call proposed again (a retried or resumed step, in any later turn, in a
  new process) is the same intent and gets its current answer, never a second effect.
- A pending review is the framework's pause. ``resume`` asks Lockgate for the intent's
  state: the framework's own "approve" authorizes nothing, only a reviewer's decision on
  the exact bytes does. A resume after the review was denied, expired or withdrawn gets
  that answer.
- A reviewer's edit is said truthfully: the call was replaced, and what the replacement
  did (``Outcome.replacement``).
- ``close`` ends the run and withdraws what it left waiting, so no reviewer approves an
  effect nobody waits for; a run nobody uses for its lease (``lease_s``, an hour by
  default) ends the same way, on the server, should the agent's process die.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import json
import re
import threading
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from lockgate.client.providers.formats import model_content
from lockgate.client.sdk import Gateway, Refused, ResponseTimeout, Run, Turn, connect
from lockgate.contracts.messages import Tool
from lockgate.contracts.responses import ModelResponse

T = TypeVar("T")

#: Statuses of a call that waits for someone (a reviewer, or policy's evidence).
WAITING = frozenset({"pending_approval", "paused"})
#: Statuses of a call whose end is not known yet: asked again until they settle.
SETTLING = frozenset({"withdrawal_requested", "interruption_requested"})
#: How long ``propose`` waits for a call that is settling (not one that waits for a person).
SETTLE_S = 30.0
#: How long a run may go unused before it ends (no turn opened, no call proposed).
DEFAULT_LEASE_S = 3600.0
#: The turn a run taken up after its end proposes in: its calls are answered from the
#: record, and nothing new is offered.
ENDED_TURN = "run-ended"


@dataclass(frozen=True)
class Outcome:
    """What became of one call, as the model may learn it.

    ``response`` is the call's own answer; ``replacement`` the answer to the call a
    reviewer's edit made of it (status ``replaced``), when there is one.
    """

    response: ModelResponse
    replacement: ModelResponse | None = None

    @property
    def candidate_id(self) -> str:
        return self.response.candidate_id

    @property
    def call_id(self) -> str:
        return self.response.call_id

    @property
    def final(self) -> ModelResponse:
        """The answer that says how it ended: the replacement's, for an edited call."""
        return self.replacement or self.response

    @property
    def status(self) -> str:
        return self.response.status

    @property
    def pending(self) -> bool:
        """True while a person (or policy's evidence) has yet to decide: pause, resume later."""
        return self.final.status in WAITING

    @property
    def executed(self) -> bool:
        """True when the effect happened (the edited call's, for a replaced one)."""
        return self.final.status == "executed"

    @property
    def refused(self) -> bool:
        """True when it did not run and will not (rejected, denied, withdrawn, unavailable, …)."""
        return self.final.status not in WAITING | SETTLING | {"executed", "outcome_unknown"}

    def content(self) -> dict[str, Any]:
        """The model-facing projection: status, code, a result nested as untrusted data.

        A waiting call says so and that the agent will be resumed; a replaced call says
        what its replacement did.
        """
        content = model_content(self.response)
        if self.response.status in WAITING:
            content["message"] = (
                "Waiting for a reviewer: this call runs only once a person approves it."
                if self.response.status == "pending_approval" else
                "Paused: policy is waiting for evidence before this call may run.")
        if self.replacement is not None:
            content["message"] = ("A reviewer changed this call; the changed call is what "
                                  "was proposed instead.")
            content["replacement"] = model_content(self.replacement)
        return content

    def text(self) -> str:
        """``content()`` as JSON text, the way a tool result reaches a model."""
        return json.dumps(self.content(), ensure_ascii=False, sort_keys=True)


@dataclass
class GovernedRun:
    """One agent run whose tool calls Lockgate decides; what each framework integration wraps.

    Open it with ``open`` (from the trusted host's side), or ``attach`` to a run opened
    elsewhere (a resumed agent in a new process).
    """

    run: Run
    turn: Turn | None = None
    #: Closed with the run when ``open`` connected it.
    owned: Gateway | None = None
    #: Candidates this object saw waiting, withdrawn by ``close`` unless they ended.
    waiting: dict[str, str] = field(default_factory=dict)
    #: The event loop ``in_thread`` started for this run, and the thread running it.
    loop: asyncio.AbstractEventLoop | None = field(default=None, repr=False)
    thread: threading.Thread | None = field(default=None, repr=False)

    @classmethod
    def in_thread(cls, opening: Callable[[], Coroutine[Any, Any, GovernedRun]]) -> GovernedRun:
        """Open (or attach) a run on an event loop of its own, in a thread of its own.

        For frameworks that call tools synchronously (LangChain's ``invoke``, say): their
        integrations then ``call`` the run's coroutines from any thread but that one::

            governed = GovernedRun.in_thread(lambda: GovernedRun.open(tenant=..., actor=...))
            outcome = governed.call(governed.propose("case.add_note", text, call_id=...))
            governed.call(governed.close()); governed.stop()
        """
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="lockgate-run", daemon=True)
        thread.start()
        try:
            governed: GovernedRun = asyncio.run_coroutine_threadsafe(opening(), loop).result()
        except BaseException:
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
            loop.close()
            raise
        governed.loop, governed.thread = loop, thread
        return governed

    def call(self, work: Coroutine[Any, Any, T], *, context: contextvars.Context | None = None) -> T:
        """Run one of this run's coroutines from synchronous code, and return its result.

        The run's event loop must be running in another thread (``in_thread``); from the
        loop's own thread this would wait forever, so it refuses. ``context``: the context
        variables the coroutine runs with (a framework's, to call its own functions there).

        Raises:
            RuntimeError: the run was not opened ``in_thread``, or this is its loop's thread.
        """
        loop = self.loop
        try:
            here = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        if loop is None or here is loop or not loop.is_running():
            work.close()
            raise RuntimeError("the run's event loop is not running in another thread: open it "
                               "with GovernedRun.in_thread, or use the framework's async API")
        return asyncio.run_coroutine_threadsafe(_within(work, context), loop).result()

    def stop(self) -> None:
        """Stop the thread ``in_thread`` started (after ``close`` or ``detach``)."""
        loop, thread = self.loop, self.thread
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()
        self.loop = self.thread = None

    @classmethod
    async def open(
        cls, *, tenant: str, actor: str, context: dict[str, str] | None = None,
        capabilities: Sequence[str] | None = None, stage: str = "default",
        roles: Sequence[str] = (), data_classes: Sequence[str] | None = None,
        gateway: Gateway | None = None, run_id: str | None = None,
        credentials: str | Path | None = None, var_dir: Path | None = None,
        lease_s: float | None = DEFAULT_LEASE_S,
    ) -> GovernedRun:
        """Open a run for one agent and its first turn.

        ``lease_s``: the run ends when nobody used it that long (``None``: only ``close``
        ends it); what it left waiting for a reviewer is then withdrawn.

        Without ``gateway``, connects to the local system (``lockgate.client.connect``)
        as the tenant's agent runtime (``agent-<tenant>``, or ``credentials``) and as the
        trusted host, which alone may open runs.
        """
        owned = None
        if gateway is None:
            gateway = owned = await connect(credentials=credentials or f"agent-{tenant}", host=True,
                                            var_dir=var_dir)
        try:
            run = await gateway.open_run(
                tenant=tenant, actor=actor, context=context or {}, stage=stage, roles=tuple(roles),
                data_classes=tuple(data_classes) if data_classes is not None else None,
                capabilities=capabilities, run_id=run_id, lease_s=lease_s)
            governed = cls(run, owned=owned)
            await governed.new_turn()
        except BaseException:
            if owned is not None:
                await owned.close()
            raise
        return governed

    @classmethod
    async def attach(
        cls, *, tenant: str, run_id: str, gateway: Gateway | None = None,
        credentials: str | Path | None = None, var_dir: Path | None = None,
    ) -> GovernedRun:
        """Take up a run opened before (by this agent in another process, say).

        A run that has ended since (closed, or unused past its lease) is taken up all the
        same, with no tools: resuming one of its calls tells what became of it (withdrawn,
        say), and a new call is refused (``run.ended``).
        """
        owned = None
        if gateway is None:
            gateway = owned = await connect(credentials=credentials or f"agent-{tenant}",
                                            var_dir=var_dir)
        governed = cls(gateway.run(tenant=tenant, run_id=run_id), owned=owned)
        try:
            await governed.new_turn()
        except Refused as refused:
            if refused.code != "run.ended":
                if owned is not None:
                    await owned.close()
                raise
            # Proposals name a turn; one of an ended run's calls is answered from its record.
            governed.turn = Turn(governed.run, ENDED_TURN, "", ())
        except BaseException:
            if owned is not None:
                await owned.close()
            raise
        return governed

    @property
    def run_id(self) -> str:
        return self.run.id

    @property
    def tenant(self) -> str:
        return self.run.tenant

    @property
    def tools(self) -> tuple[Tool, ...]:
        """The tools the current turn offers (name, description, JSON Schema of the model's arguments)."""
        return self.turn.tools if self.turn is not None else ()

    def tool(self, name: str) -> Tool | None:
        """The current turn's entry for ``name``."""
        return next((t for t in self.tools if t.name == name), None)

    async def new_turn(self) -> Turn:
        """Open the next turn: one model step, with the catalogue offered in it."""
        self.turn = await self.run.open_turn()
        return self.turn

    async def propose(self, tool: str, arguments: str, *, call_id: str,
                      wait_s: float = 0.0, timeout_s: float = 30.0) -> Outcome:
        """Propose one call exactly as the model emitted it; return what became of it.

        ``call_id`` is the framework's tool-call id (``[A-Za-z0-9_-]{1,64}``; see
        ``call_id_for`` for others). A call waiting for a reviewer is waited for up to
        ``wait_s`` (0: answered at once, ``pending``). Proposing the same call again is
        how a paused step is resumed (``resume``).
        """
        turn = self.turn or await self.new_turn()
        response = await turn.propose(tool=tool, arguments=arguments, call_id=call_id,
                                      timeout_s=timeout_s)
        return await self._settled(response, wait_s)

    async def resume(self, tool: str, arguments: str, *, call_id: str,
                     wait_s: float = 0.0, timeout_s: float = 30.0) -> Outcome:
        """Ask again after a pause: the same call, so the same intent and its current answer."""
        return await self.propose(tool, arguments, call_id=call_id, wait_s=wait_s,
                                  timeout_s=timeout_s)

    async def outcome(self, candidate_id: str, *, wait_s: float = 0.0) -> Outcome:
        """The current answer to a candidate of this run (by the id an outcome gave)."""
        response = await self.run.wait(candidate_id, past="", timeout_s=max(wait_s, 5.0))
        return await self._settled(response, wait_s)

    async def withdraw(self, candidate_id: str, *, why: str = "") -> Outcome:
        """Stop a candidate by its state; the answer says how far it got."""
        response = await self.run.withdraw(candidate_id, why=why)
        self.waiting.pop(candidate_id, None)
        return Outcome(response)

    async def close(self, *, why: str = "the agent's run ended") -> None:
        """End the run (with the trusted host's connection: the server withdraws everything
        it left waiting), else withdraw the calls this object saw waiting; then close a
        connection ``open`` made."""
        try:
            if self.run.gateway.host_nc is not None:
                await self.run.close(why=why)
                self.waiting.clear()
            for candidate_id in list(self.waiting):
                latest = await self.run.response(candidate_id)
                if latest is not None and latest.status in WAITING:
                    await self.run.withdraw(candidate_id, why=why)
                self.waiting.pop(candidate_id, None)
        finally:
            if self.owned is not None:
                await self.owned.close()
                self.owned = None

    async def detach(self) -> None:
        """Close a connection ``open`` or ``attach`` made and leave the run as it is.

        For a host that hands a paused run to another process (or to a later resume):
        what waits for a reviewer keeps waiting, until the run is closed or its lease
        runs out. ``close`` is the end of the run.
        """
        if self.owned is not None:
            await self.owned.close()
            self.owned = None

    async def __aenter__(self) -> GovernedRun:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    async def _settled(self, response: ModelResponse, wait_s: float) -> Outcome:
        """Follow a call to where the model should learn of it: past a settling status,
        through a reviewer's edit to its replacement, and, for up to ``wait_s``, past a
        review."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while True:
            response = await self._past(response, SETTLING, SETTLE_S)
            replacement = None
            if response.status == "replaced" and response.successor:
                replacement = await self.run.wait(response.successor, past="", timeout_s=SETTLE_S)
                replacement = await self._past(replacement, SETTLING, SETTLE_S)
            outcome = Outcome(response, replacement)
            left = deadline - loop.time()
            if not outcome.pending or left <= 0:
                break
            decided = await self._past(outcome.final, WAITING, left)
            if decided.status in WAITING:
                break  # still waiting when the time was up
            if replacement is None:
                response = decided  # decided, edited or withdrawn: follow it once more
                continue
            outcome = Outcome(response, await self._past(decided, SETTLING, SETTLE_S))
            break
        for answer in (outcome.response, outcome.replacement):
            if answer is not None and answer.status in WAITING:
                self.waiting[answer.candidate_id] = answer.call_id
            elif answer is not None:
                self.waiting.pop(answer.candidate_id, None)
        return outcome

    async def _past(self, response: ModelResponse, statuses: frozenset[str],
                    wait_s: float) -> ModelResponse:
        """The latest answer once its status is not one of ``statuses`` (or after ``wait_s``)."""
        latest = response
        while latest.status in statuses and wait_s > 0:
            try:
                return await self.run.wait(latest.candidate_id, past=latest.status, timeout_s=wait_s)
            except ResponseTimeout:
                return (await self.run.response(latest.candidate_id)) or latest
        return latest


async def _within(work: Coroutine[Any, Any, T], context: contextvars.Context | None) -> T:
    """``work`` run as a task of its own with ``context`` (the caller's, when given)."""
    return await asyncio.get_running_loop().create_task(work, context=context)


def call_id_for(framework_id: str) -> str:
    """A Lockgate call id for a framework's tool-call id that is not one already.

    Lockgate's call ids are ``[A-Za-z0-9_-]{1,64}``; most frameworks' ids are (``call_…``,
    ``toolu_…``), and are used as they are. Others are mapped to a stable digest, so the
    same framework id is always the same call.
    """
    if re.fullmatch(r"[A-Za-z0-9_-]{1,64}", framework_id):
        return framework_id
    return "fw-" + hashlib.sha256(framework_id.encode("utf-8", "surrogatepass")).hexdigest()[:40]
