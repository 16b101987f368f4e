"""A run's end: closed by its host, or idle past its lease; what it left waiting is withdrawn.

A reviewer must never approve an effect nobody waits for. A run ends when the trusted host
closes it, or when it opened with a lease (``OpenRun.lease_s``) and nobody used it for
that long. Its lease is kept by the leases port (``lockgate.runtime.ports.leases``: one
message on the run's lease subject whose TTL is the lease): intake starts it when the run
opens and renews it while turns are opened and calls proposed (at most every quarter lease
per run and process). Intake's ``intake-run-ends`` durable reads the lease subject: for an
end (a close, the server's marker when the lease ran out) it records the end (the record
every later turn and call is checked against) and asks the executor to withdraw each
candidate of the run still waiting for a reviewer or for policy's evidence.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable

from nats.errors import Error as NatsError

from lockgate.contracts.messages import RunContext
from lockgate.core.bounded import keep
from lockgate.runtime.ports.leases import UNANSWERED, Leases, closed_why, end_of

log = logging.getLogger("lockgate.intake.leases")

#: How often one process checks a run without a lease for an end another process recorded.
CHECK_S = 5.0
#: Runs whose last check and renewal one process remembers.
RUNS_KEPT = 16384
#: The statuses of a candidate that waits for someone: what a run's end withdraws.
WAITING = frozenset({"pending_approval", "paused"})


class RunEnds:
    """Intake's part of runs' ends: leases started and renewed, ends recorded and acted on."""

    def __init__(self, leases: Leases, clock: Callable[[], float] | None = None) -> None:
        """``clock``: seconds on a clock that never goes back (default: the event loop's)."""
        self.leases = leases
        self._clock = clock or (lambda: asyncio.get_running_loop().time())
        #: Run → when this process last checked it (and renewed its lease).
        self._checked: OrderedDict[tuple[str, str], float] = OrderedDict()
        #: Runs this process knows ended.
        self._ended: OrderedDict[tuple[str, str], str] = OrderedDict()

    async def start(self, run: RunContext) -> None:
        """Start a new run's lease (nothing for a run without one).

        Raises:
            NatsError: the lease could not be stored (the open should be asked again).
        """
        if run.lease_s is not None:
            await self.leases.start(run.tenant, run.run_id, run.lease_s)

    async def ended(self, run: RunContext) -> str | None:
        """Why ``run`` ended (``None``: it has not), renewing its lease on the way.

        Asks the port at most every quarter lease (or ``CHECK_S`` for a run without
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
            why = await self.leases.recorded_end(run.tenant, run.run_id)
            if why is None and run.lease_s is not None:
                why = await self.leases.renew(run.tenant, run.run_id, run.lease_s)
        except (NatsError, TimeoutError, OSError) as exc:
            log.warning("run %s/%s: could not check its end (%s); taken as running",
                        run.tenant, run.run_id, exc)
            self._checked.pop(key, None)
            return None
        if why is not None:
            keep(self._ended, key, why, RUNS_KEPT)
        return why

    async def close(self, tenant: str, run_id: str, why: str) -> None:
        """Write a close on the run's lease (the durable then acts on it) and record it."""
        await self.leases.close(tenant, run_id, why)
        await self.record_end(tenant, run_id, closed_why(why))

    async def record_end(self, tenant: str, run_id: str, why: str) -> None:
        """Record that the run ended (the first record stands)."""
        keep(self._ended, (tenant, run_id), why, RUNS_KEPT)
        await self.leases.record_end(tenant, run_id, why)

    async def withdraw_waiting(self, tenant: str, run_id: str, why: str) -> dict[str, str]:
        """Ask the executor to withdraw every candidate of the run still waiting; return
        what each became (candidate id → its model-facing status)."""
        outcome: dict[str, str] = {}
        for candidate_id, status in (await self.leases.statuses(tenant, run_id)).items():
            if status not in WAITING:
                continue
            became = await self.leases.withdraw(tenant, run_id, candidate_id, f"the run ended ({why})")
            if became == UNANSWERED:
                log.warning("run %s/%s ended: withdrawing %s went unanswered", tenant, run_id, candidate_id)
            outcome[candidate_id] = became
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
