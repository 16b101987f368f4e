"""Runs, turns and proposals over NATS; responses read from ``LG_RESPONSES``."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

import msgspec
import nats
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import Error as NatsError
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from nats.js.errors import APIError, NotFoundError

from lockgate.contracts.messages import (
    Candidate,
    DecideReview,
    OpenRun,
    OpenTurn,
    Recorded,
    Refusal,
    ResolveOutcome,
    RunOpened,
    Tool,
    TurnOpened,
    Withdraw,
)
from lockgate.contracts.responses import ModelResponse
from lockgate.contracts.subjects import (
    propose_subject,
    response_subject,
    run_open_subject,
    turn_subject,
)
from lockgate.core.errors import LockgateError
from lockgate.core.ids import (
    candidate_digest,
    intent_id_for,
    is_subject_token,
    random_id,
    reused_call_id_intent,
)
from lockgate.runtime.topology import MAX_CANDIDATE_MESSAGE_BYTES, RESPONSES

T = TypeVar("T")


class ClientError(LockgateError):
    """Root of the SDK's errors."""


class Refused(ClientError):
    """Lockgate refused a request (``code`` says why)."""

    def __init__(self, code: str, detail: str = "") -> None:
        super().__init__(f"{code}: {detail}" if detail else code, code=code)


class CandidateTooLarge(ClientError):
    """The candidate is larger than Lockgate accepts in one message (code ``candidate.too-large``)."""


class InvalidCandidate(ClientError):
    """The candidate cannot be sent as JSON text at all (code ``candidate.malformed``).

    A Python string holding a lone surrogate, say, or a provider item nested deeper than
    any encoder goes: nothing was published.
    """


#: JetStream's "message size exceeds maximum allowed" (the stream's ``max_msg_size``).
_JS_MESSAGE_TOO_LARGE = 10054


class ResponseTimeout(ClientError):
    """No model-facing response arrived in time; the candidate may still be in flight."""

    retryable = True


_response = msgspec.json.Decoder(ModelResponse)


def _answers(response: ModelResponse, digest: str) -> bool:
    """True when ``response`` answers the candidate whose bytes have ``digest``.

    Responses recorded before candidates were digested carry none: they answer the call id.
    """
    return response.candidate_digest is None or response.candidate_digest == digest


async def _request(nc: Client, subject: str, body: object, answer: type[T], timeout_s: float) -> T:
    try:
        reply = await nc.request(subject, msgspec.json.encode(body), timeout=timeout_s)
    except (NatsTimeout, NoRespondersError) as exc:
        raise ClientError(f"no answer on {subject}", code="lockgate.unavailable") from exc
    try:
        return msgspec.json.decode(reply.data, type=answer)
    except msgspec.ValidationError:
        refusal = msgspec.json.decode(reply.data, type=Refusal)
        raise Refused(refusal.error, refusal.detail) from None


@dataclass
class Turn:
    """One model step: the tools offered in it and the proposals made from it."""

    run: Run
    id: str
    catalogue_digest: str
    tools: tuple[Tool, ...]

    async def propose(
        self, *, tool: str, arguments: str, call_id: str | None = None, timeout_s: float = 30.0,
        provider_item: dict[str, Any] | None = None,
    ) -> ModelResponse:
        """Propose one tool call exactly as the model emitted it; return what the model sees.

        Proposing the same ``call_id`` again with the same bytes is safe: it is one
        intent, and the response is the one already given. Other bytes under a call id
        already used are refused (``rejected``/``proposal.invalid``, recorded as
        ``proposal.call-id-reused``); the earlier call's response is never returned for them.

        Raises:
            CandidateTooLarge: the candidate is larger than Lockgate accepts in one message.
            InvalidCandidate: the candidate cannot be encoded as JSON (nothing was sent).
            ResponseTimeout: no response within ``timeout_s``.
        """
        return await self.run.gateway._propose(self, tool, arguments, call_id or random_id(),
                                               timeout_s, provider_item)


