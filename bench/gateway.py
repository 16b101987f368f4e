"""Lockgate's side of the benchmark: proposals through the SDK, answered by every service.

Each proposer holds a run of its own on its own load case (``case-load-NN``, seeded by
the case-notes world for this purpose): the case's version is a precondition of every
note, so concurrent notes on one case would refuse each other at the final gate and
measure contention instead of the pipeline. Open-loop arrivals borrow a free run from
the pool; waiting for one counts in their latency.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

import lockgate.client
from bench.hops import Sent
from bench.load import Fire
from lockgate.client.sdk import Gateway, ResponseTimeout, Turn
from lockgate.runtime.credentials import Credentials

TENANT = "tenant-a"
ACTOR = "user-42"
TOOL = "case.add_note"
#: Load cases the case-notes world seeds (``case-load-00`` .. ``case-load-63``).
LOAD_CASES = 64


@dataclass
class Proposer:
    """Runs and turns opened once; proposals fired through them."""

    url: str
    nonce: str
    runs: int = LOAD_CASES
    gw: Gateway | None = None
    #: The agent runtime's user and the trusted host's (None on a broker without users).
    credentials: Credentials | None = None
    host: Credentials | None = None
    #: Executed candidates with when they were sent and answered, by label (``bench.hops``).
    sent: dict[str, list[Sent]] = field(default_factory=dict)
    _pool: asyncio.Queue[Turn] = field(default_factory=asyncio.Queue)

    async def start(self, timeout_s: float = 30.0) -> None:
        """Connect and open one run (with one turn) per load case.

        Intake offers a tool only when its adapter answers ``describe`` in time, which a
        freshly started (or busy) adapter may not: a turn without the tool is opened
        again until ``timeout_s`` has passed.

        Raises:
            RuntimeError: the tool was not offered in time.
        """
        self.gw = await lockgate.client.connect(
            self.url, credentials=self.credentials, host=self.host, timeout_s=10.0)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        for n in range(min(self.runs, LOAD_CASES)):
            run = await self.gw.open_run(
                tenant=TENANT, actor=ACTOR, context={"case_id": f"case-load-{n:02d}"}
            )
            while True:
                turn = await run.open_turn()
                if any(t.name == TOOL for t in turn.tools):
                    break
                if loop.time() > deadline:
                    raise RuntimeError(f"{TOOL} was not offered within {timeout_s:g}s")
                await asyncio.sleep(0.5)
            self._pool.put_nowait(turn)

    def fire(self, label: str, op_timeout_s: float, *, tool: str = TOOL, expect: str = "executed") -> Fire:
        """An operation for the load drivers: propose note ``i``, wait for its response.

        ``expect``: the status that counts as success (``denied`` for the rejected path).
        """

        async def propose(i: int) -> str:
            turn = await self._pool.get()
            sent_at = time.time()
            try:
                response = await turn.propose(
                    tool=tool,
                    arguments=json.dumps({"note": f"bench {label} {i}"}),
                    call_id=f"{self.nonce}-{label}-{i}",
                    timeout_s=op_timeout_s,
                )
            except ResponseTimeout:
                return "timeout"
            finally:
                self._pool.put_nowait(turn)
            if response.status != expect:
                return f"{response.status}:{response.code}"
            self.sent.setdefault(label, []).append(Sent(response.candidate_id, sent_at, time.time()))
            return "ok"

        return propose

    async def stop(self) -> None:
        """Close the connection."""
        if self.gw is not None:
            await self.gw.close()
            self.gw = None
