"""Policy's FastStream app."""

from __future__ import annotations

import logging

from faststream import FastStream

from lockgate.authz.source import BundleSource
from lockgate.policy.handlers import PolicyHandlers
from lockgate.runtime.consumer import Delivery
from lockgate.runtime.context import Ports
from lockgate.runtime.service import (
    Subscription,
    add_durable,
    deliveries,
    recorded_event,
    service_app,
    utc_now,
)
from lockgate.runtime.settings import Settings
from lockgate.runtime.specs import POLICY as SPEC

log = logging.getLogger("lockgate.policy")


def create_app(settings: Settings) -> FastStream:
    """Build the policy app; the bundle is loaded and validated when it starts."""

    def build(ports: Ports) -> PolicyHandlers:
        bundles = BundleSource(settings.policy_dir)
        log.info("policy bundle %s loaded from %s", bundles.current().revision, settings.policy_dir)
        return PolicyHandlers(ports, bundles, utc_now)

    app, broker, service = service_app(settings, SPEC.name, build)

    async def on_normalized(msg: Delivery) -> None:
        await service.handlers.normalized(recorded_event(msg), deliveries(msg))

    async def on_paused(msg: Delivery) -> None:
        await service.handlers.paused(recorded_event(msg))

    async def on_settled(msg: Delivery) -> None:
        await service.handlers.settled(recorded_event(msg))

    entries = {"normalized": on_normalized, "paused": on_paused, "settled": on_settled}
    for consumer, entry in SPEC.subscriptions(entries):
        add_durable(broker, Subscription(consumer, entry), log, service)
    return app
