"""The gateway: one NATS user's connection to Lockgate, and how a proposal's response is awaited."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType

import msgspec
from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.js.errors import APIError, NotFoundError

from lockgate.client.sdk.denials import unless_denied
from lockgate.client.sdk.errors import (
    CandidateTooLarge,
    ClientError,
    InvalidCandidate,
    OutcomeSettled,
    PermissionDenied,
    Refused,
    ResponseTimeout,
)
from lockgate.client.sdk.requests import ask, request, request_again
from lockgate.client.sdk.runs import Run
from lockgate.client.sdk.wakeups import Wakeups, pause_after, was_woken
from lockgate.contracts import subjects
from lockgate.contracts.messages import (
    Candidate,
    DecideReview,
    Edited,
    EditReview,
    NotResolved,
    OpenRun,
    PolicyCommand,
    PolicyStatus,
    Recorded,
    ResolveOutcome,
    ReviewView,
    RunOpened,
    Withdraw,
)
from lockgate.contracts.responses import ModelResponse
from lockgate.contracts.subjects import propose_subject, response_subject, run_open_subject
from lockgate.core.ids import (
    call_digest,
    intent_id_for,
    is_subject_token,
    random_id,
    reused_call_id_intent,
)
from lockgate.intake.parsing import decode_candidate
from lockgate.operations.roles import JS_API
from lockgate.runtime.topology import MAX_CANDIDATE_MESSAGE_BYTES, RESPONSES

#: JetStream's "message size exceeds maximum allowed" (the stream's ``max_msg_size``).
_JS_MESSAGE_TOO_LARGE = 10054

_response = msgspec.json.Decoder(ModelResponse)
_candidate_encoder = msgspec.json.Encoder()


def _answers(response: ModelResponse, digest: str) -> bool:
    """True when ``response`` answers the candidate whose bytes have ``digest``.

    Responses recorded before candidates were digested carry none: they answer the call id.
    """
    return response.candidate_digest is None or response.candidate_digest == digest


@dataclass(frozen=True)
class _Call:
    """A proposed call as its response is looked for: its digest, and the two intents that may answer."""

    tenant: str
    run_id: str
    call_id: str
    digest: str
    #: The call id's own intent: it answers if it recorded these bytes.
    own: str
    #: The intent a call id reused with other bytes is refused on.
    reuse: str


class Gateway:
    """A connection to Lockgate as one NATS user (and, for a trusted host, a second one).

    ``nc`` is the agent runtime's (or reviewer's, or operator's) connection; ``host_nc``,
    when given, is the trusted host's, used only to open runs. ``user`` is the NATS user
    of ``nc``, under which withdrawals are recorded; ``principal`` the person behind it
    (``reviewer-alice`` is ``alice``), under which reviews and resolutions are.
    """

    def __init__(
        self, nc: Client, *, timeout_s: float = 5.0, host_nc: Client | None = None,
        js_prefix: str = JS_API, user: str = "anonymous", principal: str = "",
    ) -> None:
        self.nc = nc
        self.host_nc = host_nc
        self.timeout_s = timeout_s
        self.user = user
        self.principal = principal or user
        self._js = nc.jetstream(prefix=js_prefix)
        self._js_prefix = js_prefix
        self._wakeups = Wakeups(nc)

    async def open_run(
        self, *, tenant: str, actor: str, context: Mapping[str, str] | None = None,
        delegation: str | None = None, stage: str = "default", run_id: str | None = None,
        roles: tuple[str, ...] = (), data_classes: tuple[str, ...] | None = None,
        capabilities: Sequence[str] | None = None, lease_s: float | None = None,
    ) -> Run:
        """Open a run (the trusted host's call: it sets who acts and on what).

        ``stage``, ``roles``, ``data_classes`` (the classes of data the run may touch;
        ``None``: any) and ``capabilities`` (the ones its agent uses; ``None``: every one
        of the deployment) decide which capabilities its turns offer, with each
        capability's own rules (``lockgate.contracts.offer``).

        ``lease_s``: the run ends when it has been idle that long (no turn opened, no call
        proposed), as ``Run.close`` ends it (``None``: only when closed).

        The run's id is chosen here when not given, so an open that went unanswered (a
        cluster electing a leader, say) is asked again under it, until ``OPEN_RETRY_S``:
        the same run, not a second one.

        Raises:
            Refused: malformed ids or a tenant mismatch.
            PermissionDenied: the user opening it is not the tenant's trusted host (without
                ``host=`` at ``connect``, the runtime's own user opens it, and may not).
            ClientError: nobody answered (``lockgate.unavailable``) within ``OPEN_RETRY_S``.
        """
        if not is_subject_token(tenant):
            raise Refused("run.malformed", "tenants must be [A-Za-z0-9_-]{1,64}")
        try:
            opened = await request_again(
                self.host_nc or self.nc, run_open_subject(tenant),
                OpenRun(tenant=tenant, actor=actor, context=dict(context or {}),
                        delegation=delegation, stage=stage, run_id=run_id or random_id(),
                        roles=tuple(roles),
                        data_classes=tuple(data_classes) if data_classes is not None else None,
                        capabilities=tuple(capabilities) if capabilities is not None else None,
                        lease_s=lease_s),
                RunOpened, self.timeout_s,
            )
        except PermissionDenied as exc:
            if self.host_nc is not None:
                raise
            raise PermissionDenied(
                f"{exc}: runs are opened by the trusted host; connect with host= (its "
                "credentials, e.g. var/credentials/host.json)", subject=exc.subject) from None
        return Run(self, opened.run_id, opened.tenant, opened.actor)

    def run(self, *, tenant: str, run_id: str, actor: str = "") -> Run:
        """A run someone else opened (the host), to propose in it from this connection."""
        return Run(self, run_id, tenant, actor)

    async def withdraw(
        self, tenant: str, candidate_id: str, *, run_id: str = "_", why: str = ""
    ) -> ModelResponse:
        """Stop a candidate by its state (``run_id``: its run; ``_`` for an operator, who may stop any).

        Raises:
            Refused: no such candidate (in that run), or it is between two steps.
        """
        return await request(
            self.nc, subjects.withdraw(tenant, run_id, candidate_id, self.user), Withdraw(why=why),
            ModelResponse, self.timeout_s,
        )

    async def show_review(self, *, tenant: str, candidate_id: str) -> ReviewView:
        """The open review of a candidate, as this reviewer may see it.

        Raises:
            Refused: no open review, or not this reviewer's to see.
        """
        return await request(
            self.nc, subjects.review(tenant, candidate_id, "show", self.principal),
            {}, ReviewView, self.timeout_s,
        )

    async def decide_review(
        self, *, tenant: str, candidate_id: str, review_id: str, digest: str, approve: bool,
        reason: str = "",
    ) -> str:
        """Approve or deny a review as this reviewer; returns the event recorded.

        Raises:
            Refused: unknown or closed review, another digest, or policy does not let
                this reviewer approve it (``review.self-approval``, ...).
        """
        recorded = await request(
            self.nc, subjects.review(tenant, candidate_id, "decide", self.principal),
            DecideReview(review_id=review_id, digest=digest, approve=approve, reason=reason),
            Recorded, self.timeout_s,
        )
        return recorded.event

    async def edit_review(
        self, *, tenant: str, candidate_id: str, review_id: str, digest: str, arguments: str,
        reason: str = "",
    ) -> Edited:
        """Propose narrower arguments instead of approving; returns the new candidate.

        The candidate under review will not run; ``arguments`` (raw text, as a model
        would write it) become a new candidate of the same run, which crosses every
        gate again and gets its own digest (and its own review, if policy asks).

        Raises:
            Refused: unknown or closed review, another digest, or the same bytes.
        """
        return await request(
            self.nc, subjects.review(tenant, candidate_id, "edit", self.principal),
            EditReview(review_id=review_id, digest=digest, arguments=arguments, reason=reason),
            Edited, self.timeout_s,
        )

    async def resolve_outcome(
        self, *, tenant: str, candidate_id: str, finding: str, why: str,
        receipt: Mapping[str, str] | None = None,
    ) -> str:
        """Settle an unknown outcome as this operator (``confirmed`` or ``absent``); returns the event recorded.

        Raises:
            OutcomeSettled: the reconciler, a late adapter report or another operator
                settled it first; ``answer`` says with what finding.
            Refused: nothing to resolve, or the command was malformed.
        """
        data = await ask(
            self.nc, subjects.resolve(tenant, candidate_id, self.principal),
            ResolveOutcome(finding=finding, why=why, receipt=dict(receipt or {})),
            self.timeout_s,
        )
        try:
            return msgspec.json.decode(data, type=Recorded).event
        except msgspec.ValidationError:
            answer = msgspec.json.decode(data, type=NotResolved)
        if answer.error == "reconcile.already-settled":
            raise OutcomeSettled(answer)
        raise Refused(answer.error, answer.detail)

    async def policy_command(self, verb: str, command: PolicyCommand | None = None) -> PolicyStatus:
        """Ask policy, as this operator, to ``status``, ``shadow``, ``shadow-off`` or ``promote``;
        returns where the bundles stand after it.

        Raises:
            Refused: a bundle that does not validate, no shadow to stop or promote, a shadow
                other than the one confirmed (``policy.shadow-changed``), and the like.
        """
        return await request(self.nc, subjects.policy_command(verb, self.principal),
                             command or PolicyCommand(), PolicyStatus, self.timeout_s)

    async def _latest(self, tenant: str, run_id: str, candidate_id: str) -> ModelResponse | None:
        """The stored response: only intake writes the responses stream, so this is authoritative.

        Raises:
            PermissionDenied: this user may not read that run's responses (another tenant's).
        """
        subject = response_subject(tenant, run_id, candidate_id)
        try:
            # nats-py asks a direct get of the last message on a subject at this API subject.
            msg = await unless_denied(self.nc, f"{self._js_prefix}.DIRECT.GET.{RESPONSES}.{subject}",
                                       self._js.get_last_msg(RESPONSES, subject, direct=True))
        except NotFoundError:
            return None
        try:
            response = _response.decode(msg.data or b"")
        except msgspec.MsgspecError:
            return None
        return response if response.candidate_id == candidate_id else None

    async def _propose(self, tenant: str, candidate: Candidate, timeout_s: float) -> ModelResponse:
        """Publish ``candidate`` and wait (at most ``timeout_s``) for the response intake records for it."""
        body = self._encoded(candidate)
        run_id, call_id = candidate.run_id, candidate.call_id
        digest = call_digest(call_id=call_id, tool=candidate.tool, arguments=candidate.arguments,
                             assembly_failure=candidate.assembly_failure)
        call = _Call(tenant=tenant, run_id=run_id, call_id=call_id, digest=digest,
                     own=intent_id_for(tenant, run_id, call_id),
                     reuse=reused_call_id_intent(tenant, run_id, call_id, digest))
        # A message on either response subject is only a wake-up: anybody at the edge can
        # have a reply delivered there, so what the model sees is read from the stream,
        # which only intake writes.
        woken = asyncio.Event()
        watched = (response_subject(tenant, run_id, call.own), response_subject(tenant, run_id, call.reuse))
        await self._wakeups.watch(tenant, run_id, watched, woken)
        try:
            deadline = asyncio.get_running_loop().time() + timeout_s
            # The message id names the bytes: a repeat of the same call is deduplicated by
            # the stream, a call id reused with other bytes reaches intake to be refused.
            repeated = await self._publish_candidate(propose_subject(tenant, run_id), body,
                                                     f"{run_id}.{call_id}.{digest[7:23]}", deadline)
            return await self._response(call, woken, repeated=repeated, deadline=deadline, timeout_s=timeout_s)
        finally:
            self._wakeups.unwatch(watched, woken)

    def _encoded(self, candidate: Candidate) -> bytes:
        """The candidate's bytes, refused here when intake would not read them or they are too large."""
        if not is_subject_token(candidate.call_id):
            raise Refused("candidate.malformed", "call ids must be [A-Za-z0-9_-]{1,64}")
        try:
            body = _candidate_encoder.encode(candidate)
        except (UnicodeEncodeError, RecursionError, msgspec.EncodeError, TypeError) as exc:
            raise InvalidCandidate(f"the candidate cannot be encoded: {exc}",
                                   code="candidate.malformed") from exc
        # What intake would refuse unread (nested deeper than it reads, a field of the wrong
        # type) it records under an id of its own, where nobody waits: refused here instead,
        # by intake's own reader.
        readable = decode_candidate(body)
        if readable.candidate is None:
            raise InvalidCandidate(f"intake would not read this candidate: {readable.detail}",
                                   code="candidate.malformed")
        limit = min(self.nc.max_payload, MAX_CANDIDATE_MESSAGE_BYTES)
        if len(body) > limit:
            raise CandidateTooLarge(f"{len(body)} bytes exceed the {limit} a candidate may have",
                                    code="candidate.too-large")
        return body

    async def _response(
        self, call: _Call, woken: asyncio.Event, *, repeated: bool, deadline: float, timeout_s: float,
    ) -> ModelResponse:
        """The call's response, read from the stream whenever ``woken`` is set and every second.

        Raises:
            ResponseTimeout: none by ``deadline``.
        """
        loop = asyncio.get_running_loop()
        # The call id's own intent answers this call only if it recorded these bytes;
        # otherwise the refusal comes on the reused call's intent.
        other_bytes = False
        ask_stream = repeated
        woke = False
        # After a wake-up the stream is asked again soon, and sooner than the second
        # it waits otherwise: on a replicated stream the replica that answers a direct
        # get may not hold the response it woke for yet (a few milliseconds behind).
        soon_s = 0.0
        while True:
            # A repeated call was deduplicated: its response may already exist. And a
            # response published while this connection was reconnecting (or a repeat
            # after the stream's duplicate window, which intake answers with nothing new)
            # is only in the stream, so the stream is asked every second while waiting.
            # A new call's answer is on its way to the subscriptions: no need to ask.
            try:
                if ask_stream and not other_bytes:
                    earlier = await self._latest(call.tenant, call.run_id, call.own)
                    if earlier is not None and _answers(earlier, call.digest):
                        return earlier
                    other_bytes = earlier is not None
                if ask_stream and other_bytes:
                    refusal = await self._latest(call.tenant, call.run_id, call.reuse)
                    if refusal is not None:
                        return refusal
            except (NatsError, TimeoutError):
                pass  # the connection is reconnecting; keep waiting
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise ResponseTimeout(
                    f"no response to {call.call_id} within {timeout_s}s", code="response.timeout"
                )
            soon_s = pause_after(soon_s, woke=woke)
            woke = await was_woken(woken, min(remaining, soon_s or 1.0))
            ask_stream = True

    async def _publish_candidate(self, subject: str, body: bytes, msg_id: str, deadline: float) -> bool:
        """Publish until the stream acknowledges; True when it already held these bytes.

        Safe to repeat: the stream deduplicates by id (and says so in its ack).

        A JetStream refusal with status 400 is permanent (the same bytes will be refused
        again), so it ends at once instead of being retried until the deadline.

        Raises:
            CandidateTooLarge: the stream refused the message as too large.
            PermissionDenied: the broker refused this user the subject.
            ClientError: the stream refused it otherwise, or did not answer in time.
        """
        loop = asyncio.get_running_loop()
        while True:
            try:
                ack = await unless_denied(self.nc, subject, self._js.publish(
                    subject, body, headers={"Nats-Msg-Id": msg_id}, timeout=self.timeout_s))
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
        """Close the connection (and the host's)."""
        await self.nc.close()
        if self.host_nc is not None:
            await self.host_nc.close()

    async def __aenter__(self) -> Gateway:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

