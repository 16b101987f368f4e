"""Intake's handlers: load what the candidate refers to, decide, append, answer."""

from __future__ import annotations

import asyncio
import logging

import msgspec
from nats.js.errors import KeyNotFoundError

from lockgate.adapters.sdk import HEARTBEAT_S
from lockgate.contracts.disclosure import model_view
from lockgate.contracts.messages import (
    Candidate,
    Catalogue,
    OpenRun,
    OpenTurn,
    Refusal,
    RunContext,
    RunOpened,
    Tool,
    TurnOpened,
)
from lockgate.core.canonical import digest
from lockgate.core.ids import intent_id_for, is_subject_token, random_id
from lockgate.eventstore.base import RecordedEvent
from lockgate.intake.domain import Inputs, decide_candidate, well_formed_ids
from lockgate.intent.aggregate import EffectIntent, Event
from lockgate.intent.codec import decode_event
from lockgate.runtime.context import Ports, run_key
from lockgate.runtime.service import Clock, decide_and_append, load_intent
from lockgate.runtime.settings import Settings

log = logging.getLogger("lockgate.intake")


#: A capability is offered while its adapter's last heartbeat is this recent (three
#: beats: a busy or restarting adapter is not dropped from the catalogue at once).
ALIVE_WITHIN_S = 3 * HEARTBEAT_S


def turn_key(tenant: str, run_id: str, turn_id: str) -> str:
    """Key of a turn's catalogue digest in the runs bucket."""
    return f"{tenant}.{run_id}.turn.{turn_id}"


def response_subject(tenant: str, run_id: str, candidate_id: str) -> str:
    """Where the model-facing response to a candidate is published."""
    return f"lg.response.{tenant}.{run_id}.{candidate_id}"


