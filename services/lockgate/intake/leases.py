"""A run's end: closed by its host, or idle past its lease; what it left waiting is withdrawn.

A reviewer must never approve an effect nobody waits for. A run ends when the trusted host
closes it, or when it opened with a lease (``OpenRun.lease_s``) and nobody used it for
that long. Its lease is one message on ``lg.lease.<tenant>.<run>`` (stream ``LG_LEASES``)
whose per-message TTL is the lease: intake publishes it when the run opens and again while
turns are opened and calls proposed (at most every quarter lease per run and process);
when it runs out, the server itself writes a delete marker on the subject (nats-server's
``subject_delete_marker_ttl``, reason ``MaxAge``). A close writes a message of its own
there. Intake's ``intake-run-ends`` durable reads both: it records the end in the runs
bucket (``<tenant>.<run>.ended``, the record every later turn and call is checked
against) and asks the executor to withdraw each candidate of the run still waiting for a
reviewer or for policy's evidence, as the user ``intake``.

Renewals carry ``Nats-Expected-Last-Subject-Sequence``: a renewal racing the marker or a
close is refused by the server, so an ended run is never brought back to life.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import msgspec
from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.js.client import JetStreamContext
from nats.js.errors import APIError, KeyDeletedError, KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from lockgate.contracts.messages import RunContext, Withdraw
from lockgate.contracts.responses import ModelResponse
from lockgate.contracts.subjects import lease_subject, responses_of_run, run_key, withdraw
from lockgate.core.bounded import keep
from lockgate.eventstore.jetstream import DirectGet
from lockgate.operations.roles import JS_API
from lockgate.runtime.streams import LEASES, RESPONSES

log = logging.getLogger("lockgate.intake.leases")

#: The header of the message a close writes on the lease subject (its value: why).
CLOSED_HEADER = "Lockgate-Run-Closed"
#: The header nats-server puts on the delete marker of a subject whose last message expired.
MARKER_HEADER = "Nats-Marker-Reason"
#: How long a close's own message stays (its expiry leaves a marker, which changes nothing).
CLOSED_KEPT_S = 24 * 3600
#: How often one process checks a run without a lease for an end another process recorded.
CHECK_S = 5.0
#: Runs whose last check and renewal one process remembers.
RUNS_KEPT = 16384
#: The statuses of a candidate that waits for someone: what a run's end withdraws.
WAITING = frozenset({"pending_approval", "paused"})
#: The user intake withdraws as (the last token of the withdraw subject).
WITHDRAWER = "intake"
#: Responses read per direct get when listing a run's candidates.
_PAGE = 1024

_response = msgspec.json.Decoder(ModelResponse)


def ended_key(tenant: str, run_id: str) -> str:
    """Key of a run's end in the runs bucket (its value: why it ended)."""
    return f"{run_key(tenant, run_id)}.ended"


def ttl_header(seconds: float) -> str:
    """A ``Nats-TTL`` value: whole seconds, at least one."""
    return f"{max(1, math.ceil(seconds))}s"


@dataclass(frozen=True)
class End:
    """Why a run ended, as read off its lease subject."""

    why: str


def end_of(headers: dict[str, str] | None) -> End | None:
    """The end a lease message says, if it says one: a close, or the server's marker."""
    headers = headers or {}
    if CLOSED_HEADER in headers:
        return End(f"closed: {headers[CLOSED_HEADER]}" if headers[CLOSED_HEADER] else "closed")
    if MARKER_HEADER in headers:
        return End("lease ran out")
    return None


