"""A run (one agent task) and its turns (one model step each), with what proposing in them returns."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lockgate.client.sdk.errors import InvalidCandidate, ResponseTimeout, UnknownCandidate
from lockgate.client.sdk.requests import request, request_again
from lockgate.contracts.messages import Candidate, CloseRun, OpenTurn, RunClosed, Tool, TurnOpened
from lockgate.contracts.responses import ModelResponse
from lockgate.contracts.subjects import run_close_subject, turn_subject
from lockgate.core.ids import intent_id_for, is_subject_token, random_id

if TYPE_CHECKING:
    from lockgate.client.sdk.gateway import Gateway

#: How long a candidate id may have no response before ``Run.wait`` says it is none of the
#: run's: intake answers a candidate as soon as it reads it (an edited candidate is read
#: moments after the reviewer's edit is answered).
KNOWN_WITHIN_S = 3.0


@dataclass
class Turn:
    """One model step: the tools offered in it and the proposals made from it."""

    run: Run
    id: str
    catalogue_digest: str
    tools: tuple[Tool, ...]

    async def propose(
        self, *, tool: str, arguments: str, call_id: str | None = None, timeout_s: float = 30.0,
        provider_item: dict[str, Any] | None = None, provider: str = "", model: str = "",
        follows: str | None = None, assembly_failure: str | None = None,
    ) -> ModelResponse:
        """Propose one tool call exactly as the model emitted it; return what the model sees.

        Proposing the same ``call_id`` again with the same tool and argument bytes is
        safe, in this turn or any later turn of the run (a framework resuming a paused
        step re-issues its call): it is one intent, and the answer is its current one
        (a call that was pending and has since executed answers ``executed``). Other
        bytes or another tool under a call id already used are refused
        (``rejected``/``proposal.invalid``, recorded as ``proposal.call-id-reused``); the
        earlier call's response is never returned for them.

        ``provider_item``, ``provider`` and ``model`` are evidence kept on the record
        (``lockgate.client.providers`` fills them from a provider's response). ``follows``
        names the call id of an earlier candidate of this run that this one corrects or
        follows (its lineage). ``assembly_failure`` records a call that could not be
        assembled from a stream (a ``stream.*`` code; ``arguments`` is what arrived): it
        is rejected with that cause, never run.

        Raises:
            CandidateTooLarge: the candidate is larger than Lockgate accepts in one message.
            InvalidCandidate: ``arguments`` is not text, or the candidate is one intake would
                refuse unread (nested deeper than it reads, a field of the wrong type) or
                cannot be encoded as JSON; nothing was sent.
            PermissionDenied: this connection's user may not propose in this tenant.
            ResponseTimeout: no response within ``timeout_s``.
        """
        if not isinstance(arguments, str):
            # Intake would refuse it unread, under an id of its own: say so now instead.
            raise InvalidCandidate(
                f"arguments must be the raw argument text the model emitted (str), not "
                f"{type(arguments).__name__}: pass it as the model wrote it, or json.dumps(...) it",
                code="candidate.malformed")
        candidate = Candidate(
            run_id=self.run.id, turn_id=self.id, call_id=call_id or random_id(), tool=tool,
            arguments=arguments, provider_item=provider_item, provider=provider, model=model,
            follows=follows, assembly_failure=assembly_failure)
        return await self.run.gateway._propose(self.run.tenant, candidate, timeout_s)


@dataclass
class Run:
    """One agent task, opened by the trusted host with authoritative context."""

    gateway: Gateway
    id: str
    tenant: str
    actor: str

    async def open_turn(self, turn_id: str | None = None) -> Turn:
        """Open a turn and get the catalogue the model may use in it.

        The turn's id is chosen here when not given, so an open that went unanswered is
        asked again under it (a turn opened twice is one snapshot) until ``OPEN_RETRY_S``.
        """
        opened = await request_again(
            self.gateway.nc, turn_subject(self.tenant, self.id),
            OpenTurn(turn_id=turn_id or random_id()), TurnOpened, self.gateway.timeout_s,
        )
        return Turn(self, opened.turn_id, opened.catalogue_digest, opened.tools)

    async def close(self, *, why: str = "") -> RunClosed:
        """End the run (the trusted host's call): it takes no more turns or calls, and every
        candidate it left waiting for a reviewer is withdrawn. The answer names them, with
        what each became (``withdrawn``, or how far it had got).

        Raises:
            Refused: no such run.
            PermissionDenied: this connection has no trusted host (``connect(host=...)``).
        """
        gateway = self.gateway
        return await request(gateway.host_nc or gateway.nc, run_close_subject(self.tenant),
                              CloseRun(run_id=self.id, why=why), RunClosed, max(gateway.timeout_s, 30.0))

    async def response(self, candidate_id: str) -> ModelResponse | None:
        """The latest model-facing response to a candidate, if any."""
        return await self.gateway._latest(self.tenant, self.id, candidate_id)

    async def withdraw(self, candidate_id: str, *, why: str = "") -> ModelResponse:
        """Stop a candidate of this run by its state; returns what the model now sees.

        ``withdrawn`` when it was stopped before any order existed (or an adapter has
        already refused the order), ``withdrawal_requested`` when an order may be with an
        adapter (``wait(candidate_id, past="withdrawal_requested")`` then says how it
        ended: ``withdrawn``, ``interruption_requested``, ``executed``, …),
        ``interruption_requested`` when it had already been sent, ``outcome_unknown``
        when nobody knows yet, and the final status (``executed``, ``rejected``, …) when
        it was too late. Only ``withdrawn`` means no adapter can still execute it.
        Who asked is recorded as this connection's user.

        Raises:
            Refused: no such candidate in this run, or it is between two steps (ask again).
        """
        return await self.gateway.withdraw(self.tenant, candidate_id, run_id=self.id, why=why)

    async def wait(
        self, candidate_id: str, *, past: str = "pending_approval", timeout_s: float = 30.0
    ) -> ModelResponse:
        """Wait until the candidate's latest response has a status other than ``past``.

        ``candidate_id`` is a response's ``candidate_id`` (or an edit's), not a call id.
        A candidate has its first response as soon as intake has read it; an id with none
        within ``KNOWN_WITHIN_S`` is no candidate of this run.

        Raises:
            UnknownCandidate: no candidate of this run has that id (a call id, another
                run's candidate, a typo).
            ResponseTimeout: still ``past`` after ``timeout_s``.
        """
        if not is_subject_token(candidate_id):
            raise UnknownCandidate(f"{candidate_id[:80]!r} is not a candidate id")
        running = asyncio.get_running_loop()
        started = running.time()
        deadline = started + timeout_s
        seen = False
        while True:
            latest = await self.response(candidate_id)
            if latest is not None and latest.status != past:
                return latest
            if latest is None and not seen:
                await self._unknown(candidate_id, running.time() - started)
            seen = seen or latest is not None
            if running.time() > deadline:
                raise ResponseTimeout(f"{candidate_id} still {past}", code="response.timeout")
            await asyncio.sleep(0.05)

    async def _unknown(self, candidate_id: str, waited_s: float) -> None:
        """Raise when ``candidate_id`` has no response yet and cannot be a candidate of this run.

        Raises:
            UnknownCandidate: it is a call id of this run, or has had no response for
                ``KNOWN_WITHIN_S``.
        """
        as_call = intent_id_for(self.tenant, self.id, candidate_id)
        if await self.response(as_call) is not None:
            raise UnknownCandidate(
                f"{candidate_id} is a call id of run {self.id}; its candidate id is {as_call}")
        if waited_s >= KNOWN_WITHIN_S:
            raise UnknownCandidate(
                f"no candidate {candidate_id} in run {self.id} of {self.tenant} (no response in "
                f"{KNOWN_WITHIN_S:g}s): wait on a response's candidate_id")

