"""Runs, turns and proposals over NATS; responses read from ``LG_RESPONSES``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import msgspec
import nats
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import Error as NatsError
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from nats.js.errors import APIError, NotFoundError

from lockgate.client.discovery import DEFAULT_URL, Local, find_local
from lockgate.contracts import subjects
from lockgate.contracts.messages import (
    Candidate,
    CloseRun,
    DecideReview,
    Edited,
    EditReview,
    NotResolved,
    OpenRun,
    OpenTurn,
    Recorded,
    Refusal,
    ResolveOutcome,
    ReviewView,
    RunClosed,
    RunOpened,
    Tool,
    TurnOpened,
    Withdraw,
)
from lockgate.contracts.responses import ModelResponse
from lockgate.contracts.subjects import (
    propose_subject,
    response_subject,
    responses_of_run,
    run_close_subject,
    run_open_subject,
    turn_subject,
)
from lockgate.core.errors import LockgateError
from lockgate.core.ids import (
    call_digest,
    intent_id_for,
    is_subject_token,
    random_id,
    reused_call_id_intent,
)
from lockgate.intake.parsing import decode_candidate
from lockgate.runtime.deployment import Credentials, CredentialsError, load_credentials
from lockgate.runtime.roles import JS_API
from lockgate.runtime.topology import MAX_CANDIDATE_MESSAGE_BYTES, RESPONSES

T = TypeVar("T")


class ClientError(LockgateError):
    """Root of the SDK's errors."""


class Refused(ClientError):
    """Lockgate refused a request (``code`` says why)."""

    def __init__(self, code: str, detail: str = "") -> None:
        super().__init__(f"{code}: {detail}" if detail else code, code=code)


class OutcomeSettled(Refused):
    """An operator's resolution was not recorded: the outcome was settled first.

    ``answer`` says by what: the event (``Reconciled`` or ``EffectCompleted``), its
    finding and resolution, who recorded it, when, and its receipt.
    """

    def __init__(self, answer: NotResolved) -> None:
        super().__init__(answer.error, answer.detail)
        self.answer = answer


class Unauthorized(ClientError):
    """The broker refused the credentials: a user it does not know, a wrong password, or none
    where it requires one (code ``lockgate.unauthorized``)."""


class PermissionDenied(ClientError):
    """The broker refused this connection's user a subject (code ``lockgate.permission-denied``).

    ``subject`` is the one refused. Asking again cannot help: the user's permissions say no.
    """

    def __init__(self, message: str, *, subject: str) -> None:
        super().__init__(message, code="lockgate.permission-denied")
        self.subject = subject


class UnknownCandidate(Refused):
    """No candidate of this run has that id (code ``candidate.unknown``)."""

    def __init__(self, detail: str) -> None:
        super().__init__("candidate.unknown", detail)


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
#: After a wake-up whose response the stream does not show yet, it is asked again after
#: the first of these, then twice as long each time, up to the second (seconds).
WAKE_RETRY_S = (0.002, 0.5)
_candidate_encoder = msgspec.json.Encoder()


def _answers(response: ModelResponse, digest: str) -> bool:
    """True when ``response`` answers the candidate whose bytes have ``digest``.

    Responses recorded before candidates were digested carry none: they answer the call id.
    """
    return response.candidate_digest is None or response.candidate_digest == digest


def _pause_after(soon_s: float, *, woke: bool) -> float:
    """How soon to ask the stream again (0: the usual second): sooner after a wake-up the
    stream did not show yet, doubling while it still does not, up to ``WAKE_RETRY_S``'s second."""
    first, last = WAKE_RETRY_S
    if woke:  # woken, and the stream did not show it: ask again soon
        return first if soon_s == 0.0 else min(2 * soon_s, last)
    if soon_s:  # still not there: a little later, until the pause is the usual
        return 0.0 if soon_s >= last else min(2 * soon_s, last)
    return soon_s