class IntakeHandlers:
    """Runs, turns, candidates and responses."""

    def __init__(self, ports: Ports, settings: Settings, clock: Clock) -> None:
        self.ports = ports
        self.settings = settings
        self.clock = clock

    async def open_run(self, tenant: str, body: bytes) -> bytes:
        """Record a run's authoritative context (the trusted host's request)."""
        try:
            req = msgspec.json.decode(body, type=OpenRun)
        except msgspec.MsgspecError as exc:
            return msgspec.json.encode(Refusal("run.malformed", str(exc)[:200]))
        run_id = req.run_id or random_id()
        if req.tenant != tenant:
            return msgspec.json.encode(Refusal("run.tenant-mismatch"))
        if not all(is_subject_token(x) for x in (tenant, run_id, req.actor)):
            return msgspec.json.encode(Refusal("run.malformed", "ids must be [A-Za-z0-9_-]{1,64}"))
        run = RunContext(
            run_id=run_id,
            tenant=tenant,
            actor=req.actor,
            context=dict(req.context),
            delegation=req.delegation,
            stage=req.stage,
            opened_at=self.clock(),
            roles=tuple(req.roles),
        )
        await self.ports.runs.put(run_key(tenant, run_id), msgspec.json.encode(run))
        return msgspec.json.encode(RunOpened(run_id=run_id, tenant=tenant, actor=req.actor))

    async def open_turn(self, tenant: str, run_id: str, body: bytes) -> bytes:
        """Snapshot the catalogue offered in a new turn and return it."""
        run = await self.ports.run(tenant, run_id)
        if run is None:
            return msgspec.json.encode(Refusal("run.unknown"))
        try:
            req = msgspec.json.decode(body or b"{}", type=OpenTurn)
        except msgspec.MsgspecError as exc:
            return msgspec.json.encode(Refusal("turn.malformed", str(exc)[:200]))
        turn_id = req.turn_id or random_id()
        if not is_subject_token(turn_id):
            return msgspec.json.encode(Refusal("turn.malformed"))
        catalogue = await self._catalogue()
        catalogue_digest = digest(msgspec.to_builtins(catalogue))
        key = catalogue_digest.removeprefix("sha256:")
        await self.ports.catalogues.put(key, msgspec.json.encode(catalogue))
        await self.ports.runs.put(turn_key(tenant, run_id, turn_id), key.encode())
        return msgspec.json.encode(
            TurnOpened(turn_id=turn_id, catalogue_digest=catalogue_digest, tools=catalogue.tools)
        )

    async def _catalogue(self) -> Catalogue:
        """Every registered capability whose adapter's heartbeat is recent."""
        names = await self.ports.registry.names()
        registrations = await asyncio.gather(*(self.ports.registry.registration(n) for n in names))
        now = self.clock()
        offered = [
            r.contract for r in registrations
            if r is not None and r.alive_at is not None
            and abs((now - r.alive_at).total_seconds()) < ALIVE_WITHIN_S
        ]
        return Catalogue(
            tools=tuple(Tool(c.name, c.description, c.argument_schema) for c in offered),
            revisions={c.name: c.revision for c in offered},
        )

    async def _turn_catalogue(self, tenant: str, run_id: str, turn_id: str) -> tuple[str | None, Catalogue | None]:
        try:
            key = (await self.ports.runs.get(turn_key(tenant, run_id, turn_id))).value or b""
            entry = await self.ports.catalogues.get(key.decode())
        except KeyNotFoundError:
            return None, None
        return "sha256:" + key.decode(), msgspec.json.decode(entry.value or b"", type=Catalogue)

    async def candidate(self, subject: str, data: bytes, message_id: str) -> None:
        """Record a candidate as received or rejected (once per call id)."""
        _, _, tenant, run_from_subject = subject.split(".", 3)
        try:
            candidate = msgspec.json.decode(data, type=Candidate)
            if candidate.run_id != run_from_subject or not well_formed_ids(candidate):
                raise ValueError("ids do not match the subject or are not tokens")
        except (msgspec.MsgspecError, ValueError) as exc:
            # No trustworthy call id: record it under one derived from the message.
            candidate = Candidate(
                run_id=run_from_subject,
                turn_id="malformed",
                call_id=f"malformed-{message_id}"[:64],
                tool="",
                arguments="",
            )
            log.warning("malformed candidate on %s: %s", subject, exc)
            await self._record(tenant, candidate, len(data), message_id, malformed=True)
            return
        await self._record(tenant, candidate, len(data), message_id, malformed=False)

    async def _record(
        self, tenant: str, candidate: Candidate, size: int, message_id: str, *, malformed: bool
    ) -> None:
        intent_id = intent_id_for(tenant, candidate.run_id, candidate.call_id)

        async def step(intent: EffectIntent | None) -> list[Event]:
            if intent is not None:
                return []  # the same call id again: one intent, already recorded
            run = await self.ports.run(tenant, candidate.run_id)
            digest_, catalogue = (None, None)
            if run is not None and not malformed:
                digest_, catalogue = await self._turn_catalogue(tenant, candidate.run_id, candidate.turn_id)
            contract = await self.ports.registry.get(candidate.tool) if candidate.tool else None
            inputs = Inputs(
                tenant=tenant,
                candidate=candidate,
                raw_size_bytes=size,
                run=run,
                catalogue_digest=digest_,
                catalogue=catalogue,
                contract=contract,
                max_candidate_bytes=self.settings.max_candidate_bytes,
                message_id=message_id,
                malformed=malformed,
            )
            event = decide_candidate(inputs, self.clock())
            return [event]

        await decide_and_append(self.ports.store, tenant, intent_id, step)

    async def respond(self, recorded: RecordedEvent) -> None:
        """Publish what the model should learn now that ``recorded`` happened."""
        event = decode_event(recorded)
        if isinstance(event, EffectIntent.PolicyDecided) and event.outcome not in ("deny", "pause"):
            return  # the next step (review or execution) is what the model learns of
        intent = await load_intent(self.ports.store, recorded.tenant, recorded.intent_id)
        if intent is None:
            return
        contract = await self.ports.registry.get(intent.tool) if intent.tool else None
        view = model_view(intent, contract)
        if view is None:
            return
        await self.ports.js.publish(
            response_subject(intent.tenant, intent.run_id, intent.intent_id),
            msgspec.json.encode(view),
            headers={"Nats-Msg-Id": f"response-{recorded.event_id}"},
        )
