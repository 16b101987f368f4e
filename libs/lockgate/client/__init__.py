"""The SDK agent runtimes (and the trusted host) use to talk to Lockgate.

    gw = await lockgate.client.connect("nats://127.0.0.1:4222")
    run = await gw.open_run(tenant="tenant-a", actor="user-42", context={"case_id": "case-123"})
    turn = await run.open_turn()
    resp = await turn.propose(tool="case.add_note", arguments='{"note": "…"}', call_id="call-1")
"""

from lockgate.client.sdk import (
    CandidateTooLarge,
    ClientError,
    Gateway,
    InvalidCandidate,
    PermissionDenied,
    Refused,
    ResponseTimeout,
    Run,
    Turn,
    Unauthorized,
    UnknownCandidate,
    connect,
)
from lockgate.contracts.responses import ModelResponse

__all__ = [
    "CandidateTooLarge",
    "ClientError",
    "Gateway",
    "InvalidCandidate",
    "ModelResponse",
    "PermissionDenied",
    "Refused",
    "ResponseTimeout",
    "Run",
    "Turn",
    "Unauthorized",
    "UnknownCandidate",
    "connect",
]
