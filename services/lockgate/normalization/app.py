"""Normalization's service host: one durable, candidates received."""

from __future__ import annotations

import logging

from lockgate.core.clock import utc_now
from lockgate.normalization.handlers import NormalizationHandlers
from lockgate.runtime.consumer import Delivery
from lockgate.runtime.host import ServiceHost
from lockgate.runtime.service import deliveries, recorded_event
from lockgate.runtime.settings import Settings
from lockgate.runtime.specs import NORMALIZATION as SPEC

log = logging.getLogger("lockgate.normalization")


def create_app(settings: Settings) -> ServiceHost[NormalizationHandlers]:
    """Build the normalization host (connects only when run)."""
    host = ServiceHost(settings, SPEC, lambda ports: NormalizationHandlers(ports, utc_now), log)

    async def on_received(msg: Delivery) -> None:
        await host.handlers.received(recorded_event(msg), deliveries(msg))

    host.durable(SPEC.received, on_received)
    return host
