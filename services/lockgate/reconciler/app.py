"""The reconciler's service host: unknown outcomes on a durable, operators' resolutions on request."""

from __future__ import annotations

import logging

from lockgate.core.clock import utc_now
from lockgate.reconciler.handlers import ReconcilerHandlers
from lockgate.runtime.consumer import Delivery
from lockgate.runtime.host import ServiceHost
from lockgate.runtime.service import answer, deliveries, recorded_event
from lockgate.runtime.settings import Settings
from lockgate.runtime.specs import RECONCILER as SPEC

log = logging.getLogger("lockgate.reconciler")


def create_app(settings: Settings) -> ServiceHost[ReconcilerHandlers]:
    """Build the reconciler host (connects only when run)."""
    host = ServiceHost(settings, SPEC, lambda ports: ReconcilerHandlers(ports, utc_now), log)

    async def resolve(msg: Delivery) -> bytes:
        return await answer(host.handlers.resolve(msg.raw_message.subject, msg.body), log, "resolve")

    async def on_unknown(msg: Delivery) -> None:
        await host.handlers.unknown(recorded_event(msg), deliveries(msg))

    host.answer(SPEC.resolve, resolve)
    host.durable(SPEC.unknown, on_unknown)
    return host
