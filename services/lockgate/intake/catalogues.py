"""What a run's turns are offered: each turn's catalogue, and what unlocks a capability.

A turn's catalogue is a snapshot, content-addressed in the ``LG_CATALOGUES`` bucket and named
by the turn's entry in ``LG_RUNS``: once read, neither changes, so both are kept in memory. A
capability that executed in a run is marked done there (never unmarked), which a capability
offered only ``after`` it waits for (``lockgate.contracts.offer``).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict

import msgspec

from lockgate.authz.source import BundleSource
from lockgate.contracts.capability import CapabilityContract
from lockgate.contracts.messages import Catalogue, RunContext, Tool
from lockgate.contracts.offer import Circumstances, alive, withheld_because
from lockgate.contracts.subjects import done_key, turn_key
from lockgate.core.bounded import keep
from lockgate.core.clock import Clock
from lockgate.runtime.context import Ports

#: Catalogues kept in memory per process (content-addressed: an entry never changes).
_CATALOGUES_CACHED = 1024
#: Turns whose catalogue key intake keeps in memory.
_TURNS_CACHED = 65_536
#: Done marks an intake process remembers having seen written, at most this many.
_DONE_KEPT = 65_536


class Catalogues:
    """The catalogues of runs' turns and the done marks of runs' capabilities, for one process."""

    def __init__(self, ports: Ports, clock: Clock, bundles: BundleSource | None) -> None:
        self._ports = ports
        self._clock = clock
        #: The bundle whose budgets decide what is withheld (``None``: no budgets).
        self._bundles = bundles
        self._catalogues: OrderedDict[str, Catalogue] = OrderedDict()
        #: Turn entry → its catalogue's key, for turns this process opened or read.
        self._turns: OrderedDict[str, str] = OrderedDict()
        #: Done marks this process wrote or found written (a mark is never deleted).
        self._marked: OrderedDict[str, None] = OrderedDict()

    def keep_turn(self, entry: str, key: str, catalogue: Catalogue) -> None:
        """Remember a turn's catalogue: a turn never changes once opened."""
        keep(self._turns, entry, key, _TURNS_CACHED)
        keep(self._catalogues, key, catalogue, _CATALOGUES_CACHED)

    async def offered(self, run: RunContext) -> Catalogue:
        """What this run's actor is offered now: every registered capability whose
        adapter's heartbeat is recent and whose rules (``lockgate.contracts.offer``) the
        run meets; the others are listed as withheld, with why."""
        names = await self._ports.registry.names()
        registrations = [r for r in await asyncio.gather(
            *(self._ports.registry.registration(n) for n in names)) if r is not None]
        now = self._clock()
        contracts = [r.contract for r in registrations]
        needed = sorted({name for c in contracts for name in c.offer.after})
        done_flags = await asyncio.gather(*(self.done(run, name) for name in needed))
        done = frozenset(name for name, flag in zip(needed, done_flags, strict=True) if flag)
        budgets = self._bundles.current().config.budgets if self._bundles is not None else ()
        left = await asyncio.gather(*(
            self._ports.budgets.remaining_for(budgets, tenant=run.tenant, actor=run.actor,
                                        run_id=run.run_id, capability=c.name, now=now)
            for c in contracts))
        offered: list[CapabilityContract] = []
        withheld: dict[str, str] = {}
        for r, budget_left in zip(registrations, left, strict=True):
            c = r.contract
            why = withheld_because(c.offer, data_classes=c.data_classes, cost=c.budget_cost, name=c.name,
                                   now=Circumstances(
                stage=run.stage, roles=run.roles, data_classes=run.data_classes, done=done,
                budget_left=budget_left, alive=alive(r.alive_at, now), capabilities=run.capabilities))
            if why is None:
                offered.append(c)
            else:
                withheld[c.name] = why
        return Catalogue(
            tools=tuple(Tool(c.name, c.description, c.argument_schema) for c in offered),
            revisions={c.name: c.revision for c in offered},
            schema_revisions={c.name: c.schema_revision for c in offered},
            effects={c.name: c.effect_class.value for c in offered},
            withheld=withheld,
        )

    async def done(self, run: RunContext, capability: str) -> bool:
        """True when ``capability`` executed in the run (intake marks it when it answers)."""
        try:
            key = done_key(run.tenant, run.run_id, capability)
            if key in self._marked:
                return True
            found = await self._ports.runs.done(run.tenant, run.run_id, capability)
        except ValueError:  # ids that make no key (``InvalidKey`` included)
            return False
        if found:
            keep(self._marked, key, None, _DONE_KEPT)
        return found

    async def of_turn(self, tenant: str, run_id: str,
                      turn_id: str) -> tuple[str | None, Catalogue | None]:
        """The digest and content of the catalogue offered in a turn.

        A turn's entry is written once (opening it again answers with the same
        snapshot), and the catalogue is content-addressed: both are kept in memory
        once read, so a candidate of a known turn costs no read.
        """
        entry = turn_key(tenant, run_id, turn_id)
        try:
            key = self._turns.get(entry)
            catalogue = self._catalogues.get(key) if key is not None else None
            if key is None or catalogue is None:
                # A turn opened a moment ago may not be on every replica yet: asked of the leader.
                key = await self._ports.runs.turn(tenant, run_id, turn_id)
                if key is None:
                    return None, None
                catalogue = self._catalogues.get(key)
                if catalogue is None:
                    catalogue = await self._ports.catalogues.get(key)
                    if catalogue is None:
                        return None, None
                self.keep_turn(entry, key, catalogue)
        except (ValueError, msgspec.MsgspecError):  # ``InvalidKey``, ``UnicodeDecodeError``
            return None, None
        return "sha256:" + key, catalogue

    async def mark_done(self, tenant: str, run_id: str, capability: str) -> None:
        """Mark ``capability`` executed in the run (what ``Offer.after`` waits for).

        Raises:
            ValueError: ids that make no key (``InvalidKey`` included).
        """
        key = done_key(tenant, run_id, capability)
        if key in self._marked:
            return  # written already: a run's later calls of a tool cost nothing
        await self._ports.runs.mark_done(tenant, run_id, capability)
        keep(self._marked, key, None, _DONE_KEPT)
