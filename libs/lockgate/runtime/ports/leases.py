"""The leases port: a run's lease on the broker, its end on record, and what it left waiting.

A run's lease is one message on ``lg.lease.<tenant>.<run>`` (stream ``LG_LEASES``) whose
per-message TTL is the lease. When it runs out the server itself writes a delete marker on
the subject (nats-server's ``subject_delete_marker_ttl``, reason ``MaxAge``); a close
writes a message of its own there. A run's end, once known, is recorded in the runs bucket
(``<tenant>.<run>.ended``), the record every later turn and call is checked against.

Renewals carry ``Nats-Expected-Last-Subject-Sequence``: a renewal racing the marker or a
close is refused by the server, so an ended run is never brought back to life.

``NatsLeases`` speaks to the broker; ``MemoryLeases`` is the fake (a lease runs out on its
clock; candidates' statuses are read from the fake responses port; withdrawals are
answered as scripted and kept).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import msgspec
from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.js.client import JetStreamContext
from nats.js.errors import APIError, KeyDeletedError, KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from lockgate.contracts.messages import Withdraw
from lockgate.contracts.responses import ModelResponse
from lockgate.contracts.subjects import (
    lease_subject,
    responses_of_run,
    run_key,
    withdraw,
)
from lockgate.eventstore.jetstream import DirectGet
from lockgate.runtime.ports.responses import MemoryResponses
from lockgate.runtime.streams import LEASES, RESPONSES

__all__ = ["End", "Leases", "MemoryLeases", "NatsLeases", "end_of", "ended_key"]

#: The header of the message a close writes on the lease subject (its value: why).
CLOSED_HEADER = "Lockgate-Run-Closed"
#: The header nats-server puts on the delete marker of a subject whose last message expired.
MARKER_HEADER = "Nats-Marker-Reason"
#: How long a close's own message stays (its expiry leaves a marker, which changes nothing).
CLOSED_KEPT_S = 24 * 3600
#: The user a run's end withdraws as (the last token of the withdraw subject).
WITHDRAWER = "intake"
#: What a withdrawal nobody answered became.
UNANSWERED = "unanswered"
#: Why a run whose lease is gone ended.
RAN_OUT = "lease ran out"
#: How long a withdrawal waits for the executor's answer.
WITHDRAW_TIMEOUT_S = 5.0
#: Responses read per direct get when listing a run's candidates.
_PAGE = 1024

_response = msgspec.json.Decoder(ModelResponse)


def ended_key(tenant: str, run_id: str) -> str:
    """Key of a run's end in the runs bucket (its value: why it ended)."""
    return f"{run_key(tenant, run_id)}.ended"


def ttl_header(seconds: float) -> str:
    """A ``Nats-TTL`` value: whole seconds, at least one."""
    return f"{max(1, math.ceil(seconds))}s"


def closed_why(why: str) -> str:
    """How a close reads as a run's end."""
    return f"closed: {why}" if why else "closed"


@dataclass(frozen=True)
class End:
    """Why a run ended, as read off its lease subject."""

    why: str


def end_of(headers: dict[str, str] | None) -> End | None:
    """The end a lease message says, if it says one: a close, or the server's marker."""
    headers = headers or {}
    if CLOSED_HEADER in headers:
        return End(closed_why(headers[CLOSED_HEADER]))
    if MARKER_HEADER in headers:
        return End(RAN_OUT)
    return None


