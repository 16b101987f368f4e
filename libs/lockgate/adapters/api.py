"""What an adapter author writes against: ``Adapter``, its send boundary, what it returns and raises.

An adapter serves one capability: the effect Lockgate lets a model ask for, performed on
a remote system only once an intent is authorized. To write one, subclass ``Adapter``,
set ``contract`` (a ``CapabilityContract``) and implement four coroutines; then serve it
with ``run_adapter([MyAdapter()], Settings())`` (both from ``lockgate.adapters.sdk``)::

    class TicketComment(Adapter):
        contract = CapabilityContract(name="ticket.comment", ...)

        async def normalize(self, req): ...     # canonical arguments and resource, or a reason
        async def facts(self, req): ...         # what policies judge the resource by, now
        async def execute(self, order, boundary):
            await boundary.cross()              # right before the remote write
            ...                                 # write, once
            return Completed(receipt={"comment_id": "c1"})
        async def query(self, req): ...         # did the effect with this intent key happen?

What the four are handed and answer with is in ``lockgate.contracts.messages``.

A capability that is one typed Python function needs none of this by hand:
``@capability`` (``lockgate.adapters.functions``) derives the contract and this adapter from
its signature, and ``lockgate adapter serve module:attr`` serves it.

``execute`` is called only with an order that matches what was authorized, and says how
it ended by what it does:

- return ``Completed`` (a receipt and a bounded result): the effect happened;
- raise ``Rejected``: the remote system refused, nothing happened;
- raise ``NotSent``: it failed before the send boundary (the same intent may try again);
- raise ``Interrupted`` (an ``interruptible`` contract, after ``interrupt``): it stopped
  the effect before it completed.

``await boundary.cross()`` right before the remote write: it asks the executor to claim
the attempt's send boundary, which checks the order against the record and records the
crossing, and raises ``BoundaryRefused`` when the order must not be sent (withdrawn,
superseded, out of time, claimed by another delivery). Let it propagate and write
nothing. After crossing, any other exception
is reported as nothing at all: the effect may have happened, so Lockgate records the
outcome as unknown and asks ``query`` instead of guessing. ``boundary.acknowledged()``
and ``boundary.observed()`` may say how far the remote system got.

An adapter never reads or writes the event store and never acknowledges a message: the
worker (``lockgate.adapters.worker``) does, and claims each crossing of the executor
(``lockgate.adapters.claims``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import msgspec

from lockgate.contracts.capability import CapabilityContract
from lockgate.contracts.messages import (
    ExecutionOrder,
    Facts,
    FactsRequest,
    NormalizeRequest,
    NormalizeResult,
    QueryRequest,
    QueryResult,
)
from lockgate.contracts.vocabulary import ReportStage
from lockgate.core.errors import LockgateError
from lockgate.runtime.settlement import Settlement

#: Longest provider or exception text that goes into a report or a refusal.
DETAIL_MAX_CHARS = 300


def bounded(text: str, limit: int = DETAIL_MAX_CHARS) -> str:
    """Return ``text`` cut to ``limit`` characters (with an ellipsis when cut)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


