"""``lockgate``: run the system, check it, propose from the shell, walk the demo, read worlds."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence

import msgspec

from lockgate.client.demo import SCENARIOS, Scenario
from lockgate.client.sdk import ClientError, Gateway, connect
from lockgate.core.ids import random_id
from lockgate.runtime.settings import Settings


def _context(pairs: Sequence[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--context expects KEY=VALUE, got {pair!r}")
        out[key] = value
    return out


async def _propose(args: argparse.Namespace, settings: Settings) -> int:
    gw = await connect(args.url or settings.nats_url)
    try:
        run = await gw.open_run(tenant=args.tenant, actor=args.actor, context=_context(args.context))
        turn = await run.open_turn()
        resp = await turn.propose(tool=args.tool, arguments=args.arguments,
                                  call_id=args.call_id, timeout_s=args.timeout)
        print(msgspec.json.encode(resp).decode())
        return 0
    finally:
        await gw.close()


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


async def _demo(args: argparse.Namespace, settings: Settings) -> int:
    from lockgate.worlds.casenotes.adapter import CaseWorldSettings
    from lockgate.worlds.casenotes.world import World

    world = World(CaseWorldSettings().dir)
    gw = await connect(args.url or settings.nats_url)
    failures = 0
    try:
        for s in SCENARIOS:
            before = (world.invocations, len(world.ledger()))
            status, code, field = await _play(gw, s)
            after = (world.invocations, len(world.ledger()))
            ok = (status, code, field) == (s.status, s.code, s.field) and (
                after[0] - before[0], after[1] - before[1]) == (s.invocations, s.ledger)
            failures += not ok
            print(json.dumps({
                "scenario": s.name, "status": status, "code": code, "field": field,
                "adapter_invocations": after[0] - before[0], "ledger_writes": after[1] - before[1],
                "ledger_total": after[1],
                "as_expected": ok,
            }))
    finally:
        await gw.close()
    print(f"{len(SCENARIOS) - failures} as expected, {failures} not")
    return 1 if failures else 0


def _ledger(args: argparse.Namespace) -> int:
    if args.world == "case":
        from lockgate.worlds.casenotes.adapter import CaseWorldSettings
        from lockgate.worlds.casenotes.world import print_ledger

        print_ledger(CaseWorldSettings().dir)
        return 0
    if args.world == "items":
        from lockgate.worlds.items.adapter import ItemsWorldSettings
        from lockgate.worlds.items.world import print_ledger as print_items

        print_items(ItemsWorldSettings().dir)
        return 0
    print(f"unknown world {args.world!r}; known: case, items", file=sys.stderr)
    return 2


async def _events(args: argparse.Namespace, settings: Settings) -> int:
    import nats

    from lockgate.eventstore.jetstream import JetStreamEventStore
    from lockgate.intent.codec import decode_event

    nc = await nats.connect(args.url or settings.nats_url, max_reconnect_attempts=2)
    try:
        history = await JetStreamEventStore(nc).load(args.tenant, args.intent)
        for recorded in history.events:
            event = decode_event(recorded)
            body = msgspec.to_builtins(event)
            print(json.dumps({"version": recorded.version, "type": recorded.event_type,
                              "sequence": recorded.sequence, "event": body}, default=str))
    finally:
        await nc.close()
    return 0 if history.events else 1


async def _intents(args: argparse.Namespace, settings: Settings) -> int:
    import nats

    from lockgate.eventstore.jetstream import JetStreamEventStore
    from lockgate.intent.codec import fold
    from lockgate.testing.invariants import by_intent

    nc = await nats.connect(args.url or settings.nats_url, max_reconnect_attempts=2)
    try:
        # A scan of the hot store: every live and recent intent (the projector's views
        # will answer this without reading the stream).
        histories = by_intent([e async for e in JetStreamEventStore(nc).scan()])
    finally:
        await nc.close()
    shown = 0
    for intent_id, events in histories.items():
        intent = fold(events)
        if intent is None or (args.tenant and intent.tenant != args.tenant):
            continue
        if args.state and intent.state.value != args.state:
            continue
        shown += 1
        current = intent.current_attempt
        print(json.dumps({
            "intent": intent_id, "tenant": intent.tenant, "run": intent.run_id,
            "tool": intent.tool, "state": intent.state.value, "reason": intent.reason,
            "attempts": len(intent.attempts),
            "attempt": current.attempt_id if current else None,
            "attempt_stage": current.stage if current else None,
            "updated_at": intent.modified_on.isoformat(),
        }))
    return 0


async def _reconcile(args: argparse.Namespace, settings: Settings) -> int:
    gw = await connect(args.url or settings.nats_url)
    try:
        event = await gw.resolve_outcome(
            tenant=args.tenant, candidate_id=args.intent,
            finding="confirmed" if args.confirmed else "absent", by=args.by, why=args.why,
        )
    finally:
        await gw.close()
    print(json.dumps({"recorded": event}))
    return 0


async def _withdraw(args: argparse.Namespace, settings: Settings) -> int:
    from lockgate.client.sdk import Run

    gw = await connect(args.url or settings.nats_url)
    try:
        run = Run(gw, id="", tenant=args.tenant, actor="")
        resp = await run.withdraw(args.intent, why=args.why, by=args.by)
    finally:
        await gw.close()
    print(msgspec.json.encode(resp).decode())
    return 0


def parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    p = argparse.ArgumentParser(prog="lockgate", description=__doc__)
    p.add_argument("--url", help="NATS URL (default: LOCKGATE_NATS_URL or nats://127.0.0.1:4222)")
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="start the whole system on this machine (what `make run` does)")
    run.add_argument("--port", type=int, default=None, help="port of the embedded nats-server")
    sub.add_parser("status", help="exit 0 only when every service and adapter answers")
    pr = sub.add_parser("propose", help="propose one tool call and print the model-facing response")
    pr.add_argument("--tenant", required=True)
    pr.add_argument("--actor", required=True)
    pr.add_argument("--context", action="append", default=[], metavar="KEY=VALUE")
    pr.add_argument("--tool", required=True)
    pr.add_argument("--arguments", required=True, help="raw argument text, exactly as the model wrote it")
    pr.add_argument("--call-id", default=None)
    pr.add_argument("--timeout", type=float, default=30.0)
    sub.add_parser("demo", help="walk the foundation's behaviour table against a running system")
    world = sub.add_parser("world", help="read a simulated world")
    world_sub = world.add_subparsers(dest="world_command", required=True)
    ledger = world_sub.add_parser("ledger", help="print every write as JSON lines")
    ledger.add_argument("world", help="which world (case, items)")
    it = sub.add_parser("intents", help="list intents (as JSON lines), e.g. --state unknown")
    it.add_argument("--state", default=None, help="only intents in this state (unknown, needs_operator, …)")
    it.add_argument("--tenant", default=None)
    rc = sub.add_parser("reconcile", help="settle an unknown outcome as an operator")
    rc.add_argument("intent")
    rc.add_argument("--tenant", required=True)
    found = rc.add_mutually_exclusive_group(required=True)
    found.add_argument("--confirmed", action="store_true", help="the effect happened")
    found.add_argument("--absent", action="store_true", help="the effect did not happen")
    rc.add_argument("--by", required=True, help="who decides (recorded)")
    rc.add_argument("--why", required=True, help="the evidence (recorded)")
    wd = sub.add_parser("withdraw", help="stop a candidate by its state")
    wd.add_argument("intent")
    wd.add_argument("--tenant", required=True)
    wd.add_argument("--by", default="operator")
    wd.add_argument("--why", default="")
    sub.add_parser("policy", help="validate a policy bundle or run its case tables",
                   add_help=False)
    ev = sub.add_parser("events", help="print an intent's stored events")
    ev.add_argument("intent")
    ev.add_argument("--tenant", required=True)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``lockgate`` command."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "policy" in argv[:3]:
        # Policy authoring works on files only: no broker, its own arguments.
        from lockgate.authz.cli import policy_main

        return policy_main(argv[argv.index("policy") + 1:])
    args = parser().parse_args(argv)
    settings = Settings() if args.url is None else Settings(nats_url=args.url)
    try:
        if args.command == "run":
            from lockgate.runtime.cli_ops import cmd_run

            return cmd_run(argparse.Namespace(settings=settings, port=args.port))
        if args.command == "status":
            from lockgate.runtime.cli_ops import cmd_status

            return asyncio.run(cmd_status(settings))
        if args.command == "propose":
            return asyncio.run(_propose(args, settings))
        if args.command == "demo":
            return asyncio.run(_demo(args, settings))
        if args.command == "world":
            return _ledger(args)
        if args.command == "events":
            return asyncio.run(_events(args, settings))
        if args.command == "intents":
            return asyncio.run(_intents(args, settings))
        if args.command == "reconcile":
            return asyncio.run(_reconcile(args, settings))
        if args.command == "withdraw":
            return asyncio.run(_withdraw(args, settings))
    except ClientError as exc:
        print(json.dumps({"error": exc.code, "detail": str(exc)}), file=sys.stderr)
        return 1
    return 2


if __name__ == "__main__":
    sys.exit(main())
