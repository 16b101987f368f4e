"""A service on the service host whose handler makes the server close its connection.

It consumes the ``intake`` durable and, for each candidate, publishes on a subject
longer than the server's control line: nats-server answers ``-ERR 'maximum control line
exceeded'`` and closes the connection, and nats-py closes the client for good. Run as
``python -m fakes.closing`` (``LOCKGATE_NATS_URL`` set).
"""

from __future__ import annotations

import logging

from lockgate.runtime.consumer import Delivery
from lockgate.runtime.context import Ports
from lockgate.runtime.entry import run_service
from lockgate.runtime.host import ServiceHost
from lockgate.runtime.settings import Settings
from lockgate.runtime.settlement import Abandonment
from lockgate.runtime.spec import ServiceSpec
from lockgate.runtime.specs import INTAKE

log = logging.getLogger("fakes.closing")

#: Intake's candidates' durable alone, under a name of its own.
SPEC = ServiceSpec("closing", consumes=(INTAKE.candidate,))


def create_app(settings: Settings) -> ServiceHost[Ports]:
    """One durable whose every message ends the broker connection."""
    host = ServiceHost(settings, SPEC, lambda ports: ports, log)

    async def on_candidate(msg: Delivery) -> None:
        await host.handlers.nc.publish("x" * 5000, b"")
        await host.handlers.nc.flush()

    async def never(msg: Delivery, why: Abandonment) -> None:
        return None

    host.durable(INTAKE.candidate, on_candidate, abandon=never)
    return host


if __name__ == "__main__":
    run_service(create_app, "closing")
