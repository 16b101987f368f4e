"""One binding's run: a turn per ``tools/list``, a proposal per ``tools/call``, a task per waiting call.

A binding is a handshake-era MCP session (its own run), or the stateless era's requests
of one front door process (one run, under a lease, opened again when it ends). The run
is the trusted host's (tenant, actor, context from the settings, opened with the host's
credentials); the MCP client only lists and calls. Every call goes to Lockgate, offered
or not, and comes back as the model-facing projection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import mcp_types as types

from lockgate.client.mcp import results, tasks
from lockgate.client.mcp.names import NO_NAMES, ToolNames
from lockgate.client.mcp.settings import FrontSettings
from lockgate.client.mcp.tasks import TaskIds, TaskRef
from lockgate.client.sdk import (
    ClientError,
    Gateway,
    Refused,
    ResponseTimeout,
    Run,
    Turn,
    UnknownCandidate,
    connect,
)
from lockgate.contracts.responses import ModelResponse
from lockgate.core.errors import LockgateError
from lockgate.core.ids import intent_id_for, is_subject_token

log = logging.getLogger("lockgate.client.mcp")

#: Calls remembered per session, to put a retried request in the turn of its first try.
MAX_REMEMBERED_CALLS = 4096
#: Reviewers' edits of one call a task follows to the call that was decided.
MAX_EDITS_FOLLOWED = 8


class Lockgate:
    """The process's connection to Lockgate (the agent runtime's and the host's users), made when first needed.

    A connection the client library gave up on (the broker was away too long) is made
    again on the next use.
    """

    def __init__(self, settings: FrontSettings) -> None:
        self.settings = settings
        self._gateway: Gateway | None = None
        self._lock = asyncio.Lock()

    async def gateway(self) -> Gateway:
        """The connection, opened now if there is none.

        Raises:
            ClientError: the broker cannot be reached, or a credentials file is unusable.
        """
        async with self._lock:
            gw = self._gateway
            if gw is not None and not gw.nc.is_closed and (gw.host_nc is None or not gw.host_nc.is_closed):
                return gw
            if gw is not None:
                await _quietly_close(gw)
            s = self.settings
            self._gateway = await connect(s.broker_url(), credentials=s.agent_credentials(),
                                          host=s.host_credentials(), timeout_s=s.timeout_s,
                                          reconnect_time_wait=s.reconnect_wait_s)
            return self._gateway

    async def close(self) -> None:
        """Close the connection, if open."""
        async with self._lock:
            if self._gateway is not None:
                await _quietly_close(self._gateway)
                self._gateway = None


async def _quietly_close(gw: Gateway) -> None:
    try:
        await gw.close()
    except Exception as exc:  # closing a connection that already broke: nothing left to do
        log.debug("closing the broker connection: %s", exc)


@dataclass(frozen=True)
class _Call:
    turn: Turn


#: Refusals that say the run is over: a binding that may open another does, once.
_RUN_OVER = ("run.ended", "run.unknown")


class FrontSession:
    """The Lockgate side of one binding: a handshake session's run, or the stateless era's.

    ``lease_s`` None: the run is the session's, opened once and never replaced (its end
    is the session's). A lease: the run ends when idle that long, and the next request
    opens another (the stateless era, whose run outlives any one request).
    """

    def __init__(self, lockgate: Lockgate, tasks: TaskIds, *, lease_s: float | None = None) -> None:
        self.lockgate = lockgate
        self.settings = lockgate.settings
        self.tasks = tasks
        self.lease_s = lease_s
        self._run: Run | None = None
        self._turn: Turn | None = None
        self._names = NO_NAMES
        self._offered: str | None = None
        self._calls: OrderedDict[str, _Call] = OrderedDict()
        self._lock = asyncio.Lock()

    @property
    def run_id(self) -> str | None:
        """The binding's run, once opened."""
        return self._run.id if self._run is not None else None

    async def open(self) -> Run:
        """The binding's run, opened by the trusted host on first need.

        Raises:
            ClientError: Lockgate did not answer, or refused the run.
        """
        async with self._lock:
            return await self._open()

    async def _open(self) -> Run:
        if self._run is None:
            s = self.settings
            gw = await self.lockgate.gateway()
            self._run = await gw.open_run(
                tenant=s.tenant, actor=s.actor, context=s.context, stage=s.stage, roles=s.roles,
                data_classes=s.data_classes, lease_s=self.lease_s)
            log.info("run %s opened (tenant %s%s)", self._run.id, s.tenant,
                     "" if self.lease_s is None else f", lease {self.lease_s:g}s")
        return self._run

    async def _new_turn(self) -> Turn:
        run = await self._open()
        try:
            turn = await run.open_turn()
        except Refused as exc:
            if self.lease_s is None or exc.code not in _RUN_OVER:
                raise
            log.info("run %s is over (%s): opening another", run.id, exc.code)
            self._run = None
            turn = await (await self._open()).open_turn()
        self._turn = turn
        self._names = ToolNames.of((tool.name for tool in turn.tools), reserved=(results.STATUS_TOOL,))
        return turn

    async def list_tools(self) -> types.ListToolsResult:
        """A new turn's catalogue, as MCP tools (and the front door's status tool).

        Raises:
            ClientError: Lockgate did not answer.
        """
        async with self._lock:
            turn = await self._new_turn()
            names = self._names
            self._offered = turn.catalogue_digest
        # Any call may wait for a person: a client that can take a task may ask for one.
        tools = [types.Tool(name=names.to_mcp[tool.name], description=tool.description,
                            input_schema=dict(tool.parameters),
                            execution=types.ToolExecution(task_support="optional"))
                 for tool in turn.tools]
        tools.append(types.Tool(name=results.STATUS_TOOL, description=results.STATUS_TOOL_DESCRIPTION,
                                input_schema=results.STATUS_TOOL_SCHEMA))
        return types.ListToolsResult(tools=tools)

    async def offer_changed(self) -> bool:
        """Open the next turn and say whether it offers another catalogue than the one last listed.

        Called after each call: the model's next step is a new turn, and what it offers can
        differ from the last listing (a capability whose adapter went quiet, one offered only
        after another executed, a budget spent). Once said, a change is not said again
        until the catalogue changes once more. False when nothing was listed yet, or
        Lockgate did not answer (the next call asks again).
        """
        async with self._lock:
            if self._offered is None:
                return False
            try:
                turn = await self._new_turn()
            except LockgateError as exc:
                log.info("opening the next turn: %s", exc)
                return False
            changed = turn.catalogue_digest != self._offered
            self._offered = turn.catalogue_digest
        return changed

    async def call_tool(self, name: str, arguments: dict[str, Any] | None, call_id: str) -> types.CallToolResult:
        """Propose the call in the latest turn (a retry: in its first try's), answer its projection.

        Never raises for Lockgate's errors: a broker that does not answer is an error result.
        """
        if name == results.STATUS_TOOL:
            return await self.status(arguments)
        answer = await self.propose(name, arguments, call_id)
        return answer if isinstance(answer, types.CallToolResult) else results.tool_result(answer)

    async def propose(self, name: str, arguments: dict[str, Any] | None,
                      call_id: str) -> ModelResponse | types.CallToolResult:
        """Lockgate's answer to a call, or the error result saying it gave none.

        Never raises for Lockgate's errors.
        """
        try:
            turn, response = await self._propose(name, arguments, call_id)
            if response.code in _RUN_OVER and self.lease_s is not None:
                async with self._lock:  # the run ended under the call: the next run takes it
                    self._calls.pop(call_id, None)
                    if self._run is turn.run:
                        self._run = None
                        self._turn = None
                _, response = await self._propose(name, arguments, call_id)
        except ResponseTimeout as exc:
            run = self._run
            pending = intent_id_for(run.tenant, run.id, call_id) if run is not None else None
            return results.error_result(exc.code, "Lockgate did not answer in time; the call may "
                                        "still be in flight.", candidate_id=pending)
        except LockgateError as exc:
            log.warning("tools/call %s: %s", name, exc)
            return results.error_result(exc.code, _said(exc))
        except Exception as exc:  # nats raises its own types for a connection that broke mid-call
            log.warning("tools/call %s: %r", name, exc)
            return results.error_result("lockgate.unavailable", "Lockgate could not be asked.")
        return response

    async def _propose(self, name: str, arguments: dict[str, Any] | None,
                       call_id: str) -> tuple[Turn, ModelResponse]:
        async with self._lock:
            remembered = self._calls.get(call_id)
            if remembered is not None:
                turn = remembered.turn
            else:
                turn = self._turn or await self._new_turn()
                self._remember(call_id, turn)
            tool = self._names.capability(name)
        response = await turn.propose(tool=tool, arguments=results.arguments_text(arguments),
                                      call_id=call_id, timeout_s=self.settings.propose_timeout_s)
        return turn, response

    def _remember(self, call_id: str, turn: Turn) -> None:
        self._calls[call_id] = _Call(turn)
        while len(self._calls) > MAX_REMEMBERED_CALLS:
            self._calls.popitem(last=False)

    def task_id(self, response: ModelResponse) -> tuple[str, TaskRef]:
        """The task id of a waiting call's candidate (of this binding's current run)."""
        run = self._run
        if run is None:  # a response came from a run, so there is one
            raise RuntimeError("no run to name a task of")
        task_id = self.tasks.mint(run.id, response.candidate_id)
        ref = self.tasks.read(task_id)
        if ref is None:
            raise RuntimeError("a task id this binding minted does not read back")
        return task_id, ref

    async def task(self, ref: TaskRef, *, wait: bool) -> ModelResponse | None:
        """The latest answer of a task's intent (an edited call: its edit's), None if there is none.

        ``wait``: a working task is given ``status_wait_s`` to move on first.

        Raises:
            ClientError: Lockgate did not answer.
        """
        run = (await self.lockgate.gateway()).run(tenant=self.settings.tenant, run_id=ref.run_id)
        candidate_id = ref.candidate_id
        latest = await run.response(candidate_id)
        for _ in range(MAX_EDITS_FOLLOWED):
            if latest is None or latest.status != "replaced" or latest.successor is None:
                break
            candidate_id = latest.successor
            latest = await run.response(candidate_id) or latest
        if latest is not None and wait and latest.status in tasks.MOVING and self.settings.status_wait_s > 0:
            with contextlib.suppress(ResponseTimeout):
                latest = await run.wait(candidate_id, past=latest.status, timeout_s=self.settings.status_wait_s)
        return latest

    async def outcome(self, ref: TaskRef) -> ModelResponse | None:
        """A task's answer once it is no longer working (``tasks/result`` of the handshake era waits for it).

        Raises:
            ClientError: Lockgate did not answer.
        """
        while True:
            latest = await self.task(ref, wait=False)
            if latest is None or latest.status not in tasks.MOVING:
                return latest
            run = (await self.lockgate.gateway()).run(tenant=self.settings.tenant, run_id=ref.run_id)
            with contextlib.suppress(ResponseTimeout):  # still working: ask again
                await run.wait(latest.candidate_id, past=latest.status, timeout_s=self.settings.propose_timeout_s)

    async def cancel(self, ref: TaskRef) -> ModelResponse | None:
        """Withdraw a task's candidate by its state; the answer it reached (None: no such candidate).

        A candidate that had executed before the withdrawal landed stays executed; one
        whose order may be with an adapter is given ``status_wait_s`` to say how it ended.

        Raises:
            ClientError: Lockgate did not answer.
        """
        run = (await self.lockgate.gateway()).run(tenant=self.settings.tenant, run_id=ref.run_id)
        try:
            answer = await run.withdraw(ref.candidate_id, why="the MCP client cancelled its task")
        except UnknownCandidate:
            return None
        except Refused as exc:  # between two steps: its current state is the answer
            log.info("cancelling task of %s: %s", ref.candidate_id, exc)
            return await run.response(ref.candidate_id)
        if answer.status in tasks.MOVING and self.settings.status_wait_s > 0:
            with contextlib.suppress(ResponseTimeout):
                answer = await run.wait(ref.candidate_id, past=answer.status,
                                        timeout_s=self.settings.status_wait_s)
        return answer

    async def status(self, arguments: dict[str, Any] | None) -> types.CallToolResult:
        """The current projection of one of this run's candidates, waiting briefly for a waiting one to move on."""
        candidate_id = (arguments or {}).get("candidate_id")
        if not isinstance(candidate_id, str) or not is_subject_token(candidate_id):
            return results.error_result(results.STATUS_MALFORMED,
                                        "candidate_id must be the id a waiting call's result gave.")
        try:
            async with self._lock:
                run = await self._open()
            latest = await run.response(candidate_id)
            if latest is None:
                return results.error_result(results.STATUS_UNKNOWN_CANDIDATE,
                                            "No call of this run has that candidate_id.")
            if latest.status in results.WAITING and self.settings.status_wait_s > 0:
                with contextlib.suppress(ResponseTimeout):  # still waiting: say so
                    latest = await run.wait(candidate_id, past=latest.status,
                                            timeout_s=self.settings.status_wait_s)
        except LockgateError as exc:
            log.warning("%s: %s", results.STATUS_TOOL, exc)
            return results.error_result(exc.code, _said(exc))
        except Exception as exc:  # nats raises its own types for a broken connection
            log.warning("%s: %s", results.STATUS_TOOL, exc)
            return results.error_result("lockgate.unavailable", "Lockgate could not be asked.")
        return results.tool_result(latest)


def _said(exc: LockgateError) -> str:
    """What the MCP client is told of one of Lockgate's errors: that it happened, never the internals."""
    if isinstance(exc, ClientError) and exc.code in ("lockgate.unavailable", "response.timeout"):
        return "Lockgate did not answer."
    return "Lockgate refused the request."
