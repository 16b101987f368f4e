"""The behaviour table (``lockgate.client.demo.SCENARIOS``) played against a running system,
as ``lockgate demo`` plays it, judged by the responses and the case-notes world's counts."""

from __future__ import annotations

from dataclasses import dataclass, field

from lockgate.client.demo import SCENARIOS
from lockgate.client.sdk import ClientError, Gateway
from lockgate.core.ids import intent_id_for, random_id
from lockgate.testing.system import System
from lockgate.worlds.casenotes.world import World


@dataclass
class Played:
    """What the table did: the rows that came out otherwise, and every intent it made."""

    wrong: list[tuple[str, object]] = field(default_factory=list)
    intents: list[tuple[str, str]] = field(default_factory=list)


async def play_table(system: System, gw: Gateway, tenant: str) -> Played:
    """Play every row (``gw``, ``tenant``'s, for that tenant's rows; a gateway of their own
    for the others').

    A row is wrong when its status, code, field, adapter invocations or ledger writes are
    not the table's; a row whose proposal was not answered is wrong with what the store
    holds of its intent.
    """
    world, played = World(system.world_dir), Played()
    for s in SCENARIOS:
        scenario_gw = gw if s.tenant == tenant else await system.gateway(s.tenant)
        try:
            before = (world.invocations, len(world.ledger()))
            run = await scenario_gw.open_run(tenant=s.tenant, actor=s.actor, context={"case_id": s.case})
            turn = await run.open_turn()
            call_id = random_id()
            intent_id = intent_id_for(s.tenant, run.id, call_id)
            played.intents.append((s.tenant, intent_id))
            try:
                resp = await turn.propose(tool=s.tool, arguments=s.arguments, call_id=call_id)
            except ClientError as exc:
                nc = await system.connect()
                try:
                    stored = [e.event_type for e in (await system.store(nc).load(s.tenant, intent_id)).events]
                finally:
                    await nc.close()
                played.wrong.append((s.name, f"{type(exc).__name__}: {exc}; stored {stored}"))
                continue
            if s.repeat and await turn.propose(tool=s.tool, arguments=s.arguments, call_id=call_id) != resp:
                played.wrong.append((s.name, "a repeated proposal was answered otherwise"))
            after = (world.invocations, len(world.ledger()))
            got = (resp.status, resp.code, resp.field, after[0] - before[0], after[1] - before[1])
            if got != (s.status, s.code, s.field, s.invocations, s.ledger):
                played.wrong.append((s.name, got))
        finally:
            if scenario_gw is not gw:
                await scenario_gw.close()
    return played
