"""The executor's FastStream app."""

from __future__ import annotations

import logging

from faststream import FastStream

from lockgate.authz.source import BundleSource
from lockgate.executor.handlers import ExecutorHandlers
from lockgate.runtime.consumer import Delivery
from lockgate.runtime.context import Ports
from lockgate.runtime.keys import report_key
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
from lockgate.runtime.specs import EXECUTOR as SPEC

log = logging.getLogger("lockgate.executor")


def create_app(settings: Settings) -> FastStream:
    """Build the executor app (connects only when run)."""

    def build(ports: Ports) -> ExecutorHandlers:
        return ExecutorHandlers(ports, BundleSource(settings.policy_dir), utc_now,
                                report_key=report_key(settings))

    app, broker, service = service_app(settings, SPEC.name, build)

    async def claim(msg: Delivery) -> bytes:
        return await answer(service.handlers.claim(msg.raw_message.subject, msg.body), log, "claim")

    async def withdraw(msg: Delivery) -> bytes:
        return await answer(
            service.handlers.withdraw(msg.raw_message.subject, msg.body), log, "withdraw")

    add_answers(broker, SPEC, {"claim": claim, "withdraw": withdraw}, log)

    async def on_ready(msg: Delivery) -> None:
        await service.handlers.ready(recorded_event(msg), deliveries(msg), timer=msg.raw_message.reply)

    async def on_settled(msg: Delivery) -> None:
        await service.handlers.settled(recorded_event(msg))

    async def on_report(msg: Delivery) -> None:
        raw = msg.raw_message
        await service.handlers.report(raw.data, raw.subject, int(raw.metadata.sequence.stream))

    entries = {"ready": on_ready, "report": on_report, "settled": on_settled}
    for consumer, entry in SPEC.subscriptions(entries):
        add_durable(broker, Subscription(consumer, entry), log, service)
    return app
