"""The executor's FastStream app."""

from __future__ import annotations

import logging

from faststream import FastStream
from faststream.nats import NatsMessage

from lockgate.authz.source import BundleSource
from lockgate.executor.handlers import ExecutorHandlers
from lockgate.runtime.context import Ports
from lockgate.runtime.service import (
    Subscription,
    add_durable,
    recorded_event,
    service_app,
    utc_now,
)
from lockgate.runtime.settings import Settings

log = logging.getLogger("lockgate.executor")


def create_app(settings: Settings) -> FastStream:
    """Build the executor app (connects only when run)."""

    def build(ports: Ports) -> ExecutorHandlers:
        return ExecutorHandlers(ports, BundleSource(settings.policy_dir), utc_now)

    app, broker, service = service_app(settings, "executor", build)

    @broker.subscriber("lg.withdraw.*.*", queue="executor")
    async def withdraw(msg: NatsMessage) -> bytes:
        _, _, tenant, intent_id = msg.raw_message.subject.split(".")
        return await service.handlers.withdraw(tenant, intent_id, msg.body)

    async def on_ready(msg: NatsMessage) -> None:
        await service.handlers.ready(recorded_event(msg))

    async def on_authorized(msg: NatsMessage) -> None:
        await service.handlers.dispatch(recorded_event(msg))

    async def on_deadline(msg: NatsMessage) -> None:
        await service.handlers.deadline(recorded_event(msg))

    async def on_settled(msg: NatsMessage) -> None:
        await service.handlers.settled(recorded_event(msg))

    async def on_report(msg: NatsMessage) -> None:
        raw = msg.raw_message
        await service.handlers.report(raw.data, int(raw.metadata.sequence.stream))

    add_durable(broker, Subscription("executor-gate", on_ready), log, service)
    add_durable(broker, Subscription("executor-dispatch", on_authorized), log, service)
    add_durable(broker, Subscription("executor-deadlines", on_deadline, batch=64), log, service)
    add_durable(broker, Subscription("executor-reports", on_report), log, service)
    add_durable(broker, Subscription("executor-locks", on_settled), log, service)
    return app