class AdapterError(LockgateError):
    """Root of the outcomes an adapter signals by raising."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(detail or reason, code=reason)
        self.reason = reason
        self.detail = bounded(detail)


class Rejected(AdapterError):
    """The remote system refused the request: the effect did not happen."""


class NotSent(AdapterError):
    """The attempt failed before its send boundary: nothing reached the remote system."""

    retryable = True


class Interrupted(AdapterError):
    """An interruptible capability stopped the attempt before its effect completed."""


class BoundaryRefused(AdapterError):
    """Raised by ``SendBoundary.cross``: this order must not be sent (do not catch it).

    ``settle`` is what becomes of the order: ``ACK`` (the refusal is reported and final)
    or ``NAK`` (the record will say how the attempt ended on a later delivery).
    """

    def __init__(
        self, reason: str, detail: str = "", *, settle: Settlement = Settlement.ACK
    ) -> None:
        super().__init__(reason, detail)
        self.settle = settle


class Completed(msgspec.Struct, frozen=True):
    """The effect happened: its receipt (evidence) and a bounded result for the model."""

    receipt: dict[str, str]
    result: dict[str, Any] = msgspec.field(default_factory=dict)


class SendBoundary:
    """The point after which the effect may have happened; the adapter crosses it once.

    After crossing, an adapter may also say how far the remote system got:
    ``acknowledged`` (it accepted the request) and ``observed`` (its result is in).
    Each is a report, and so an attempt state on the record. The worker makes one per
    order, with what crossing and progress do (``on_cross``, which returns the
    ``not_after`` below, and ``on_progress``).

    ``not_after``, once crossed: the latest moment the remote write may take effect (the
    attempt's deadline, less the worker's margin). Past it the executor records the
    outcome unknown, and a query that finds the effect absent may let the same intent be
    tried again; a write of this attempt still on its way then (a process frozen between
    its crossing and its write, a request stuck in a queue) would land beside the retry.
    A remote system that can refuse a request arriving late (an expiring or conditional
    request) should be handed this; one that can neither refuse it nor deduplicate by the
    intent key should not declare ``retry_same_intent_if_absent``.
    """

    def __init__(
        self,
        on_cross: Callable[[], Awaitable[datetime | None]],
        on_progress: Callable[[ReportStage, dict[str, str]], Awaitable[None]] | None = None,
    ) -> None:
        self._on_cross = on_cross
        self._on_progress = on_progress
        self._crossed = False
        #: Set when the worker refused to let the adapter cross: how to settle the order.
        self.refused: BoundaryRefused | None = None
        #: The latest moment the write may take effect (``None``: the attempt has no deadline).
        self.not_after: datetime | None = None

    @property
    def crossed(self) -> bool:
        """True once ``cross`` returned."""
        return self._crossed

    async def cross(self) -> None:
        """Record that the request is about to be written to the remote system.

        Call it right before the write. It returns once the executor recorded the
        attempt as sent, having checked the order against the record; if anything stands
        in the way (a withdrawal, a later attempt, a rival claim, the deadline) it raises
        and the adapter must not write.

        Raises:
            BoundaryRefused: the order must not be sent (the worker has reported why).
        """
        if self.refused is not None:
            raise self.refused
        if not self._crossed:
            try:
                self.not_after = await self._on_cross()
            except BoundaryRefused as refused:
                self.refused = refused
                raise
            self._crossed = True

    def mark_crossed(self) -> None:
        """Note that the boundary was claimed by the worker itself (an adapter that forgot)."""
        self._crossed = True

    async def acknowledged(self, remote_ref: str = "") -> None:
        """The remote system accepted the request (``remote_ref``: its id for it)."""
        await self._progress(
            ReportStage.ACKNOWLEDGED, {"remote_ref": remote_ref} if remote_ref else {})

    async def observed(self) -> None:
        """The remote system's result is in; the adapter is checking it."""
        await self._progress(ReportStage.OBSERVED, {})

    async def _progress(self, stage: ReportStage, receipt: dict[str, str]) -> None:
        if not self._crossed:
            raise RuntimeError(f"{stage} before the send boundary was crossed")
        if self._on_progress is not None:
            await self._on_progress(stage, receipt)


class Adapter:
    """Base of an adapter: one capability contract and the four operations behind it."""

    contract: CapabilityContract

    async def normalize(self, req: NormalizeRequest) -> NormalizeResult:
        """Canonicalise model arguments with run context, or return a reason."""
        raise NotImplementedError

    async def facts(self, req: FactsRequest) -> Facts:
        """Return current facts about a resource."""
        raise NotImplementedError

    async def execute(self, order: ExecutionOrder, boundary: SendBoundary) -> Completed:
        """Perform the effect; call ``await boundary.cross()`` right before the remote write.

        Raises:
            Rejected: the remote system refused; nothing happened.
            NotSent: failed before the send boundary.
            Interrupted: stopped, after ``interrupt``, before the effect completed.
            BoundaryRefused: from ``boundary.cross()``, passed on.
        """
        raise NotImplementedError

    async def query(self, req: QueryRequest) -> QueryResult:
        """Say whether the effect with this intent key happened."""
        raise NotImplementedError

    async def interrupt(self, order: ExecutionOrder) -> None:
        """Asked to stop ``order``'s attempt while ``execute`` runs (interruptible contracts).

        Make the running ``execute`` stop and raise ``Interrupted`` if the remote system
        can still stop the effect; otherwise do nothing and let it finish: the record
        then says it completed. The default does nothing.
        """
        return None
