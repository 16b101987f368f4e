"""Approval's service host: reviews answered on request, decisions and expiries on durables."""

from __future__ import annotations

import logging

from lockgate.approval.handlers import ApprovalHandlers
from lockgate.authz.source import BundleSource
from lockgate.core.clock import utc_now
from lockgate.runtime.consumer import Delivery
from lockgate.runtime.host import ServiceHost
from lockgate.runtime.service import answer, recorded_event
from lockgate.runtime.settings import Settings
from lockgate.runtime.specs import APPROVAL as SPEC

log = logging.getLogger("lockgate.approval")


def create_app(settings: Settings) -> ServiceHost[ApprovalHandlers]:
    """Build the approval host (connects only when run)."""
    host = ServiceHost(
        settings, SPEC,
        lambda ports: ApprovalHandlers(
            ports, utc_now, review_ttl_s=settings.review_ttl_s,
            bundles=BundleSource(settings.policy_dir),
        ),
        log,
    )

    async def decide(msg: Delivery) -> bytes:
        return await answer(host.handlers.decide(msg.raw_message.subject, msg.body), log, "decide")

    async def show(msg: Delivery) -> bytes:
        return await answer(host.handlers.show(msg.raw_message.subject), log, "show")

    async def edit(msg: Delivery) -> bytes:
        return await answer(host.handlers.edit(msg.raw_message.subject, msg.body), log, "edit")

    async def on_decided(msg: Delivery) -> None:
        await host.handlers.decided(recorded_event(msg))

    async def on_review(msg: Delivery) -> None:
        await host.handlers.review_opened(recorded_event(msg))

    host.answer(SPEC.show, show)
    host.answer(SPEC.decide, decide)
    host.answer(SPEC.edit, edit)
    host.durable(SPEC.decided, on_decided)
    host.durable(SPEC.review_opened, on_review)
    return host
