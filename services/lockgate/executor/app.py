"""The executor's FastStream app."""

from __future__ import annotations

import logging

from faststream import FastStream
from faststream.nats import NatsMessage

from lockgate.authz.source import BundleSource
from lockgate.contracts import subjects
from lockgate.executor.handlers import ExecutorHandlers
from lockgate.runtime.consumer import Delivery
from lockgate.runtime.context import Ports
from lockgate.runtime.keys import report_key
from lockgate.runtime.service import (
    Subscription,
    add_durable,
    answer,
    recorded_event,
    service_app,
    utc_now,
)
from lockgate.runtime.settings import Settings

log = logging.getLogger("lockgate.executor")


def create_app(settings: Settings) -> FastStream:
    """Build the executor app (connects only when run)."""

    def build(ports: Ports) -> ExecutorHandlers:
        return ExecutorHandlers(ports, BundleSource(settings.policy_dir), utc_now,
                                report_key=report_key(settings))

    app, broker, service = service_app(settings, "executor", build)

    @broker.subscriber(subjects.RECORD_ALL, queue="executor")
    async def record(msg: NatsMessage) -> bytes:
        return await answer(service.handlers.record(msg.raw_message.subject, msg.body), log, "record")

    @broker.subscriber(subjects.WITHDRAW_ALL, queue="executor")
    async def withdraw(msg: NatsMessage) -> bytes:
        return await answer(
            service.handlers.withdraw(msg.raw_message.subject, msg.body), log, "withdraw")

    async def on_ready(msg: Delivery) -> None:
        await service.handlers.ready(recorded_event(msg))

    async def on_deadline(msg: Delivery) -> None:
        await service.handlers.deadline(recorded_event(msg))

    async def on_settled(msg: Delivery) -> None:
        await service.handlers.settled(recorded_event(msg))

    async def on_report(msg: Delivery) -> None:
        raw = msg.raw_message
        await service.handlers.report(raw.data, raw.subject, int(raw.metadata.sequence.stream))

    add_durable(broker, Subscription("executor-gate", on_ready), log, service)
    add_durable(broker, Subscription("executor-deadlines", on_deadline, batch=64), log, service)
    add_durable(broker, Subscription("executor-reports", on_report), log, service)
    add_durable(broker, Subscription("executor-locks", on_settled), log, service)
    return app
