"""Intake's service host: request/reply for runs and turns, durables for candidates, responses and run ends."""

from __future__ import annotations

import logging

from lockgate.authz.source import BundleSource
from lockgate.contracts import subjects
from lockgate.core.clock import utc_now
from lockgate.core.ids import intent_id_for
from lockgate.intake.handlers import IntakeHandlers
from lockgate.intake.parsing import decode_candidate
from lockgate.runtime.consumer import Delivery
from lockgate.runtime.context import Ports
from lockgate.runtime.host import ServiceHost
from lockgate.runtime.service import answer, recorded_event
from lockgate.runtime.settings import Settings
from lockgate.runtime.settlement import Abandonment
from lockgate.runtime.specs import INTAKE as SPEC

log = logging.getLogger("lockgate.intake")


def message_id(msg: Delivery) -> str:
    """The candidate message's id: its ``Nats-Msg-Id``, else its stream sequence."""
    raw = msg.raw_message
    return (raw.headers or {}).get("Nats-Msg-Id") or f"seq-{raw.metadata.sequence.stream}"


def candidate_intent(msg: Delivery) -> str | None:
    """The intent a candidate is recorded on, when its subject and ids can be read (its trace)."""
    raw = msg.raw_message
    address = subjects.parse_propose_subject(raw.subject)
    candidate = decode_candidate(raw.data).candidate if address.routable else None
    if candidate is None:
        return None
    return intent_id_for(address.tenant, candidate.run_id, candidate.call_id)


def create_app(settings: Settings) -> ServiceHost[IntakeHandlers]:
    """Build the intake host (connects only when run)."""
    def build(ports: Ports) -> IntakeHandlers:
        # The bundle's limits apply here, before normalization and policy.
        return IntakeHandlers(ports, settings, utc_now, BundleSource(settings.policy_dir))

    host = ServiceHost(settings, SPEC, build, log)

    async def open_run(msg: Delivery) -> bytes:
        tenant = subjects.parse_run_open(msg.raw_message.subject)
        return await answer(host.handlers.open_run(tenant, msg.body), log, "open run")

    async def close_run(msg: Delivery) -> bytes:
        tenant = subjects.parse_run_close(msg.raw_message.subject)
        return await answer(host.handlers.close_run(tenant, msg.body), log, "close run")

    async def open_turn(msg: Delivery) -> bytes:
        tenant, run_id = subjects.parse_turn(msg.raw_message.subject)
        return await answer(host.handlers.open_turn(tenant, run_id, msg.body), log, "open turn")

    async def on_candidate(msg: Delivery) -> None:
        raw = msg.raw_message
        await host.handlers.candidate(raw.subject, raw.data, message_id(msg))

    async def unprocessable(msg: Delivery, why: Abandonment) -> None:
        raw = msg.raw_message
        await host.handlers.abandon(raw.subject, raw.data, message_id(msg), why)

    async def on_visible_event(msg: Delivery) -> None:
        await host.handlers.respond(recorded_event(msg))

    async def on_lease(msg: Delivery) -> None:
        raw = msg.raw_message
        await host.handlers.lease(raw.subject, raw.headers)

    async def lease_given_up(msg: Delivery, why: Abandonment) -> None:
        # Nothing of an intent's to record: a run whose end could not be acted on keeps
        # its waiting candidates until their reviews expire (each has its own deadline).
        log.error("the run end on %s was given up (%s: %s); its waiting candidates are left to "
                  "their reviews' expiry", msg.raw_message.subject, why.durable, why.cause)

    host.answer(SPEC.open_run, open_run)
    host.answer(SPEC.close_run, close_run)
    host.answer(SPEC.open_turn, open_turn)
    # A candidate given up is intake's own refusal on the record (no intent exists yet);
    # read only when tracing is on: a candidate's trace id is the intent it is recorded on.
    host.durable(SPEC.candidate, on_candidate, abandon=unprocessable, trace=candidate_intent)
    host.durable(SPEC.respond, on_visible_event)
    host.durable(SPEC.lease, on_lease, abandon=lease_given_up)
    return host