@dataclass
class Run:
    """One agent task, opened by the trusted host with authoritative context."""

    gateway: Gateway
    id: str
    tenant: str
    actor: str

    async def open_turn(self, turn_id: str | None = None) -> Turn:
        """Open a turn and get the catalogue the model may use in it."""
        opened = await _request(
            self.gateway.nc, turn_subject(self.tenant, self.id), OpenTurn(turn_id=turn_id),
            TurnOpened, self.gateway.timeout_s,
        )
        return Turn(self, opened.turn_id, opened.catalogue_digest, opened.tools)

    async def response(self, candidate_id: str) -> ModelResponse | None:
        """The latest model-facing response to a candidate, if any."""
        return await self.gateway._latest(self.tenant, self.id, candidate_id)

    async def withdraw(self, candidate_id: str, *, why: str = "", by: str = "agent-runtime") -> ModelResponse:
        """Stop a candidate by its state; returns what the model now sees.

        ``withdrawn`` when it was stopped before execution, ``interruption_requested``
        when it had already been sent, ``outcome_unknown`` when nobody knows yet, and
        the final status (``executed``, ``rejected``, …) when it was too late.

        Raises:
            Refused: no such candidate, or it is between two steps (ask again).
        """
        return await _request(
            self.gateway.nc, f"lg.withdraw.{self.tenant}.{candidate_id}", Withdraw(by=by, why=why),
            ModelResponse, self.gateway.timeout_s,
        )

    async def wait(
        self, candidate_id: str, *, past: str = "pending_approval", timeout_s: float = 30.0
    ) -> ModelResponse:
        """Wait until the candidate's latest response has a status other than ``past``.

        Raises:
            ResponseTimeout: still ``past`` (or no response) after ``timeout_s``.
        """
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            latest = await self.response(candidate_id)
            if latest is not None and latest.status != past:
                return latest
            if asyncio.get_running_loop().time() > deadline:
                raise ResponseTimeout(f"{candidate_id} still {past}", code="response.timeout")
            await asyncio.sleep(0.05)