class Leases:
    """Intake's part of runs' ends: leases started and renewed, ends recorded and acted on."""

    def __init__(self, nc: Client, js: JetStreamContext, runs: KeyValue,
                 clock: Callable[[], float] | None = None) -> None:
        self.nc = nc
        self.js = js
        self.runs = runs
        self._clock = clock or (lambda: asyncio.get_running_loop().time())
        self._leases = DirectGet(nc, LEASES, api_prefix=JS_API)
        self._responses = DirectGet(nc, RESPONSES, api_prefix=JS_API)
        #: Run → when this process last checked it (and renewed its lease).
        self._checked: OrderedDict[tuple[str, str], float] = OrderedDict()
        #: Runs this process knows ended.
        self._ended: OrderedDict[tuple[str, str], str] = OrderedDict()

    async def start(self, run: RunContext) -> None:
        """Publish a new run's lease (nothing for a run without one).

        Raises:
            NatsError: the lease could not be stored (the open should be asked again).
        """
        if run.lease_s is None:
            return
        with contextlib.suppress(APIError):  # already there: the open was asked again
            await self.js.publish(lease_subject(run.tenant, run.run_id), b"", headers={
                "Nats-TTL": ttl_header(run.lease_s), "Nats-Expected-Last-Subject-Sequence": "0"})

    async def ended(self, run: RunContext) -> str | None:
        """Why ``run`` ended (``None``: it has not), renewing its lease on the way.

        Asks the broker at most every quarter lease (or ``CHECK_S`` for a run without
        one) per run in this process; between those it answers from memory.
        """
        key = (run.tenant, run.run_id)
        if key in self._ended:
            return self._ended[key]
        now = self._clock()
        every = run.lease_s / 4 if run.lease_s is not None else CHECK_S
        last = self._checked.get(key)
        if last is not None and now - last < every:
            return None
        keep(self._checked, key, now, RUNS_KEPT)
        try:
            why = await self._recorded_end(run)
            if why is None and run.lease_s is not None:
                why = await self._renew(run)
        except (NatsError, TimeoutError, OSError) as exc:
            log.warning("run %s/%s: could not check its end (%s); taken as running",
                        run.tenant, run.run_id, exc)
            self._checked.pop(key, None)
            return None
        if why is not None:
            keep(self._ended, key, why, RUNS_KEPT)
        return why

    async def close(self, tenant: str, run_id: str, why: str) -> None:
        """Write a close on the run's lease subject (the durable then acts on it) and record it."""
        await self.js.publish(lease_subject(tenant, run_id), b"", headers={
            CLOSED_HEADER: why[:200], "Nats-TTL": ttl_header(CLOSED_KEPT_S)})
        await self.record_end(tenant, run_id, f"closed: {why}" if why else "closed")

    async def record_end(self, tenant: str, run_id: str, why: str) -> None:
        """Record in the runs bucket that the run ended (the first record stands)."""
        keep(self._ended, (tenant, run_id), why, RUNS_KEPT)
        with contextlib.suppress(KeyWrongLastSequenceError):
            await self.runs.create(ended_key(tenant, run_id), why.encode())

    async def withdraw_waiting(self, tenant: str, run_id: str, why: str) -> dict[str, str]:
        """Ask the executor to withdraw every candidate of the run still waiting; return
        what each became (candidate id → its model-facing status)."""
        outcome: dict[str, str] = {}
        for candidate_id, status in (await self.statuses(tenant, run_id)).items():
            if status not in WAITING:
                continue
            try:
                reply = await self.nc.request(
                    withdraw(tenant, run_id, candidate_id, WITHDRAWER),
                    msgspec.json.encode(Withdraw(why=f"the run ended ({why})")), timeout=5.0)
                answer = msgspec.json.decode(reply.data)
            except (NatsError, TimeoutError, msgspec.MsgspecError) as exc:
                log.warning("run %s/%s ended: withdrawing %s failed (%s)", tenant, run_id,
                            candidate_id, exc)
                outcome[candidate_id] = "unanswered"
                continue
            outcome[candidate_id] = str(answer.get("status") or answer.get("code") or "refused") \
                if isinstance(answer, dict) else "refused"
        return outcome

    async def on_lease(self, tenant: str, run_id: str, headers: dict[str, str] | None) -> None:
        """One message of a run's lease, as the run-ends durable hands it: nothing for a
        lease or its renewal; for an end (a close, the server's marker), record it and
        withdraw what the run left waiting."""
        end = end_of(headers)
        if end is None:
            return
        await self.record_end(tenant, run_id, end.why)
        await self.withdraw_waiting(tenant, run_id, end.why)

    async def statuses(self, tenant: str, run_id: str) -> dict[str, str]:
        """The latest model-facing status of every candidate of the run, from ``LG_RESPONSES``."""
        latest: dict[str, tuple[int, str]] = {}
        seq = 1
        while True:
            status, page = await self._responses.request(
                {"seq": seq, "next_by_subj": responses_of_run(tenant, run_id), "batch": _PAGE})
            for msg in page:
                headers = msg.headers or {}
                at = int(headers.get("Nats-Sequence", "0"))
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

    async def _recorded_end(self, run: RunContext) -> str | None:
        try:
            entry = await self.runs.get(ended_key(run.tenant, run.run_id))
        except (KeyNotFoundError, KeyDeletedError):
            return None
        return (entry.value or b"ended").decode("utf-8", "replace")

    async def _renew(self, run: RunContext) -> str | None:
        """Renew the run's lease unless it ran out or was closed; say why it ended if so."""
        assert run.lease_s is not None
        subject = lease_subject(run.tenant, run.run_id)
        last = await self._leases.last(subject)
        if last is None:
            return "lease ran out"
        end = end_of(last.headers)
        if end is not None:
            return end.why
        at = (last.headers or {}).get("Nats-Sequence", "")
        try:
            await self.js.publish(subject, b"", headers={
                "Nats-TTL": ttl_header(run.lease_s), "Nats-Expected-Last-Subject-Sequence": at})
        except APIError:
            # Someone wrote there since (another process's renewal, a close, the marker):
            # what is there now says whether the run still runs.
            now = await self._leases.last(subject)
            found = end_of(now.headers) if now is not None else End("lease ran out")
            return found.why if found is not None else None
        return None
