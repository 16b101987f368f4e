"""Intake's handlers: load what the candidate refers to, decide, append, answer."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

import msgspec
from nats.errors import Error as NatsError

from lockgate.authz.config import Limit
from lockgate.authz.source import BundleSource
from lockgate.contracts.messages import (
    CloseRun,
    OpenRun,
    OpenTurn,
    Refusal,
    RunClosed,
    RunContext,
    RunOpened,
    TurnOpened,
)
from lockgate.contracts.subjects import (
    NotACommandSubject,
    is_client_token,
    parse_lease,
    turn_key,
)
from lockgate.contracts.vocabulary import DecisionOutcome
from lockgate.core.canonical import digest
from lockgate.core.clock import Clock
from lockgate.core.ids import (
    intent_id_for,
    is_capability_name,
    is_subject_token,
    random_id,
    reused_call_id_intent,
)
from lockgate.core.text import safe_text
from lockgate.eventstore.base import RecordedEvent
from lockgate.intake.catalogues import Catalogues
from lockgate.intake.domain import (
    Inputs,
    Limited,
    Read,
    Verdict,
    assess,
    decide_candidate,
    read_candidate,
    reused,
    same_call,
)
from lockgate.intake.leases import RunEnds
from lockgate.intent.aggregate import EffectIntent, Event, State
from lockgate.intent.codec import decode_event
from lockgate.intent.disclosure import model_view
from lockgate.intent.events import PolicyDecided
from lockgate.runtime import metrics
from lockgate.runtime.context import Ports
from lockgate.runtime.ports.ledger import Admission
from lockgate.runtime.settings import Settings
from lockgate.runtime.settlement import Abandonment

log = logging.getLogger("lockgate.intake")


#: The shortest and longest lease a run may have (a second; thirty days).
MIN_LEASE_S = 1.0
MAX_LEASE_S = 30 * 24 * 3600.0
#: Most capabilities a run may name as the ones its agent uses.
MAX_RUN_CAPABILITIES = 256


#: Refusals no later call of the tool corrects (a flood, an envelope, a stream, a tool that
#: is not there): not remembered as what the next call of the tool follows.
NOT_CORRECTED = ("rate.", "candidate.", "run.", "turn.", "proposal.", "stream.", "provider.", "lineage.",
                 "tool.unknown", "tool.not-offered", "tool.name-invalid", "tool.no-longer-offered")


@dataclass(frozen=True)
class Link:
    """The predecessor a candidate follows (its intent id), how the link was made, or
    that the one the runtime named is no candidate of the run."""

    intent_id: str = ""
    how: str = ""
    unknown: bool = False


def stand_in_id(read: Read) -> str:
    """The intent a candidate with an unusable envelope is recorded on."""
    return intent_id_for(read.tenant, read.candidate.run_id, read.candidate.call_id)


class IntakeHandlers:
    """Runs, turns, candidates and responses."""

    def __init__(
        self, ports: Ports, settings: Settings, clock: Clock, bundles: BundleSource | None = None,
    ) -> None:
        self.ports = ports
        self.settings = settings
        self.clock = clock
        #: The bundle whose ``limits`` intake applies (``None``: no limits).
        self.bundles = bundles
        self.limits = ports.limits
        #: Runs' leases and ends.
        self.leases = RunEnds(ports.leases)
        self.catalogues = Catalogues(ports, clock, bundles)

    async def open_run(self, tenant: str, body: bytes) -> bytes:
        """Record a run's authoritative context (the trusted host's request)."""
        try:
            req = msgspec.json.decode(body, type=OpenRun)
        except msgspec.MsgspecError as exc:
            return msgspec.json.encode(Refusal("run.malformed", str(exc)[:200]))
        run_id = req.run_id or random_id()
        if req.tenant != tenant:
            return msgspec.json.encode(Refusal("run.tenant-mismatch"))
        if not (all(is_client_token(x) for x in (tenant, run_id)) and is_subject_token(req.actor)):
            return msgspec.json.encode(
                Refusal("run.malformed", "ids must be [A-Za-z0-9_-]{1,64}, not starting with '_'"))
        if req.capabilities is not None and (
                len(req.capabilities) > MAX_RUN_CAPABILITIES
                or not all(is_capability_name(name) for name in req.capabilities)):
            return msgspec.json.encode(Refusal(
                "run.malformed", f"capabilities must be at most {MAX_RUN_CAPABILITIES} capability names"))
        if req.lease_s is not None and not MIN_LEASE_S <= req.lease_s <= MAX_LEASE_S:
            return msgspec.json.encode(Refusal(
                "run.malformed", f"a lease is {MIN_LEASE_S:g} to {MAX_LEASE_S:g} seconds"))
        run = RunContext(
            run_id=run_id,
            tenant=tenant,
            actor=req.actor,
            context=dict(req.context),
            delegation=req.delegation,
            stage=req.stage,
            opened_at=self.clock(),
            roles=tuple(req.roles),
            data_classes=tuple(req.data_classes) if req.data_classes is not None else None,
            capabilities=tuple(req.capabilities) if req.capabilities is not None else None,
            lease_s=req.lease_s,
        )
        await self.ports.runs.open(run)
        try:
            await self.leases.start(run)
        except (NatsError, TimeoutError) as exc:
            return msgspec.json.encode(Refusal("service.unavailable", f"the run's lease: {exc}"[:200]))
        return msgspec.json.encode(RunOpened(run_id=run_id, tenant=tenant, actor=req.actor))

    async def close_run(self, tenant: str, body: bytes) -> bytes:
        """End a run (the trusted host's request): no turn or call after it, and every
        candidate it left waiting withdrawn; the reply says what each became."""
        try:
            req = msgspec.json.decode(body, type=CloseRun)
        except msgspec.MsgspecError as exc:
            return msgspec.json.encode(Refusal("run.malformed", str(exc)[:200]))
        run = await self.ports.runs.get(tenant, req.run_id)
        if run is None:
            return msgspec.json.encode(Refusal("run.unknown"))
        why = safe_text(req.why, 200)
        await self.leases.close(tenant, run.run_id, why)
        withdrawn = await self.leases.withdraw_waiting(tenant, run.run_id, f"closed: {why}" if why else "closed")
        return msgspec.json.encode(RunClosed(run_id=run.run_id, withdrawn=withdrawn))

    async def lease(self, subject: str, headers: dict[str, str] | None) -> None:
        """A message of a run's lease (the run-ends durable): an end is recorded and acted on."""
        try:
            tenant, run_id = parse_lease(subject)
        except NotACommandSubject:
            return
        await self.leases.on_lease(tenant, run_id, headers)

    async def open_turn(self, tenant: str, run_id: str, body: bytes) -> bytes:
        """Snapshot the catalogue offered in a new turn and return it."""
        run = await self.ports.runs.get(tenant, run_id)
        if run is None:
            return msgspec.json.encode(Refusal("run.unknown"))
        ended = await self.leases.ended(run)
        if ended is not None:
            return msgspec.json.encode(Refusal("run.ended", ended[:200]))
        try:
            req = msgspec.json.decode(body or b"{}", type=OpenTurn)
        except msgspec.MsgspecError as exc:
            return msgspec.json.encode(Refusal("turn.malformed", str(exc)[:200]))
        turn_id = req.turn_id or random_id()
        if not is_client_token(turn_id):
            return msgspec.json.encode(Refusal("turn.malformed"))
        catalogue = await self.catalogues.offered(run)
        catalogue_digest = digest(msgspec.to_builtins(catalogue))
        key = catalogue_digest.removeprefix("sha256:")
        await self.ports.catalogues.put(key, catalogue)
        entry = turn_key(tenant, run_id, turn_id)
        if not await self.ports.runs.open_turn(tenant, run_id, turn_id, key):
            # Opened before (a retry whose answer was lost, a replica): a turn is one
            # snapshot, so the answer is the catalogue it was opened with.
            known, opened = await self.catalogues.of_turn(tenant, run_id, turn_id)
            if known is None or opened is None:
                return msgspec.json.encode(
                    Refusal("service.unavailable", "the turn could not be read; ask again"))
            return msgspec.json.encode(TurnOpened(turn_id=turn_id, catalogue_digest=known,
                                                  tools=opened.tools))
        self.catalogues.keep_turn(entry, key, catalogue)
        return msgspec.json.encode(
            TurnOpened(turn_id=turn_id, catalogue_digest=catalogue_digest, tools=catalogue.tools)
        )

    async def candidate(self, subject: str, data: bytes, message_id: str) -> None:
        """Record a candidate as received or rejected (once per call id and bytes).

        Whatever the subject and the bytes, one event is recorded: on the call id's own
        intent, on the intent of a reused call id (other bytes under a call id already
        used), or, for a message whose ids cannot be trusted, on one derived from the
        message.
        """
        read = read_candidate(subject, data, message_id)
        if read.problem is not None:
            log.warning("malformed candidate on %s: %s", safe_text(subject, 120), read.detail)
            await self._record_once(read, message_id, stand_in_id(read))
            return
        c = read.candidate
        own = intent_id_for(read.tenant, c.run_id, c.call_id)
        first = await self._record_once(read, message_id, own)
        if first is not None and not same_call(first, c, read):
            reuse = reused_call_id_intent(read.tenant, c.run_id, c.call_id, read.candidate_digest)
            await self._record_once(read, message_id, reuse, reusing=first)

    async def _remember(self, intent: EffectIntent) -> None:
        """What later turns and calls of the run are built on, written before the model
        hears of it: a refused call is the one the next call of its tool in the turn
        corrects; an executed capability may unlock others (``Offer.after``)."""
        if not is_capability_name(intent.tool):
            return
        try:
            refused = intent.state in (State.REJECTED, State.DENIED)
            if refused and not (intent.reason or "").startswith(NOT_CORRECTED):
                await self.ports.runs.mark_refused(intent.tenant, intent.run_id, intent.turn_id,
                                                   intent.tool, intent.intent_id)
            elif intent.state is State.COMPLETED:
                await self.catalogues.mark_done(intent.tenant, intent.run_id, intent.tool)
        except ValueError:  # ``InvalidKey`` included
            return  # ids that make no key (a stand-in's): nothing to remember

    async def abandon(self, subject: str, data: bytes, message_id: str, why: Abandonment) -> None:
        """Record ``candidate.unprocessable`` for a candidate intake kept failing on.

        Recorded where the candidate would have been (its call id's intent, or the
        reused call's, or the stand-in's), unless a decision is there already; the cause
        is kept for operators, the model is told ``proposal.invalid``.
        """
        read = read_candidate(subject, data, message_id)
        target = stand_in_id(read)
        if read.problem is None:
            c = read.candidate
            target = intent_id_for(read.tenant, c.run_id, c.call_id)
            first = await self.ports.intents.load(read.tenant, target)
            if first is not None:
                if same_call(first, c, read):
                    return  # it was recorded after all
                target = reused_call_id_intent(read.tenant, c.run_id, c.call_id, read.candidate_digest)
        verdict = Verdict("candidate.unprocessable", detail=f"{why.durable}: {why.cause}")

        async def step(intent: EffectIntent | None) -> list[Event]:
            if intent is not None:
                return []
            run = None
            with contextlib.suppress(Exception):  # the run may be what keeps failing
                run = await self.ports.runs.get(read.tenant, read.candidate.run_id)
            inputs = Inputs(
                tenant=read.tenant, candidate=read.candidate, raw_size_bytes=read.size_bytes,
                run=run, catalogue_digest=None, catalogue=None, contract=None,
                max_candidate_bytes=self.settings.max_candidate_bytes, message_id=message_id,
                candidate_digest=read.candidate_digest, intent_id=target,
            )
            return [decide_candidate(inputs, self.clock(), verdict=verdict)]

        await self.ports.intents.decide(read.tenant, target, step)
        if read.problem is None and target == intent_id_for(read.tenant, read.candidate.run_id,
                                                              read.candidate.call_id):
            # A failing attempt may have taken holds before it failed; best effort, the
            # holds' own expiry covers a bundle that changed meanwhile.
            with contextlib.suppress(Exception):
                run = await self.ports.runs.get(read.tenant, read.candidate.run_id)
                if run is not None:
                    keys = self.limits.keys(self._limits(), tenant=read.tenant, actor=run.actor,
                                            run_id=run.run_id)
                    await self.limits.release(keys, target)

    async def _record_once(
        self, read: Read, message_id: str, intent_id: str, *, reusing: EffectIntent | None = None,
    ) -> EffectIntent | None:
        """Record the decision on ``intent_id`` unless it has one; return what was there.

        A candidate that would be received passes the bundle's flood limits first (before
        normalization and policy, the steps that call adapters); the in-flight holds it
        takes are recorded on its ``CandidateReceived``, so they are released from the
        record when it ends, whatever the bundle says by then.
        """
        # Places admitted by a run of the step stay taken when a conflict runs it again.
        taken: tuple[str, ...] = ()

        async def step(intent: EffectIntent | None) -> tuple[list[Event], tuple[str, ...]]:
            """The decision, and the places admitted so far."""
            nonlocal taken
            if intent is not None:
                return [], taken  # the same call id again: one intent, already recorded
            if reusing is not None:
                inputs = await self._inputs(read, message_id, intent_id, lookup=False)
                return [reused(inputs, reusing, self.clock())], taken
            limits = self._limits()
            run = await self.ports.runs.get(read.tenant, read.candidate.run_id) if read.problem is None else None
            if run is not None and limits:
                # Over a rate already (by what this process last saw): refused before the
                # turn is read or the arguments parsed; a flood costs no more than this.
                over = self.limits.over_rate(limits, tenant=read.tenant, actor=run.actor,
                                             run_id=run.run_id, intent_id=intent_id)
                if over is not None:
                    inputs = await self._inputs(read, message_id, intent_id, lookup=False)
                    early = Limited(over.reason, over.detail, over.retry_after_s)
                    return [decide_candidate(inputs, self.clock(), limited=early)], taken
            inputs = await self._inputs(read, message_id, intent_id, lookup=True)
            verdict = assess(inputs)
            admission = Admission()
            if verdict.reason is None and inputs.run is not None and limits:
                admission = await self.limits.admit(
                    limits, tenant=read.tenant, actor=inputs.run.actor, run_id=inputs.run.run_id,
                    intent_id=intent_id)
                taken = admission.holds
            refused = admission.refused
            limited = Limited(refused.reason, refused.detail, refused.retry_after_s) if refused else None
            return [decide_candidate(inputs, self.clock(), verdict=verdict, holds=admission.holds,
                                     limited=limited)], taken

        # Nearly every candidate is a new call: its first event is appended without a load.
        decided = await self.ports.intents.decide_with(read.tenant, intent_id, step, assume_new=True)
        found = decided.before if not decided.events else None
        if decided.result and not decided.events:
            # Another writer recorded this intent first (a replica, a redelivery): keep
            # only the holds its record names.
            kept = set(found.intake_holds) if found is not None else set()
            await self.limits.release([k for k in decided.result if k not in kept], intent_id)
        return found

    def _limits(self) -> tuple[Limit, ...]:
        return self.bundles.current().config.limits if self.bundles is not None else ()

    async def _inputs(self, read: Read, message_id: str, intent_id: str, *, lookup: bool) -> Inputs:
        """What the decision needs: the run, and (when ``lookup``) the turn's catalogue and contract."""
        c = read.candidate
        run = await self.ports.runs.get(read.tenant, c.run_id) if read.problem is None else None
        digest_, catalogue, contract = None, None, None
        known_tool, follows = False, Link()
        ended = await self.leases.ended(run) if run is not None and lookup else None
        if run is not None and lookup:
            (digest_, catalogue), follows = await asyncio.gather(
                self.catalogues.of_turn(read.tenant, c.run_id, c.turn_id), self._link(read, intent_id))
            if catalogue is not None and c.tool in catalogue.revisions:
                # Only a name the turn offered is looked up: it is a valid key by construction.
                contract = await self.ports.registry.get(c.tool)
            elif catalogue is not None and c.assembly_failure is None and is_capability_name(c.tool):
                known_tool = c.tool in catalogue.withheld or await self.ports.registry.get(c.tool) is not None
        return Inputs(
            tenant=read.tenant,
            candidate=c,
            raw_size_bytes=read.size_bytes,
            run=run,
            catalogue_digest=digest_,
            catalogue=catalogue,
            contract=contract,
            max_candidate_bytes=self.settings.max_candidate_bytes,
            message_id=message_id,
            candidate_digest=read.candidate_digest,
            intent_id=intent_id,
            problem=read.problem,
            detail=read.detail,
            known_tool=known_tool,
            follows=follows.intent_id,
            follows_how=follows.how,
            run_ended=ended,
            unknown_predecessor=follows.unknown,
        )

    async def _link(self, read: Read, intent_id: str) -> Link:
        """The candidate this one follows: the one the runtime names, or else the latest
        refused call of the same tool in the same turn (a correction)."""
        c = read.candidate
        if c.follows is not None:
            if not is_subject_token(c.follows) or c.follows == c.call_id:
                return Link(unknown=True)
            target = intent_id_for(read.tenant, c.run_id, c.follows)
            known = await self.ports.intents.load(read.tenant, target)
            return Link(target, "declared") if known is not None else Link(unknown=True)
        if not is_capability_name(c.tool) or c.assembly_failure is not None:
            return Link()
        # Read for every candidate, though it usually finds nothing: the mark is written by
        # whichever replica answered the refusal, and nothing this process writes anyway
        # would tell it one was written since, so a miss cannot be kept. (A replica behind
        # the leader may miss a mark a moment old: a lineage link lost, no effect allowed.)
        try:
            earlier = await self.ports.runs.refused(read.tenant, c.run_id, c.turn_id, c.tool) or ""
        except ValueError:  # ids that make no key (``InvalidKey``), a mark that does not decode
            return Link()
        return Link(earlier, "automatic") if earlier and earlier != intent_id else Link()

    async def respond(self, recorded: RecordedEvent) -> None:
        """Publish what the model should learn now that ``recorded`` happened.

        Every event that ends an intent (or leaves it to an operator) is one the model
        learns of, so this is also where the intent's in-flight holds are given back:
        from the record, by the process that took them (its own writes are the ones it
        knows the revision of, so a release is one compare-and-set per limit).
        """
        event = decode_event(recorded)
        if isinstance(event, PolicyDecided) and event.outcome not in (
            DecisionOutcome.DENY, DecisionOutcome.PAUSE
        ):
            return  # the next step (review or execution) is what the model learns of
        # An intent's first event is its whole history (intake's refusals: most of a flood).
        intent = await self.ports.intents.load(recorded.tenant, recorded.intent_id, trigger=recorded)
        if intent is None:
            return
        if intent.intake_holds and (intent.state.terminal or intent.state is State.NEEDS_OPERATOR):
            await self.limits.release(intent.intake_holds, intent.intent_id)
        contract = await self.ports.registry.get(intent.tool) if intent.tool else None
        view = model_view(intent, contract)
        if view is None:
            return
        await self._remember(intent)
        await self._store_response(intent, msgspec.json.encode(view), f"response-{recorded.event_id}")
        metrics.answered(view.status, intent.reason)

    async def _store_response(self, intent: EffectIntent, data: bytes, msg_id: str) -> None:
        """Store the response computed from ``intent`` unless a later one is stored already."""
        await self.ports.responses.store(intent, data, msg_id)