class Leases(Protocol):
    """Runs' leases and ends.

    A broker that does not answer raises ``nats.errors.Error`` (or ``TimeoutError``) where
    a method does not say otherwise.
    """

    async def start(self, tenant: str, run_id: str, lease_s: float) -> None:
        """Start the run's lease (a lease, close or marker there already stays as it is)."""
        ...

    async def renew(self, tenant: str, run_id: str, lease_s: float) -> str | None:
        """Renew the run's lease for ``lease_s``; ``None`` when renewed, else why the run
        ended (its lease ran out or is not there, or it was closed): then nothing is written."""
        ...

    async def close(self, tenant: str, run_id: str, why: str) -> None:
        """Write a close on the run's lease subject (whatever is there; the run-ends durable
        acts on it)."""
        ...

    async def recorded_end(self, tenant: str, run_id: str) -> str | None:
        """Why the run ended, as recorded (``None``: no end recorded)."""
        ...

    async def record_end(self, tenant: str, run_id: str, why: str) -> None:
        """Record that the run ended and why (the first record stands)."""
        ...

    async def statuses(self, tenant: str, run_id: str) -> dict[str, str]:
        """The latest model-facing status of every candidate of the run (candidate id → status)."""
        ...

    async def withdraw(self, tenant: str, run_id: str, candidate_id: str, why: str) -> str:
        """Ask the executor to withdraw a candidate, as ``WITHDRAWER``; what it became (its
        status or refusal code), ``UNANSWERED`` when nobody answered. Never raises."""
        ...


class NatsLeases:
    """``Leases`` over the broker: ``LG_LEASES``, the ``LG_RUNS`` bucket, ``LG_RESPONSES`` and
    the executor's withdraw requests."""

    def __init__(self, nc: Client, js: JetStreamContext, runs: KeyValue, *,
                 api_prefix: str = "$JS.API") -> None:
        """``runs``: the ``LG_RUNS`` bucket; ``api_prefix``: the JetStream API as this
        connection's account reaches it (for direct gets)."""
        self._nc = nc
        self._js = js
        self._runs = runs
        self._leases = DirectGet(nc, LEASES, api_prefix=api_prefix)
        self._responses = DirectGet(nc, RESPONSES, api_prefix=api_prefix)

    async def start(self, tenant: str, run_id: str, lease_s: float) -> None:
        """Publish the lease unless the subject holds a message already."""
        with contextlib.suppress(APIError):  # already there: the open was asked again
            await self._js.publish(lease_subject(tenant, run_id), b"", headers={
                "Nats-TTL": ttl_header(lease_s), "Nats-Expected-Last-Subject-Sequence": "0"})

    async def renew(self, tenant: str, run_id: str, lease_s: float) -> str | None:
        """Renew the lease after the message there now, unless that one says the run ended."""
        subject = lease_subject(tenant, run_id)
        last = await self._leases.last(subject)
        if last is None:
            return RAN_OUT
        end = end_of(last.headers)
        if end is not None:
            return end.why
        at = (last.headers or {}).get("Nats-Sequence", "")
        try:
            await self._js.publish(subject, b"", headers={
                "Nats-TTL": ttl_header(lease_s), "Nats-Expected-Last-Subject-Sequence": at})
        except APIError:
            # Someone wrote there since (another process's renewal, a close, the marker):
            # what is there now says whether the run still runs.
            now = await self._leases.last(subject)
            found = end_of(now.headers) if now is not None else End(RAN_OUT)
            return found.why if found is not None else None
        return None

    async def close(self, tenant: str, run_id: str, why: str) -> None:
        """Publish the close, kept a day."""
        await self._js.publish(lease_subject(tenant, run_id), b"", headers={
            CLOSED_HEADER: why[:200], "Nats-TTL": ttl_header(CLOSED_KEPT_S)})

    async def recorded_end(self, tenant: str, run_id: str) -> str | None:
        """The run's end in the runs bucket."""
        try:
            entry = await self._runs.get(ended_key(tenant, run_id))
        except (KeyNotFoundError, KeyDeletedError):
            return None
        return (entry.value or b"ended").decode("utf-8", "replace")

    async def record_end(self, tenant: str, run_id: str, why: str) -> None:
        """Create the run's end in the runs bucket (a create: the first stands)."""
        with contextlib.suppress(KeyWrongLastSequenceError):
            await self._runs.create(ended_key(tenant, run_id), why.encode())

    async def statuses(self, tenant: str, run_id: str) -> dict[str, str]:
        """Read every response of the run from ``LG_RESPONSES``, page by page."""
        latest: dict[str, tuple[int, str]] = {}
        seq = 1
        while True:
            status, page = await self._responses.request(
                {"seq": seq, "next_by_subj": responses_of_run(tenant, run_id), "batch": _PAGE})
            for msg in page:
                at = int((msg.headers or {}).get("Nats-Sequence", "0"))
                try:
                    response = _response.decode(msg.data)
                except msgspec.MsgspecError:
                    continue
                known = latest.get(response.candidate_id)
                if known is None or known[0] < at:
                    latest[response.candidate_id] = (at, response.status)
                seq = max(seq, at + 1)
            if not page or status != "204" or len(page) < _PAGE:
                return {candidate: status for candidate, (_, status) in latest.items()}

    async def withdraw(self, tenant: str, run_id: str, candidate_id: str, why: str) -> str:
        """Request the withdrawal on the executor's withdraw subject."""
        try:
            reply = await self._nc.request(
                withdraw(tenant, run_id, candidate_id, WITHDRAWER),
                msgspec.json.encode(Withdraw(why=why)), timeout=WITHDRAW_TIMEOUT_S)
            answer = msgspec.json.decode(reply.data)
        except (NatsError, TimeoutError, msgspec.MsgspecError):
            return UNANSWERED
        if not isinstance(answer, dict):
            return "refused"
        return str(answer.get("status") or answer.get("code") or "refused")


