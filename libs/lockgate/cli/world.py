"""``lockgate world ledger | fault``: read a simulated world, or arm a fault in it.

It reads the worlds' files under the var directory; it does not look for the running system.
"""

from __future__ import annotations

import argparse

from lockgate.cli.group import CommandGroup, Subparsers, UsageError, command
from lockgate.cli.where import world_dir
from lockgate.client.output import Output


def _register(sub: Subparsers) -> None:
    world = command(sub, "world", "read a simulated world, or arm a fault in it")
    world_sub = world.add_subparsers(dest="world_command", required=True)
    ledger = command(world_sub, "ledger", "list every write the world recorded")
    ledger.add_argument("world", help="which world (case, items, repo)")
    fault = command(world_sub, "fault", "arm a fault for the next calls (items world)")
    fault.add_argument("world", help="which world (items)")
    fault.add_argument("fault", help="drop_response, crash_after_send, crash_after_commit, "
                                     "fail_before_send, query_unavailable")
    fault.add_argument("--server", required=True, choices=("P", "Q"),
                       help="P (draft.prepare_private) or Q (item.publish)")
    fault.add_argument("--times", type=int, default=1)


def _world(args: argparse.Namespace, out: Output) -> int:
    if args.world not in ("case", "items", "repo"):
        raise UsageError(f"unknown world {args.world!r}; known: case, items, repo")
    if args.world_command == "fault":
        return _arm(args, out)
    if args.world == "case":
        from lockgate.worlds.casenotes.adapter import CaseWorldSettings
        from lockgate.worlds.casenotes.world import print_ledger

        print_ledger(world_dir(CaseWorldSettings().dir, "case"), out)
        return 0
    if args.world == "repo":
        from lockgate.worlds.repo.adapter import RepoWorldSettings
        from lockgate.worlds.repo.world import print_ledger as print_repo

        print_repo(world_dir(RepoWorldSettings().dir, "repo"), out)
        return 0
    from lockgate.worlds.items.adapter import ItemsWorldSettings
    from lockgate.worlds.items.world import print_ledger as print_items

    print_items(world_dir(ItemsWorldSettings().dir, "items"), out)
    return 0


def _arm(args: argparse.Namespace, out: Output) -> int:
    if args.world != "items":
        raise UsageError("faults can be armed in the items world: lockgate world fault items …")
    from lockgate.worlds.items.adapter import ItemsWorldSettings
    from lockgate.worlds.items.world import World

    world = World(world_dir(ItemsWorldSettings().dir, "items"))
    try:
        world.inject(args.server, args.fault, args.times)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    faults = world.faults()
    armed = ", ".join(f"{f['fault']} on {f['server']} ({f['remaining']} left)" for f in faults)
    out.record({"armed": args.fault, "server": args.server, "times": args.times, "faults": faults},
               text=f"armed {args.fault} on server {args.server} for the next {args.times} "
                    f"call(s); armed now: {armed or 'none'}")
    return 0


WORLD = CommandGroup("world", _register, _world)
