"""Runs, turns and proposals over NATS; responses read from ``LG_RESPONSES``.

What an agent runtime (or the trusted host, a reviewer, an operator) imports:
``connect`` (``connection``), the ``Gateway`` it returns (``gateway``), its ``Run``
and ``Turn`` (``runs``) and the errors they raise (``errors``). Requests to the services
(``requests``), the broker's refusals of a publish (``denials``) and the wake-ups of
proposals waiting for their responses (``wakeups``) are the parts beneath them.

The tunables below are read from the module that defines them: change them there.
"""

from lockgate.client.sdk.connection import CredentialsLike, connect
from lockgate.client.sdk.errors import (
    CandidateTooLarge,
    ClientError,
    InvalidCandidate,
    OutcomeSettled,
    PermissionDenied,
    Refused,
    ResponseTimeout,
    Unauthorized,
    UnknownCandidate,
)
from lockgate.client.sdk.gateway import Gateway
from lockgate.client.sdk.requests import OPEN_RETRY_S
from lockgate.client.sdk.runs import KNOWN_WITHIN_S, Run, Turn
from lockgate.client.sdk.wakeups import RUNS_WATCHED, WAKE_RETRY_S

__all__ = [
    "KNOWN_WITHIN_S",
    "OPEN_RETRY_S",
    "RUNS_WATCHED",
    "WAKE_RETRY_S",
    "CandidateTooLarge",
    "ClientError",
    "CredentialsLike",
    "Gateway",
    "InvalidCandidate",
    "OutcomeSettled",
    "PermissionDenied",
    "Refused",
    "ResponseTimeout",
    "Run",
    "Turn",
    "Unauthorized",
    "UnknownCandidate",
    "connect",
]
