"""Policy's service host: decisions, pauses and budgets on durables; operators' bundle commands
on request."""

from __future__ import annotations

import logging

from lockgate.authz.source import BundleSource
from lockgate.core.clock import utc_now
from lockgate.policy.handlers import PolicyHandlers
from lockgate.runtime.consumer import Delivery
from lockgate.runtime.context import Ports
from lockgate.runtime.host import ServiceHost
from lockgate.runtime.service import answer, deliveries, recorded_event
from lockgate.runtime.settings import Settings
from lockgate.runtime.specs import POLICY as SPEC

log = logging.getLogger("lockgate.policy")


def create_app(settings: Settings) -> ServiceHost[PolicyHandlers]:
    """Build the policy host; the bundle is loaded and validated when it starts."""

    def build(ports: Ports) -> PolicyHandlers:
        bundles = BundleSource(settings.policy_dir)
        log.info("policy bundle %s loaded from %s", bundles.current().revision, settings.policy_dir)
        return PolicyHandlers(ports, bundles, utc_now)

    host = ServiceHost(settings, SPEC, build, log)

    async def on_normalized(msg: Delivery) -> None:
        await host.handlers.normalized(recorded_event(msg), deliveries(msg))

    async def on_paused(msg: Delivery) -> None:
        await host.handlers.paused(recorded_event(msg))

    async def on_settled(msg: Delivery) -> None:
        await host.handlers.settled(recorded_event(msg))

    async def on_commands(msg: Delivery) -> bytes:
        return await answer(host.handlers.commands(msg.raw_message.subject, msg.body),
                            log, "commands")

    host.durable(SPEC.normalized, on_normalized)
    host.durable(SPEC.paused, on_paused)
    host.durable(SPEC.settled, on_settled)
    host.answer(SPEC.commands, on_commands)
    return host