async def _woken(event: asyncio.Event, timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for ``event``; whether it was set. Cleared either way."""
    woke = False
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), timeout_s)
        woke = True
    event.clear()
    return woke


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


#: The broker's notice that it dropped a message this connection's user may not publish.
_PUBLISH_DENIED = re.compile(r'permissions violation for publish to "([^"]+)"', re.IGNORECASE)


class _Denials:
    """The broker's permission notices to one connection, handed to whoever waits on their subject.

    The broker drops a message its sender may not publish and tells the sender so, apart
    from the message: without listening for that notice a request waits out its timeout
    and looks like nobody answering.
    """

    def __init__(self, user: str) -> None:
        self.user = user
        self._waiting: dict[str, set[asyncio.Future[None]]] = {}

    async def on_error(self, exc: Exception) -> None:
        found = _PUBLISH_DENIED.search(str(exc))
        if found is not None:
            for waiter in self._waiting.get(found.group(1).lower(), ()):
                if not waiter.done():
                    waiter.set_result(None)
        await _log_error(exc)

    @contextlib.contextmanager
    def watch(self, subject: str) -> Iterator[asyncio.Future[None]]:
        """A future done when the broker refuses a publish to ``subject`` while it is watched."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        key = subject.lower()  # the server's notice need not keep the case
        self._waiting.setdefault(key, set()).add(waiter)
        try:
            yield waiter
        finally:
            waiters = self._waiting.get(key)
            if waiters is not None:
                waiters.discard(waiter)
                if not waiters:
                    del self._waiting[key]


#: The notices of the connections this module opened (a connection handed in has none).
_DENIALS: weakref.WeakKeyDictionary[Client, _Denials] = weakref.WeakKeyDictionary()


async def _unless_denied(nc: Client, subject: str, work: Awaitable[T]) -> T:
    """``work`` (which publishes to ``subject`` on ``nc``), ended at once if the broker refuses that.

    Raises:
        PermissionDenied: the broker refused this user a publish to ``subject``.
    """
    denials = _DENIALS.get(nc)
    task = asyncio.current_task()
    if denials is None or task is None:
        return await work
    waiting = True

    def interrupt(_: asyncio.Future[None]) -> None:
        if waiting:  # a notice after ``work`` ended must not cancel whatever the task does next
            task.cancel()

    # No task of its own per request (this is on every proposal's path): the notice
    # cancels the waiting task, which turns the cancellation into the refusal.
    with denials.watch(subject) as denied:
        denied.add_done_callback(interrupt)
        try:
            return await work
        except asyncio.CancelledError:
            if not denied.done() or task.cancelling() > 1:  # cancelled by its owner too
                raise
            task.uncancel()
            raise PermissionDenied(f"the broker refused user {denials.user!r} permission to publish "
                                   f"to {subject}", subject=subject) from None
        finally:
            waiting = False


async def _ask(nc: Client, subject: str, body: object, timeout_s: float) -> bytes:
    try:
        reply = await _unless_denied(nc, subject, nc.request(subject, msgspec.json.encode(body),
                                                             timeout=timeout_s))
    except (NatsTimeout, NoRespondersError) as exc:
        raise ClientError(f"no answer on {subject}", code="lockgate.unavailable") from exc
    return bytes(reply.data)


async def _request(nc: Client, subject: str, body: object, answer: type[T], timeout_s: float) -> T:
    data = await _ask(nc, subject, body, timeout_s)
    try:
        return msgspec.json.decode(data, type=answer)
    except msgspec.ValidationError:
        refusal = msgspec.json.decode(data, type=Refusal)
        raise Refused(refusal.error, refusal.detail) from None


#: How long an idempotent open (a run or a turn under an id the client chose) is asked
#: again while nobody answers, or intake says it could not answer now: longer than a
#: cluster's leader election (a node holding the JetStream meta leadership stopping
#: left run opens unanswered for about 10 s).
OPEN_RETRY_S = 20.0


async def _request_again(
    nc: Client, subject: str, body: object, answer: type[T], timeout_s: float,
) -> T:
    """``_request``, asked again while unanswered or ``service.unavailable``, up to
    ``OPEN_RETRY_S``: only for requests that mean the same however often they arrive."""
    loop = asyncio.get_running_loop()
    deadline, pause = loop.time() + OPEN_RETRY_S, 0.1
    while True:
        try:
            return await _request(nc, subject, body, answer, timeout_s)
        except Refused as exc:
            if exc.code != "service.unavailable" or loop.time() + pause > deadline:
                raise
        except ClientError as exc:
            if exc.code != "lockgate.unavailable" or loop.time() + pause > deadline:
                raise
        await asyncio.sleep(pause)
        pause = min(pause * 2, 2.0)


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
        opened = await _request_again(
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
        return await _request(gateway.host_nc or gateway.nc, run_close_subject(self.tenant),
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


#: How long a candidate id may have no response before ``Run.wait`` says it is none of the
#: run's: intake answers a candidate as soon as it reads it (an edited candidate is read
#: moments after the reviewer's edit is answered).
KNOWN_WITHIN_S = 3.0

#: Runs whose responses one gateway keeps a subscription to; past this many, the least
#: recently proposed in with no proposal waiting is given up.
RUNS_WATCHED = 1024


class _Wakeups:
    """Wake-ups for proposals waiting for their responses: one core subscription per run.

    A proposal waits on its two response subjects (its call's intent, and the one a
    reused call id is refused on). Subscribing to both for every proposal cost two
    subscriptions and two unsubscriptions a candidate, each an update of the broker's
    interest (and on a cluster, of every node's); a run's proposals share one instead,
    kept while the gateway lives (at most ``RUNS_WATCHED`` runs).
    """

    def __init__(self, nc: Client) -> None:
        self._nc = nc
        self._runs: OrderedDict[str, asyncio.Future[Subscription]] = OrderedDict()
        self._waiting: dict[str, set[asyncio.Event]] = {}

    async def watch(self, tenant: str, run_id: str, watched: tuple[str, ...], woken: asyncio.Event) -> None:
        """Set ``woken`` whenever a message arrives on one of ``watched`` (subjects of the run).

        Returns once the run's subscription is made: what is published after that wakes.
        """
        wildcard = responses_of_run(tenant, run_id)
        made = self._runs.get(wildcard)
        if made is not None:
            self._runs.move_to_end(wildcard)
            await asyncio.shield(made)
        else:
            made = asyncio.get_running_loop().create_future()
            self._runs[wildcard] = made
            try:
                made.set_result(await self._nc.subscribe(wildcard, cb=self._wake))
            except BaseException as exc:
                del self._runs[wildcard]
                made.set_exception(exc)
                made.exception()  # read here: the run's other proposals see it through shield
                raise
            await self._forget_idle()
        for subject in watched:
            self._waiting.setdefault(subject, set()).add(woken)

    def unwatch(self, watched: tuple[str, ...], woken: asyncio.Event) -> None:
        """Stop waking ``woken``."""
        for subject in watched:
            waiters = self._waiting.get(subject)
            if waiters is not None:
                waiters.discard(woken)
                if not waiters:
                    del self._waiting[subject]

    async def _wake(self, msg: Msg) -> None:
        for woken in self._waiting.get(msg.subject, ()):
            woken.set()

    async def _forget_idle(self) -> None:
        """Give up the least recently used runs' subscriptions past ``RUNS_WATCHED``,
        unless a proposal of theirs is waiting."""
        while len(self._runs) > RUNS_WATCHED:
            idle = next((w for w in self._runs if self._runs[w].done()
                         and not any(s.startswith(w[:-1]) for s in self._waiting)), None)
            if idle is None:
                return
            made = self._runs.pop(idle)
            if made.exception() is None:
                with contextlib.suppress(NatsError):
                    await made.result().unsubscribe()


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
        self._wakeups = _Wakeups(nc)

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
            opened = await _request_again(
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
        return await _request(
            self.nc, subjects.withdraw(tenant, run_id, candidate_id, self.user), Withdraw(why=why),
            ModelResponse, self.timeout_s,
        )

    async def show_review(self, *, tenant: str, candidate_id: str) -> ReviewView:
        """The open review of a candidate, as this reviewer may see it.

        Raises:
            Refused: no open review, or not this reviewer's to see.
        """
        return await _request(
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
        recorded = await _request(
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
        return await _request(
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
        data = await _ask(
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

    async def _latest(self, tenant: str, run_id: str, candidate_id: str) -> ModelResponse | None:
        """The stored response: only intake writes the responses stream, so this is authoritative.

        Raises:
            PermissionDenied: this user may not read that run's responses (another tenant's).
        """
        subject = response_subject(tenant, run_id, candidate_id)
        try:
            # nats-py asks a direct get of the last message on a subject at this API subject.
            msg = await _unless_denied(self.nc, f"{self._js_prefix}.DIRECT.GET.{RESPONSES}.{subject}",
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
            soon_s = _pause_after(soon_s, woke=woke)
            woke = await _woken(woken, min(remaining, soon_s or 1.0))
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
                ack = await _unless_denied(self.nc, subject, self._js.publish(
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


CredentialsLike = Credentials | Path | str


def _as_credentials(value: CredentialsLike) -> Credentials:
    if isinstance(value, Credentials):
        return value
    try:
        return load_credentials(Path(value))
    except CredentialsError as exc:
        raise ClientError(str(exc), code=exc.code) from None


log = logging.getLogger("lockgate.client")


async def _log_error(exc: Exception) -> None:
    # nats-py's default prints a traceback for every failed (re)connect attempt.
    log.warning("broker connection: %s", exc)


def _refused(exc: BaseException) -> bool:
    """True when ``exc`` is the broker refusing the user (nats-py raises a plain ``Error``
    from the handshake, ``AuthorizationError`` later)."""
    return isinstance(exc, NatsError) and "authorization" in str(exc).lower()


async def _open(url: str, credentials: Credentials | None, options: dict[str, Any]) -> Client:
    """Connect as ``credentials``' user.

    Raises:
        Unauthorized: the broker refused the user (at once: asking again cannot help).
        ClientError: the broker cannot be reached (``lockgate.unavailable``).
    """
    extra = dict(options)
    user = credentials.user if credentials else "anonymous"
    denials = _Denials(user)
    refused: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    told = extra.pop("error_cb", None)

    async def on_error(exc: Exception) -> None:
        if _refused(exc) and not refused.done():
            refused.set_result(None)
        await denials.on_error(exc)
        if told is not None:
            await told(exc)

    extra.setdefault("name", f"gateway.{user}")
    if credentials is not None:
        extra.update(user=credentials.user, password=credentials.password,
                     inbox_prefix=credentials.inbox_prefix)
    # ``url`` may name every node of a cluster, comma-separated: nats-py fails over.
    servers = [u.strip() for u in url.split(",") if u.strip()]
    connecting = asyncio.ensure_future(nats.connect(
        servers, max_reconnect_attempts=extra.pop("max_reconnect_attempts", 3),
        connect_timeout=extra.pop("connect_timeout", 2), error_cb=on_error, **extra))
    either: set[asyncio.Future[Any]] = {connecting, refused}
    try:
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        connecting.cancel()
        raise
    if not connecting.done():
        connecting.cancel()
        with contextlib.suppress(BaseException):
            await connecting
    try:
        nc = connecting.result()
    except Exception as exc:  # nats raises several unrelated types for "cannot connect"
        if refused.done() or _refused(exc):
            raise Unauthorized(f"the broker at {url} refused the credentials of {user}: "
                               "a user it does not know or a wrong password",
                               code="lockgate.unauthorized") from None
        raise ClientError(f"cannot connect to {url}: {exc}", code="lockgate.unavailable") from exc
    except asyncio.CancelledError:  # given up on after the refusal
        raise Unauthorized(f"the broker at {url} refused the credentials of {user}: "
                           "a user it does not know or a wrong password",
                           code="lockgate.unauthorized") from None
    _DENIALS[nc] = denials
    return nc


async def connect(
    url: str | None = None, *, credentials: CredentialsLike | None = None,
    host: CredentialsLike | bool | None = None, timeout_s: float = 5.0,
    var_dir: Path | None = None, **options: Any,
) -> Gateway:
    """Connect to Lockgate's broker as one user (and, to open runs, as the trusted host).

    Args:
        url: the broker; by default the one ``lockgate run`` says it runs
            (``lockgate.client.discovery``), else ``LOCKGATE_NATS_URL``, else port 4222.
        credentials: the user to connect as: a ``Credentials``, the path of a credentials
            file (``var/credentials/agent-tenant-a.json``), or a user of the local
            deployment by name (``"agent-tenant-a"``); none on a broker without users.
        host: the trusted host's credentials, for ``open_run`` (a second connection);
            ``True`` for the local deployment's ``host`` user.
        timeout_s: how long each request waits for its answer.
        var_dir: the local deployment's directory (default: ``LOCKGATE_VAR_DIR``, else
            the checkout's ``var/``).
        options: passed to ``nats.connect``.

    Raises:
        Unauthorized: the broker refused the credentials (or their absence).
        ClientError: the broker cannot be reached, or a credentials file or user is unusable.
    """
    found = url is None or host is True or _names_a_user(credentials) or _names_a_user(host)
    local = find_local(url, var_dir) if found else None
    url = url or (local.url if local is not None else DEFAULT_URL)
    creds = _resolve(credentials, local)
    host_creds = _resolve("host" if host is True else (host or None), local)
    nc = await _open(url, creds, options)
    host_nc = None
    if host_creds is not None:
        try:
            host_nc = await _open(url, host_creds, options)
        except ClientError:
            await nc.close()
            raise
    return Gateway(
        nc, timeout_s=timeout_s, host_nc=host_nc,
        js_prefix=creds.js_prefix if creds else JS_API, user=creds.user if creds else "anonymous",
        principal=creds.principal if creds else "",
    )


def _names_a_user(value: object) -> bool:
    """True when ``value`` is a user's name rather than a credentials file's path."""
    return isinstance(value, str) and "/" not in value and not value.endswith(".json") \
        and not Path(value).exists()


def _resolve(value: CredentialsLike | None, local: Local | None) -> Credentials | None:
    if value is None:
        return None
    if _names_a_user(value) and local is not None:
        try:
            return local.credentials(str(value))
        except LookupError as exc:
            raise ClientError(str(exc), code="credentials.unknown-user") from None
    return _as_credentials(value)
