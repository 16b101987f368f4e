"""The executor's service host: the gate, reports and lock releases on durables; claims and withdrawals on request."""

from __future__ import annotations

import logging

from lockgate.authz.source import BundleSource
from lockgate.core.clock import utc_now
from lockgate.executor.handlers import ExecutorHandlers
from lockgate.runtime.consumer import Delivery
from lockgate.runtime.context import Ports
from lockgate.runtime.host import ServiceHost
from lockgate.runtime.keys import report_key
from lockgate.runtime.service import answer, deliveries, recorded_event
from lockgate.runtime.settings import Settings
from lockgate.runtime.specs import EXECUTOR as SPEC

log = logging.getLogger("lockgate.executor")


def create_app(settings: Settings) -> ServiceHost[ExecutorHandlers]:
    """Build the executor host (connects only when run)."""

    def build(ports: Ports) -> ExecutorHandlers:
        return ExecutorHandlers(ports, BundleSource(settings.policy_dir), utc_now,
                                report_key=report_key(settings))

    host = ServiceHost(settings, SPEC, build, log)

    async def claim(msg: Delivery) -> bytes:
        return await answer(host.handlers.claim(msg.raw_message.subject, msg.body), log, "claim")

    async def withdraw(msg: Delivery) -> bytes:
        return await answer(host.handlers.withdraw(msg.raw_message.subject, msg.body), log, "withdraw")

    async def on_ready(msg: Delivery) -> None:
        await host.handlers.ready(recorded_event(msg), deliveries(msg), timer=msg.raw_message.reply)

    async def on_settled(msg: Delivery) -> None:
        await host.handlers.settled(recorded_event(msg))

    async def on_report(msg: Delivery) -> None:
        raw = msg.raw_message
        await host.handlers.report(raw.data, raw.subject, int(raw.metadata.sequence.stream))

    host.answer(SPEC.withdraw, withdraw)
    host.answer(SPEC.claim, claim)
    host.durable(SPEC.ready, on_ready)
    host.durable(SPEC.report, on_report)
    host.durable(SPEC.settled, on_settled)
    return host
