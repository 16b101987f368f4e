"""A service on the service kit whose handler makes the server close its connection.

It consumes the ``intake`` durable and, for each candidate, publishes on a subject
longer than the server's control line: nats-server answers ``-ERR 'maximum control line
exceeded'`` and closes the connection, and nats-py closes the client for good. Run as
``python -m fakes.closing`` (``LOCKGATE_NATS_URL`` set).
"""

from __future__ import annotations

import logging

from faststream import FastStream

from lockgate.runtime.consumer import Delivery
from lockgate.runtime.entry import run_service
from lockgate.runtime.service import Subscription, add_durable, service_app
from lockgate.runtime.settings import Settings
from lockgate.runtime.settlement import Abandonment
from lockgate.runtime.specs import INTAKE

log = logging.getLogger("fakes.closing")


def create_app(settings: Settings) -> FastStream:
    """One durable whose every message ends the broker connection."""
    app, broker, service = service_app(settings, "closing", lambda ports: ports)

    async def on_candidate(msg: Delivery) -> None:
        await service.handlers.nc.publish("x" * 5000, b"")
        await service.handlers.nc.flush()

    async def never(msg: Delivery, why: Abandonment) -> None:
        return None

    add_durable(broker, Subscription(INTAKE.consumer("intake"), on_candidate, abandon=never), log, service)
    return app


if __name__ == "__main__":
    run_service(create_app, "closing")
