"""``python -m lockgate.runtime.supervisor_main``: what ``make run`` starts.

Stands in for ``lockgate run`` until the CLI has that command; both call ``cmd_run``.
"""

from __future__ import annotations

import argparse
import sys

from lockgate.runtime.cli_ops import cmd_run
from lockgate.runtime.supervisor import DEFAULT_PORT


def main(argv: list[str] | None = None) -> int:
    """Parse ``--port`` and run the supervisor until a signal stops it."""
    parser = argparse.ArgumentParser(
        prog="python -m lockgate.runtime.supervisor_main",
        description="Run Lockgate on this machine: NATS, every service and the demo adapters.",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help="port of the embedded nats-server (unused when LOCKGATE_NATS_URL is set)",
    )
    return cmd_run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
