"""``lockgate run``: start the whole system on this machine."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys

from lockgate.cli.group import CommandGroup, Subparsers, command
from lockgate.client.output import Output
from lockgate.eventstore.partitions import MAX_PARTITIONS
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


def cmd_run(args: argparse.Namespace) -> int:
    """Run the supervisor (``make run``) until a signal stops it.

    Reads, when present on ``args``: ``settings`` (a :class:`Settings`; default: built
    from the environment), ``port`` (the embedded server's port; default 4222 when
    free, else a free one) and ``embedded`` (default: true unless ``nats_url`` was given
    explicitly, e.g. through ``LOCKGATE_NATS_URL``: then that server is used and nothing
    is started) and
    ``cluster`` (N > 1: the local cluster profile, see ``run_supervisor``).

    Returns:
        The supervisor's exit code: 0 after a signal, 2 when it could not start.
    """
    settings = getattr(args, "settings", None) or Settings()
    embedded = getattr(args, "embedded", None)
    if embedded is None:
        embedded = "nats_url" not in settings.model_fields_set
    port = getattr(args, "port", None)
    cluster = int(getattr(args, "cluster", 0) or 0)
    if cluster > 1 and not embedded:
        print("lockgate: --cluster starts its own nodes; unset LOCKGATE_NATS_URL and --url",
              file=sys.stderr)
        return 2
    partitions = getattr(args, "partitions", None)
    if partitions is None and cluster > 1 and "event_partitions" not in settings.model_fields_set:
        partitions = cluster  # a leader per node
    if partitions is not None:
        if not 1 <= int(partitions) <= MAX_PARTITIONS:
            print(f"lockgate: --partitions must be 1..{MAX_PARTITIONS}", file=sys.stderr)
            return 2
        settings = settings.model_copy(update={"event_partitions": int(partitions)})
    # The supervisor's imports are a run's, not every command's.
    from lockgate.operations.supervisor import run_supervisor

    return asyncio.run(
        run_supervisor(
            settings, embedded=bool(embedded), port=None if port is None else int(port),
            cluster=cluster,
        )
    )


def _run(args: argparse.Namespace, out: Output) -> int:
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
