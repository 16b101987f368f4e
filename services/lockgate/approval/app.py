"""Approval's FastStream app."""

from __future__ import annotations

import logging

from faststream import FastStream

from lockgate.approval.handlers import ApprovalHandlers
from lockgate.authz.source import BundleSource
from lockgate.runtime.consumer import Delivery
from lockgate.runtime.service import (
    Subscription,
    add_answers,
    add_durable,
    answer,
    recorded_event,
    service_app,
    utc_now,
)
from lockgate.runtime.settings import Settings
from lockgate.runtime.specs import APPROVAL as SPEC

log = logging.getLogger("lockgate.approval")


def create_app(settings: Settings) -> FastStream:
    """Build the approval app (connects only when run)."""
    app, broker, service = service_app(
        settings,
        SPEC.name,
        lambda ports: ApprovalHandlers(
            ports, utc_now, review_ttl_s=settings.review_ttl_s,
            bundles=BundleSource(settings.policy_dir),
        ),
    )

    async def decide(msg: Delivery) -> bytes:
        return await answer(service.handlers.decide(msg.raw_message.subject, msg.body), log, "decide")

    async def show(msg: Delivery) -> bytes:
        return await answer(service.handlers.show(msg.raw_message.subject), log, "show")

    async def edit(msg: Delivery) -> bytes:
        return await answer(service.handlers.edit(msg.raw_message.subject, msg.body), log, "edit")

    add_answers(broker, SPEC, {"decide": decide, "show": show, "edit": edit}, log)

    async def on_decided(msg: Delivery) -> None:
        await service.handlers.decided(recorded_event(msg))

    async def on_review(msg: Delivery) -> None:
        await service.handlers.review_opened(recorded_event(msg))

    for consumer, entry in SPEC.subscriptions({"decided": on_decided, "review_opened": on_review}):
        add_durable(broker, Subscription(consumer, entry), log, service)
    return app
