"""Normalization's FastStream app."""

from __future__ import annotations

import logging

from faststream import FastStream

from lockgate.normalization.handlers import NormalizationHandlers
from lockgate.runtime.consumer import Delivery
from lockgate.runtime.service import (
    Subscription,
    add_durable,
    deliveries,
    recorded_event,
    service_app,
    utc_now,
)
from lockgate.runtime.settings import Settings
from lockgate.runtime.specs import NORMALIZATION as SPEC

log = logging.getLogger("lockgate.normalization")


def create_app(settings: Settings) -> FastStream:
    """Build the normalization app (connects only when run)."""
    app, broker, service = service_app(
        settings, SPEC.name, lambda ports: NormalizationHandlers(ports, utc_now)
    )

    async def on_received(msg: Delivery) -> None:
        await service.handlers.received(recorded_event(msg), deliveries(msg))

    for consumer, entry in SPEC.subscriptions({"received": on_received}):
        add_durable(broker, Subscription(consumer, entry), log, service)
    return app
