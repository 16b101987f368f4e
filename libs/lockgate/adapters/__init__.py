"""The adapter SDK: how a worker process serves a capability to Lockgate."""

from lockgate.adapters.sdk import (
    Adapter,
    AdapterError,
    Completed,
    NotSent,
    Rejected,
    SendBoundary,
    invocations,
    run_adapter,
    serve,
)

__all__ = [
    "Adapter",
    "AdapterError",
    "Completed",
    "NotSent",
    "Rejected",
    "SendBoundary",
    "invocations",
    "run_adapter",
    "serve",
]
