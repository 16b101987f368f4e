"""``lockgate run``: start the whole system on this machine."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

from lockgate.cli.group import CommandGroup, Subparsers, command
from lockgate.client.output import Output
from lockgate.runtime.settings import Settings


def _register(sub: Subparsers) -> None:
    run = command(sub, "run", "start the whole system on this machine (what `make run` does)")
    run.add_argument("--port", type=int, default=None,
                     help="port of the embedded nats-server (with --cluster: of the first node; "
                          "0: ephemeral ports)")
    run.add_argument("--cluster", type=int, default=0, metavar="N",
                     help="run N nats-server nodes as one JetStream cluster on loopback, R3 "
                          "streams, two replicas of every service and adapter, views on "
                          "PostgreSQL (what `make cluster` does)")
    run.add_argument("--partitions", type=int, default=None, metavar="K",
                     help="keep the events in K streams, each with its own leader (default: "
                          "1; with --cluster N: N, the leaders spread over the nodes)")


def _run(args: argparse.Namespace, out: Output) -> int:
    from lockgate.operations.commands import cmd_run

    settings = Settings() if args.url is None else Settings(nats_url=args.url)
    embedded = args.url is None and "LOCKGATE_NATS_URL" not in os.environ
    run_args = argparse.Namespace(settings=settings, port=args.port, embedded=embedded,
                                  cluster=args.cluster, partitions=args.partitions)
    if not out.json:
        return cmd_run(run_args)
    # It serves until stopped and answers nothing: with --json its log is kept off stdout.
    with contextlib.redirect_stdout(sys.stderr):
        return cmd_run(run_args)


#: Runs until stopped; it starts the system, so it looks for none.
RUN = CommandGroup("run", _register, _run)