class MemoryLeases:
    """The fake ``Leases``: leases that run out on a clock, ends in a dict, statuses from the
    fake responses, withdrawals answered as scripted (``withdraw_answer``; ``None``: nobody
    answers) and kept in ``withdrawals``."""

    def __init__(self, responses: MemoryResponses, clock_s: Callable[[], float]) -> None:
        """``responses``: where candidates' statuses are read; ``clock_s``: when leases run out."""
        self._responses = responses
        self._clock_s = clock_s
        #: (tenant, run) → when the lease runs out, or why the run was closed.
        self.leases: dict[tuple[str, str], float | str] = {}
        #: (tenant, run) → why it ended, as recorded.
        self.ends: dict[tuple[str, str], str] = {}
        #: What a withdrawal is answered (``None``: nobody answers).
        self.withdraw_answer: str | None = None
        #: Every withdrawal asked: (tenant, run, candidate, why).
        self.withdrawals: list[tuple[str, str, str, str]] = []

    async def start(self, tenant: str, run_id: str, lease_s: float) -> None:
        """Start the lease unless one (or its end) is there."""
        self.leases.setdefault((tenant, run_id), self._clock_s() + lease_s)

    async def renew(self, tenant: str, run_id: str, lease_s: float) -> str | None:
        """Push the lease's end out, unless it ran out or was closed."""
        now = self._clock_s()
        held = self.leases.get((tenant, run_id))
        if isinstance(held, str):
            return held
        if held is None or held <= now:
            return RAN_OUT
        self.leases[(tenant, run_id)] = now + lease_s
        return None

    async def close(self, tenant: str, run_id: str, why: str) -> None:
        """Put a close where the lease was."""
        self.leases[(tenant, run_id)] = closed_why(why[:200])

    async def recorded_end(self, tenant: str, run_id: str) -> str | None:
        """The recorded end."""
        return self.ends.get((tenant, run_id))

    async def record_end(self, tenant: str, run_id: str, why: str) -> None:
        """Record the end unless one is recorded."""
        self.ends.setdefault((tenant, run_id), why)

    async def statuses(self, tenant: str, run_id: str) -> dict[str, str]:
        """The standing response of each candidate of the run, from the fake responses."""
        # The wildcard is one last token (``lg.response.<tenant>.<run>.*``).
        prefix = responses_of_run(tenant, run_id).removesuffix("*")
        found: dict[str, str] = {}
        for subject, (_, data) in self._responses.standing.items():
            if subject.startswith(prefix) and "." not in subject[len(prefix):]:
                with contextlib.suppress(msgspec.MsgspecError):
                    response = _response.decode(data)
                    found[response.candidate_id] = response.status
        return found

    async def withdraw(self, tenant: str, run_id: str, candidate_id: str, why: str) -> str:
        """Keep the withdrawal; answer as scripted."""
        self.withdrawals.append((tenant, run_id, candidate_id, why))
        return self.withdraw_answer if self.withdraw_answer is not None else UNANSWERED
