"""One execution order run to its end in an adapter process.

The adapter's ``execute`` runs within the capability's outcome deadline while the order is
kept from redelivery; its send boundary is claimed of the executor (``_cross``, see
``lockgate.adapters.claims``); each stage is reported to ``lg.report.<capability>.<intent_id>``;
and what happened says how the order is settled. After the send boundary an unexpected
error reports nothing: the executor's deadline records the silence as ``OutcomeUnknown``.
``lockgate.adapters.worker`` consumes the orders and hands each one here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter as _Tally
from datetime import UTC, datetime
from typing import Any, Protocol

import msgspec
from nats.aio.msg import Msg
from nats.errors import Error as NatsError
from nats.js import JetStreamContext

from lockgate.adapters.api import (
    Adapter,
    BoundaryRefused,
    Interrupted,
    NotSent,
    Rejected,
    SendBoundary,
    bounded,
)
from lockgate.adapters.claims import ClaimUnanswered
from lockgate.contracts import subjects
from lockgate.contracts.messages import AttemptReport, Claim, ClaimAnswer, ExecutionOrder
from lockgate.contracts.proofs import report_msg_id
from lockgate.contracts.vocabulary import ClaimVerdict, ReportStage
from lockgate.core.ids import random_id
from lockgate.runtime import metrics
from lockgate.runtime.settlement import Settlement
from lockgate.runtime.tracing import Tracing

# The worker's logger: what an order's run logs is the worker's, wherever logging is configured.
log = logging.getLogger("lockgate.adapters.worker")

#: An order whose claim the executor cannot check (no authorization on the record as far
#: as the order says, or the record unreadable) comes back this often before it is given
#: up unwritten: an attempt that exists then ends at its deadline and is reconciled.
UNCHECKED_DELIVERIES = 5

#: Execute invocations per capability in this process.
invocations: _Tally[str] = _Tally()


class Claims(Protocol):
    """What a worker claims send boundaries with: ``ClaimClient``, or a test's own."""

    async def claim(self, claim: Claim) -> ClaimAnswer:
        """Ask to cross (``lockgate.adapters.claims``).

        Raises:
            ClaimUnanswered: no answer.
        """
        ...


class _ReportNotPublished(Exception):
    """Publishing a report failed; the order is retried."""


