"""Approval's FastStream app."""

from __future__ import annotations

import logging

from faststream import FastStream
from faststream.nats import NatsMessage

from lockgate.approval.handlers import ApprovalHandlers
from lockgate.authz.source import BundleSource
from lockgate.contracts import subjects
from lockgate.runtime.consumer import Delivery
from lockgate.runtime.service import (
    Subscription,
    add_durable,
    answer,
    recorded_event,
    service_app,
    utc_now,
)
from lockgate.runtime.settings import Settings

log = logging.getLogger("lockgate.approval")


def create_app(settings: Settings) -> FastStream:
    """Build the approval app (connects only when run)."""
    app, broker, service = service_app(
        settings,
        "approval",
        lambda ports: ApprovalHandlers(
            ports, utc_now, review_ttl_s=settings.review_ttl_s,
            bundles=BundleSource(settings.policy_dir),
        ),
    )

    @broker.subscriber(subjects.review_all("decide"), queue="approval")
    async def decide(msg: NatsMessage) -> bytes:
        return await answer(service.handlers.decide(msg.raw_message.subject, msg.body), log, "decide")

    @broker.subscriber(subjects.review_all("show"), queue="approval")
    async def show(msg: NatsMessage) -> bytes:
        return await answer(service.handlers.show(msg.raw_message.subject), log, "show")

    async def on_decided(msg: Delivery) -> None:
        await service.handlers.decided(recorded_event(msg))

    async def on_review(msg: Delivery) -> None:
        await service.handlers.review_opened(recorded_event(msg))

    add_durable(broker, Subscription("approval", on_decided), log, service)
    add_durable(broker, Subscription("approval-expiry", on_review), log, service)
    return app
