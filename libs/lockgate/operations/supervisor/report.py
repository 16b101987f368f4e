"""What the supervisor says on the terminal, and the error it stops with."""

from __future__ import annotations

import sys

from lockgate.core.errors import LockgateError


class SupervisorError(LockgateError):
    """The supervisor cannot start: no usable NATS server, or its topology failed."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="supervisor.start")


def _say(line: str, *, error: bool = False) -> None:
    print(line, file=sys.stderr if error else sys.stdout, flush=True)
