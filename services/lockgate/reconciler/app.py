"""The reconciler's FastStream app."""

from __future__ import annotations

import logging

from faststream import FastStream

from lockgate.reconciler.handlers import ReconcilerHandlers
from lockgate.runtime.consumer import Delivery
from lockgate.runtime.service import (
    Subscription,
    add_answers,
    add_durable,
    answer,
    deliveries,
    recorded_event,
    service_app,
    utc_now,
)
from lockgate.runtime.settings import Settings
from lockgate.runtime.specs import RECONCILER as SPEC

log = logging.getLogger("lockgate.reconciler")


def create_app(settings: Settings) -> FastStream:
    """Build the reconciler app (connects only when run)."""
    app, broker, service = service_app(
        settings, SPEC.name, lambda ports: ReconcilerHandlers(ports, utc_now)
    )

    async def resolve(msg: Delivery) -> bytes:
        return await answer(
            service.handlers.resolve(msg.raw_message.subject, msg.body), log, "resolve")

    add_answers(broker, SPEC, {"resolve": resolve}, log)

    async def on_unknown(msg: Delivery) -> None:
        await service.handlers.unknown(recorded_event(msg), deliveries(msg))

    for consumer, entry in SPEC.subscriptions({"unknown": on_unknown}):
        add_durable(broker, Subscription(consumer, entry), log, service)
    return app