class AttemptRunner:
    """Runs one capability's execution orders: execute, claim the boundary, report, settle."""

    def __init__(
        self,
        adapter: Adapter,
        js: JetStreamContext,
        *,
        name: str,
        claims: Claims,
        ack_wait_s: float,
        meter: metrics.Adapter,
        running: dict[str, ExecutionOrder],
        tracing: Tracing | None = None,
    ) -> None:
        self.adapter = adapter
        self.contract = adapter.contract
        self.capability = adapter.contract.name
        self._js = js
        self._name = name
        self._claims = claims
        self._ack_wait_s = ack_wait_s
        self._meter = meter
        #: Orders executing in this process, by attempt id (the worker's, for interruptions).
        self._running = running
        self._tracing = tracing

    async def execute(self, order: ExecutionOrder, msg: Msg) -> Settlement:
        """Execute ``order``, timed and counted by how it ended (and traced when tracing is on)."""
        started = time.perf_counter()
        result = "error"  # what an exception escaping the execution counts as
        tracing = self._tracing
        try:
            if tracing is None:
                settle, result = await self._run(order, msg)
                return settle
            attributes = {"lockgate.capability": self.capability, "lockgate.adapter": self._name,
                          "lockgate.attempt_id": order.attempt_id}
            with tracing.span(f"adapter {self.capability} execute", order.intent_id,
                              attributes=attributes) as span:
                try:
                    settle, result = await self._run(order, msg)
                finally:
                    tracing.outcome(span, result)
                return settle
        finally:
            self._meter.executed(result, time.perf_counter() - started)

    async def _run(self, order: ExecutionOrder, msg: Msg) -> tuple[Settlement, str]:
        """Execute ``order``; return how to settle it and how it ended (``ADAPTER_EXECUTIONS``)."""
        async def progress(stage: ReportStage, receipt: dict[str, str]) -> None:
            await self._report(order, stage, receipt=receipt)

        # This try's own name: a claim asked again after its answer was lost is its own.
        claimant = f"{self._name}:{random_id()}"
        delivered = int(msg.metadata.num_delivered or 1)
        boundary = SendBoundary(lambda: self._cross(order, claimant, delivered), progress)
        invocations[self.capability] += 1
        heartbeat = asyncio.create_task(self._keep_alive(msg))
        self._running[order.attempt_id] = order
        try:
            async with asyncio.timeout(self.contract.outcome_deadline_s):
                completed = await self.adapter.execute(order, boundary)
        except _ReportNotPublished:
            return Settlement.NAK, "report_failed"
        except Exception as exc:  # mapped to a report or to silence
            if boundary.refused is not None:
                # Refused at the boundary, however the adapter passed the refusal on: the
                # executor recorded what the refusal means; nothing is reported.
                return boundary.refused.settle, "refused"
            return await self._failed(order, boundary, exc)
        finally:
            heartbeat.cancel()
            self._running.pop(order.attempt_id, None)
        if boundary.refused is not None:
            log.error("%s attempt %s: execute returned although its send boundary was refused",
                      self.capability, order.attempt_id)
            return boundary.refused.settle, "refused"
        if not boundary.crossed:
            # An adapter that forgot to cross: the effect is done, so it is claimed as
            # written (the executor records it sent, if the attempt still is open).
            await self._claim_written(order, claimant)
            boundary.mark_crossed()
        await self._report(
            order, ReportStage.COMPLETED, receipt=dict(completed.receipt),
            result=dict(completed.result),
        )
        return Settlement.ACK, "completed"

    async def _failed(
        self, order: ExecutionOrder, boundary: SendBoundary, exc: Exception
    ) -> tuple[Settlement, str]:
        """Report how ``execute`` failed, or nothing once the boundary was crossed."""
        if isinstance(exc, Rejected):
            await self._report(order, ReportStage.REJECTED, reason=exc.reason, detail=exc.detail)
            return Settlement.ACK, "rejected"
        if isinstance(exc, Interrupted):
            await self._report(order, ReportStage.INTERRUPTED, reason=exc.reason, detail=exc.detail)
            return Settlement.ACK, "interrupted"
        if boundary.crossed:
            # The effect may have happened: say nothing; the executor's deadline
            # turns the silence into OutcomeUnknown.
            log.error(
                "%s attempt %s failed after the send boundary: %r",
                self.capability, order.attempt_id, exc,
            )
            return Settlement.ACK, "unknown"
        if isinstance(exc, NotSent):
            reason, detail = exc.reason, exc.detail
        elif isinstance(exc, TimeoutError):
            reason, detail = "adapter.timeout", "execute did not finish in time"
        else:
            log.error("%s attempt %s failed", self.capability, order.attempt_id, exc_info=exc)
            reason, detail = "adapter.error", f"{type(exc).__name__}: {exc}"
        # Not crossed, so not claimed: should another delivery claim the attempt meanwhile,
        # the record says sent and this report is ignored.
        await self._report(order, ReportStage.FAILED_BEFORE_SEND, reason=reason, detail=detail)
        return Settlement.ACK, "not_sent"

    async def _cross(self, order: ExecutionOrder, claimant: str, delivered: int = 1) -> datetime | None:
        """Right before the remote write: claim the boundary of the executor, which decides on
        the record; return the latest moment the write may take effect
        (``SendBoundary.not_after``).

        Raises:
            BoundaryRefused: the executor refused (a withdrawal, the attempt over, out of
                time, claimed by another delivery: the record says so already), no answer
                came (the order comes again), or the answer came too late to write.
        """
        again = Settlement.NAK if delivered < UNCHECKED_DELIVERIES else Settlement.ACK
        try:
            answer = await self._claims.claim(Claim(order=order, claimant=claimant))
        except ClaimUnanswered as exc:
            # Perhaps recorded: the order comes again, and its next claim is another's.
            raise BoundaryRefused("order.unchecked", str(exc), settle=Settlement.NAK) from exc
        if answer.verdict is ClaimVerdict.UNCHECKED:
            if again is Settlement.ACK:
                log.error("%s attempt %s: its claim could not be checked in %d deliveries; "
                          "given up unwritten", self.capability, order.attempt_id, delivered)
            raise BoundaryRefused(answer.reason or "order.unchecked", answer.detail, settle=again)
        if answer.verdict is not ClaimVerdict.CROSSED:
            log.warning("refused order %s/%s at the send boundary: %s %s", order.intent_id,
                        order.attempt_id, answer.reason, answer.detail)
            raise BoundaryRefused(answer.reason or "order.stale", answer.detail)
        if answer.not_after is not None and datetime.now(UTC) >= answer.not_after:
            # Crossed on the record, yet past the moment the write may land (this worker
            # was held up): nothing is written. The record says sent, so the outcome is
            # reconciled by query.
            log.error("%s attempt %s claimed its boundary too late; not written",
                      self.capability, order.attempt_id)
            raise BoundaryRefused("order.claimed-late", "claimed too late to write")
        return answer.not_after

    async def _claim_written(self, order: ExecutionOrder, claimant: str) -> None:
        """Tell the executor the adapter wrote without crossing (best effort: it is done)."""
        try:
            answer = await self._claims.claim(Claim(order=order, claimant=claimant, written=True))
        except ClaimUnanswered as exc:
            log.error("%s attempt %s written without crossing, and not claimed: %s",
                      self.capability, order.attempt_id, exc)
            return
        if answer.verdict is not ClaimVerdict.CROSSED:
            log.error("%s attempt %s written without crossing after its attempt ended: %s %s",
                      self.capability, order.attempt_id, answer.reason, answer.detail)

    async def _keep_alive(self, msg: Msg) -> None:
        """Tell the server the order is still being worked on, so it is not redelivered."""
        while True:
            await asyncio.sleep(self._ack_wait_s / 3)
            with contextlib.suppress(NatsError):
                await msg.in_progress()

    async def _report(
        self,
        order: ExecutionOrder,
        stage: ReportStage,
        *,
        reason: str | None = None,
        detail: str = "",
        receipt: dict[str, str] | None = None,
        result: dict[str, Any] | None = None,
    ) -> None:
        """Publish one report (a second of the same stage is dropped as a duplicate).

        Raises:
            _ReportNotPublished: the stream did not acknowledge it.
        """
        report = AttemptReport(
            tenant=order.tenant,
            intent_id=order.intent_id,
            attempt_id=order.attempt_id,
            stage=stage,
            reason=reason,
            detail=bounded(detail),
            receipt=receipt or {},
            result=result or {},
            adapter=self._name,
            reported_at=datetime.now(UTC),
            token=order.report_token,
        )
        try:
            await self._js.publish(
                subjects.report(self.capability, order.intent_id),
                msgspec.json.encode(report),
                headers={"Nats-Msg-Id": report_msg_id(order.attempt_id, stage, order.report_token)},
            )
        except (TimeoutError, NatsError) as exc:
            raise _ReportNotPublished(f"{stage} report not published: {exc!r}") from exc
