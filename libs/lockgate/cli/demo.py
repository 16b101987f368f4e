"""``lockgate demo``: walk the foundation's behaviour table (``lockgate.client.demo``) against a running system."""

from __future__ import annotations

import argparse

from lockgate.cli.group import CommandGroup, Subparsers, command
from lockgate.cli.where import Where, on_system, world_dir
from lockgate.client.demo import SCENARIOS, Scenario
from lockgate.client.output import Output
from lockgate.client.sdk import Gateway
from lockgate.core.ids import random_id


def _register(sub: Subparsers) -> None:
    command(sub, "demo", "walk the foundation's behaviour table against a running system")


async def _play(gw: Gateway, s: Scenario) -> tuple[str, str, str | None]:
    run = await gw.open_run(tenant=s.tenant, actor=s.actor, context={"case_id": s.case})
    turn = await run.open_turn()
    call_id = random_id()
    resp = await turn.propose(tool=s.tool, arguments=s.arguments, call_id=call_id)
    if s.repeat:
        again = await turn.propose(tool=s.tool, arguments=s.arguments, call_id=call_id)
        if again != resp:
            return "mismatch", "repeat.differs", None
    return resp.status, resp.code, resp.field


async def _demo(args: argparse.Namespace, where: Where, out: Output) -> int:
    from lockgate.worlds.casenotes.adapter import CaseWorldSettings
    from lockgate.worlds.casenotes.world import World

    world = World(world_dir(CaseWorldSettings().dir, "case"))
    gateways: dict[str, Gateway] = {}
    failures = 0
    played: list[dict[str, object]] = []
    try:
        for s in SCENARIOS:
            if s.tenant not in gateways:
                gateways[s.tenant] = await where.gateway(f"agent-{s.tenant}", host=True)
            before = (world.invocations, len(world.ledger()))
            status, code, field = await _play(gateways[s.tenant], s)
            after = (world.invocations, len(world.ledger()))
            ok = (status, code, field) == (s.status, s.code, s.field) and (
                after[0] - before[0], after[1] - before[1]) == (s.invocations, s.ledger)
            failures += not ok
            played.append({
                "scenario": s.name, "status": status, "code": code, "field": field,
                "adapter_invocations": after[0] - before[0], "ledger_writes": after[1] - before[1],
                "ledger_total": after[1], "as_expected": ok,
            })
    finally:
        for gw in gateways.values():
            await gw.close()
    out.rows({"SCENARIO": "scenario", "STATUS": "status", "CODE": "code", "FIELD": "field",
              "ADAPTER CALLS": "adapter_invocations", "LEDGER WRITES": "ledger_writes",
              "AS EXPECTED": "as_expected"}, played)
    out.note(f"{len(SCENARIOS) - failures} scenarios as expected, {failures} not")
    return 1 if failures else 0


DEMO = CommandGroup("demo", _register, on_system(_demo))