class Gateway:
    """A connection to Lockgate."""

    def __init__(self, nc: Client, *, timeout_s: float = 5.0) -> None:
        self.nc = nc
        self.timeout_s = timeout_s
        self._js = nc.jetstream()

    async def open_run(
        self, *, tenant: str, actor: str, context: Mapping[str, str] | None = None,
        delegation: str | None = None, stage: str = "default", run_id: str | None = None,
        roles: tuple[str, ...] = (),
    ) -> Run:
        """Open a run (the trusted host's call: it sets who acts and on what).

        Raises:
            Refused: malformed ids or a tenant mismatch.
        """
        if not is_subject_token(tenant):
            raise Refused("run.malformed", "tenants must be [A-Za-z0-9_-]{1,64}")
        opened = await _request(
            self.nc, run_open_subject(tenant),
            OpenRun(tenant=tenant, actor=actor, context=dict(context or {}),
                    delegation=delegation, stage=stage, run_id=run_id, roles=tuple(roles)),
            RunOpened, self.timeout_s,
        )
        return Run(self, opened.run_id, opened.tenant, opened.actor)

    async def decide_review(
        self, *, tenant: str, candidate_id: str, review_id: str, digest: str, reviewer: str,
        approve: bool, reason: str = "",
    ) -> str:
        """Approve or deny a review (a reviewer's call); returns the event recorded."""
        recorded = await _request(
            self.nc, f"lg.review.{tenant}.{candidate_id}.decide",
            DecideReview(review_id=review_id, digest=digest, reviewer=reviewer,
                         approve=approve, reason=reason),
            Recorded, self.timeout_s,
        )
        return recorded.event

    async def resolve_outcome(
        self, *, tenant: str, candidate_id: str, finding: str, by: str, why: str,
        receipt: Mapping[str, str] | None = None,
    ) -> str:
        """Settle an unknown outcome as an operator (``confirmed`` or ``absent``); returns the event recorded."""
        recorded = await _request(
            self.nc, f"lg.reconcile.{tenant}.{candidate_id}.resolve",
            ResolveOutcome(finding=finding, by=by, why=why, receipt=dict(receipt or {})),
            Recorded, self.timeout_s,
        )
        return recorded.event

    async def _latest(self, tenant: str, run_id: str, candidate_id: str) -> ModelResponse | None:
        subject = response_subject(tenant, run_id, candidate_id)
        try:
            msg = await self._js.get_last_msg(RESPONSES, subject, direct=True)
        except NotFoundError:
            return None
        return _response.decode(msg.data or b"")

    async def _propose(
        self, turn: Turn, tool: str, arguments: str, call_id: str, timeout_s: float,
        provider_item: dict[str, Any] | None,
    ) -> ModelResponse:
        run = turn.run
        if not is_subject_token(call_id):
            raise Refused("candidate.malformed", "call ids must be [A-Za-z0-9_-]{1,64}")
        try:
            body = msgspec.json.encode(
                Candidate(run_id=run.id, turn_id=turn.id, call_id=call_id, tool=tool,
                          arguments=arguments, provider_item=provider_item)
            )
        except (UnicodeEncodeError, RecursionError, msgspec.EncodeError, TypeError) as exc:
            raise InvalidCandidate(f"the candidate cannot be encoded: {exc}",
                                   code="candidate.malformed") from exc
        limit = min(self.nc.max_payload, MAX_CANDIDATE_MESSAGE_BYTES)
        if len(body) > limit:
            raise CandidateTooLarge(f"{len(body)} bytes exceed the {limit} a candidate may have",
                                    code="candidate.too-large")
        digest = candidate_digest(body)
        own = intent_id_for(run.tenant, run.id, call_id)
        reuse = reused_call_id_intent(run.tenant, run.id, call_id, digest)
        arrived: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue()

        def into(which: str) -> Callable[[Msg], Awaitable[None]]:
            async def put(msg: Msg) -> None:
                arrived.put_nowait((which, msg.data))
            return put

        subs = [await self.nc.subscribe(response_subject(run.tenant, run.id, own), cb=into(own)),
                await self.nc.subscribe(response_subject(run.tenant, run.id, reuse), cb=into(reuse))]
        try:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout_s
            # The message id names the bytes: a repeat of the same call is deduplicated by
            # the stream, a call id reused with other bytes reaches intake to be refused.
            repeated = await self._publish_candidate(propose_subject(run.tenant, run.id), body,
                                                     f"{run.id}.{call_id}.{digest[7:23]}", deadline)
            # The call id's own intent answers this call only if it recorded these bytes;
            # otherwise the refusal comes on the reused call's intent.
            other_bytes = False
            ask_stream = repeated
            while True:
                # A repeated call was deduplicated: its response may already exist. And a
                # response published while this connection was reconnecting (or a repeat
                # after the stream's duplicate window, which intake answers with nothing new)
                # is only in the stream, so the stream is asked every second while waiting.
                # A new call's answer is on its way to the subscriptions: no need to ask.
                try:
                    if ask_stream and not other_bytes:
                        earlier = await self._latest(run.tenant, run.id, own)
                        if earlier is not None and _answers(earlier, digest):
                            return earlier
                        other_bytes = earlier is not None
                    if ask_stream and other_bytes:
                        refusal = await self._latest(run.tenant, run.id, reuse)
                        if refusal is not None:
                            return refusal
                except (NatsError, TimeoutError):
                    pass  # the connection is reconnecting; keep waiting
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise ResponseTimeout(
                        f"no response to {call_id} within {timeout_s}s", code="response.timeout"
                    )
                try:
                    which, data = await asyncio.wait_for(arrived.get(), min(remaining, 1.0))
                except TimeoutError:
                    ask_stream = True
                    continue
                response = _response.decode(data)
                if which == reuse or _answers(response, digest):
                    return response
                other_bytes = True
        finally:
            for sub in subs:
                await sub.unsubscribe()

    async def _publish_candidate(self, subject: str, body: bytes, msg_id: str, deadline: float) -> bool:
        """Publish until the stream acknowledges; True when it already held these bytes.

        Safe to repeat: the stream deduplicates by id (and says so in its ack).

        A JetStream refusal with status 400 is permanent (the same bytes will be refused
        again), so it ends at once instead of being retried until the deadline.

        Raises:
            CandidateTooLarge: the stream refused the message as too large.
            ClientError: the stream refused it otherwise, or did not answer in time.
        """
        loop = asyncio.get_running_loop()
        while True:
            try:
                ack = await self._js.publish(subject, body, headers={"Nats-Msg-Id": msg_id},
                                             timeout=self.timeout_s)
                return bool(ack.duplicate)
            except APIError as exc:
                if exc.err_code == _JS_MESSAGE_TOO_LARGE:
                    raise CandidateTooLarge(f"the stream refused {len(body)} bytes: {exc.description}",
                                            code="candidate.too-large") from exc
                if exc.code == 400:
                    raise ClientError(f"candidate refused by the stream: {exc.description}",
                                      code="candidate.refused") from exc
                if loop.time() + 0.5 > deadline:
                    raise ClientError(f"candidate not accepted: {exc!r}", code="lockgate.unavailable") from exc
                await asyncio.sleep(0.5)
            except (NatsError, TimeoutError) as exc:
                if loop.time() + 0.5 > deadline:
                    raise ClientError(f"candidate not accepted: {exc!r}", code="lockgate.unavailable") from exc
                await asyncio.sleep(0.5)

    async def close(self) -> None:
        """Close the connection."""
        await self.nc.close()

    async def __aenter__(self) -> Gateway:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


async def connect(url: str = "nats://127.0.0.1:4222", *, timeout_s: float = 5.0, **options: Any) -> Gateway:
    """Connect to Lockgate's broker.

    Raises:
        ClientError: the broker cannot be reached.
    """
    try:
        nc = await nats.connect(url, max_reconnect_attempts=options.pop("max_reconnect_attempts", 3),
                                connect_timeout=options.pop("connect_timeout", 2), **options)
    except Exception as exc:  # nats raises several unrelated types for "cannot connect"
        raise ClientError(f"cannot connect to {url}: {exc}", code="lockgate.unavailable") from exc
    return Gateway(nc, timeout_s=timeout_s)
