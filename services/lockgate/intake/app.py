"""Intake's FastStream app: request/reply for runs and turns, durables for candidates and responses."""

from __future__ import annotations

import logging

from faststream import FastStream
from faststream.nats import NatsMessage

from lockgate.authz.source import BundleSource
from lockgate.intake.handlers import IntakeHandlers
from lockgate.runtime.consumer import Delivery
from lockgate.runtime.context import Ports
from lockgate.runtime.service import (
    Abandonment,
    Subscription,
    add_durable,
    answer,
    recorded_event,
    service_app,
    utc_now,
)
from lockgate.runtime.settings import Settings

log = logging.getLogger("lockgate.intake")


def message_id(msg: Delivery) -> str:
    """The candidate message's id: its ``Nats-Msg-Id``, else its stream sequence."""
    raw = msg.raw_message
    return (raw.headers or {}).get("Nats-Msg-Id") or f"seq-{raw.metadata.sequence.stream}"


def create_app(settings: Settings) -> FastStream:
    """Build the intake app (connects only when run)."""
    def build(ports: Ports) -> IntakeHandlers:
        # The bundle's limits apply here, before normalization and policy.
        return IntakeHandlers(ports, settings, utc_now, BundleSource(settings.policy_dir))

    app, broker, service = service_app(settings, "intake", build)

    @broker.subscriber("lg.run.*.open", queue="intake")
    async def open_run(msg: NatsMessage) -> bytes:
        tenant = msg.raw_message.subject.split(".")[2]
        return await answer(service.handlers.open_run(tenant, msg.body), log, "open run")

    @broker.subscriber("lg.turn.*.*", queue="intake")
    async def open_turn(msg: NatsMessage) -> bytes:
        _, _, tenant, run_id = msg.raw_message.subject.split(".")
        return await answer(service.handlers.open_turn(tenant, run_id, msg.body), log, "open turn")

    async def on_candidate(msg: Delivery) -> None:
        raw = msg.raw_message
        await service.handlers.candidate(raw.subject, raw.data, message_id(msg))

    async def unprocessable(msg: Delivery, why: Abandonment) -> None:
        raw = msg.raw_message
        await service.handlers.abandon(raw.subject, raw.data, message_id(msg), why)

    async def on_visible_event(msg: Delivery) -> None:
        await service.handlers.respond(recorded_event(msg))

    add_durable(broker, Subscription("intake", on_candidate, abandon=unprocessable), log, service)
    add_durable(broker, Subscription("intake-responses", on_visible_event), log, service)
    return app
