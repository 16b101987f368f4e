"""The adapter SDK: how a worker process serves a capability to Lockgate.

``lockgate.adapters.sdk`` holds everything an author imports, ``serve`` (the function that
serves adapters on a connection) included: here that name is the module of ``lockgate
adapter serve``, which importing it would bind over any function of that name.
"""

from lockgate.adapters.sdk import (
    Adapter,
    AdapterError,
    Completed,
    NotSent,
    Rejected,
    SendBoundary,
    invocations,
    run_adapter,
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
]
