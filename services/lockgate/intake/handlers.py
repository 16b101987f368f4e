"""Intake's handlers: load what the candidate refers to, decide, append, answer."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from dataclasses import dataclass

import msgspec
from nats.errors import Error as NatsError
from nats.js.errors import (
    APIError,
    InvalidKeyError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
    NotFoundError,
)

from lockgate.authz.config import Limit
from lockgate.authz.ledger import Admission, BudgetLedger, LimitLedger
from lockgate.authz.source import BundleSource
from lockgate.contracts.buckets import confirmed_get
from lockgate.contracts.capability import CapabilityContract
from lockgate.contracts.disclosure import model_view
from lockgate.contracts.messages import (
    Catalogue,
    CloseRun,
    OpenRun,
    OpenTurn,
    Refusal,
    RunClosed,
    RunContext,
    RunOpened,
    Tool,
    TurnOpened,
)
from lockgate.contracts.offer import Circumstances, alive, withheld_because
from lockgate.contracts.subjects import (
    NotACommandSubject,
    done_key,
    is_client_token,
    parse_lease,
    refused_key,
    response_subject,
    run_key,
    turn_key,
)
from lockgate.contracts.vocabulary import DecisionOutcome
from lockgate.core.bounded import KeyedLocks, keep
from lockgate.core.canonical import digest
from lockgate.core.errors import TransientError
from lockgate.core.ids import (
    intent_id_for,
    is_capability_name,
    is_subject_token,
    random_id,
    reused_call_id_intent,
)
from lockgate.core.text import safe_text
from lockgate.eventstore.base import RecordedEvent
from lockgate.eventstore.jetstream import CONFLICT_CODES
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
from lockgate.intake.leases import Leases
from lockgate.intent.aggregate import EffectIntent, Event, State
from lockgate.intent.codec import decode_event
from lockgate.runtime import metrics
from lockgate.runtime.context import Ports
from lockgate.runtime.service import Abandonment, Clock, decide_and_append, load_intent
from lockgate.runtime.settings import Settings
from lockgate.runtime.streams import CATALOGUES_BUCKET, RESPONSES, RUNS_BUCKET

log = logging.getLogger("lockgate.intake")


#: Catalogues kept in memory per process (content-addressed: an entry never changes).
_CATALOGUES_CACHED = 1024
#: The shortest and longest lease a run may have (a second; thirty days).
MIN_LEASE_S = 1.0
MAX_LEASE_S = 30 * 24 * 3600.0
#: Most capabilities a run may name as the ones its agent uses.
MAX_RUN_CAPABILITIES = 256
#: Turns whose catalogue key intake keeps in memory.
_TURNS_CACHED = 65_536


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


#: Done marks an intake process remembers having seen written, at most this many.
_DONE_KEPT = 65_536
#: Response subjects an intake process remembers the last stored response of.
_ANSWERED_KEPT = 65_536
#: Tries to store a response while other responses of its candidate are being stored.
RESPONSE_TRIES = 10
#: The header naming the intent version a stored response was computed from.
RESPONSE_VERSION = "Lockgate-Intent-Version"


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
        self.limits = LimitLedger(ports.budgets, js=ports.js)
        self.budgets = BudgetLedger(ports.budgets, ports.js)
        self.leases = Leases(ports.nc, ports.js, ports.runs)
        self._catalogues: OrderedDict[str, Catalogue] = OrderedDict()
        #: Turn entry → its catalogue's key, for turns this process opened or read.
        self._turns: OrderedDict[str, str] = OrderedDict()
        #: Done marks this process wrote or found written (a mark is never deleted).
        self._marked: OrderedDict[str, None] = OrderedDict()
        #: Response subject → the sequence and intent version of the response this process
        #: last stored or read there (``_store_response``).
        self._answered: OrderedDict[str, tuple[int, int]] = OrderedDict()
        #: One response of an intent at a time in this process.
        self._answering = KeyedLocks(_ANSWERED_KEPT)

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
        await self.ports.runs.put(run_key(tenant, run_id), msgspec.json.encode(run))
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
        run = await self.ports.run(tenant, req.run_id)
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
        run = await self.ports.run(tenant, run_id)
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
        catalogue = await self._catalogue(run)
        catalogue_digest = digest(msgspec.to_builtins(catalogue))
        key = catalogue_digest.removeprefix("sha256:")
        await self.ports.catalogues.put(key, msgspec.json.encode(catalogue))
        entry = turn_key(tenant, run_id, turn_id)
        try:
            await self.ports.runs.create(entry, key.encode())
        except KeyWrongLastSequenceError:
            # Opened before (a retry whose answer was lost, a replica): a turn is one
            # snapshot, so the answer is the catalogue it was opened with.
            known, opened = await self._turn_catalogue(tenant, run_id, turn_id)
            if known is None or opened is None:
                return msgspec.json.encode(
                    Refusal("service.unavailable", "the turn could not be read; ask again"))
            return msgspec.json.encode(TurnOpened(turn_id=turn_id, catalogue_digest=known,
                                                  tools=opened.tools))
        self._keep_turn(entry, key, catalogue)
        return msgspec.json.encode(
            TurnOpened(turn_id=turn_id, catalogue_digest=catalogue_digest, tools=catalogue.tools)
        )

    def _keep_turn(self, entry: str, key: str, catalogue: Catalogue) -> None:
        """Remember a turn's catalogue: a turn never changes once opened."""
        keep(self._turns, entry, key, _TURNS_CACHED)
        keep(self._catalogues, key, catalogue, _CATALOGUES_CACHED)

    async def _catalogue(self, run: RunContext) -> Catalogue:
        """What this run's actor is offered now: every registered capability whose
        adapter's heartbeat is recent and whose rules (``lockgate.contracts.offer``) the
        run meets; the others are listed as withheld, with why."""
        names = await self.ports.registry.names()
        registrations = [r for r in await asyncio.gather(
            *(self.ports.registry.registration(n) for n in names)) if r is not None]
        now = self.clock()
        contracts = [r.contract for r in registrations]
        needed = sorted({name for c in contracts for name in c.offer.after})
        done_flags = await asyncio.gather(*(self._done(run, name) for name in needed))
        done = frozenset(name for name, flag in zip(needed, done_flags, strict=True) if flag)
        budgets = self.bundles.current().config.budgets if self.bundles is not None else ()
        left = await asyncio.gather(*(
            self.budgets.remaining_for(budgets, tenant=run.tenant, actor=run.actor,
                                       run_id=run.run_id, capability=c.name, now=now)
            for c in contracts))
        offered: list[CapabilityContract] = []
        withheld: dict[str, str] = {}
        for r, budget_left in zip(registrations, left, strict=True):
            c = r.contract
            why = withheld_because(c.offer, data_classes=c.data_classes, cost=c.budget_cost, name=c.name,
                                   now=Circumstances(
                stage=run.stage, roles=run.roles, data_classes=run.data_classes, done=done,
                budget_left=budget_left, alive=alive(r.alive_at, now), capabilities=run.capabilities))
            if why is None:
                offered.append(c)
            else:
                withheld[c.name] = why
        return Catalogue(
            tools=tuple(Tool(c.name, c.description, c.argument_schema) for c in offered),
            revisions={c.name: c.revision for c in offered},
            schema_revisions={c.name: c.schema_revision for c in offered},
            effects={c.name: c.effect_class.value for c in offered},
            withheld=withheld,
        )

    async def _done(self, run: RunContext, capability: str) -> bool:
        """True when ``capability`` executed in the run (intake marks it when it answers)."""
        try:
            key = done_key(run.tenant, run.run_id, capability)
            if key in self._marked:
                return True
            found = await confirmed_get(self.ports.js, self.ports.runs, RUNS_BUCKET, key) is not None
        except (InvalidKeyError, ValueError):
            return False
        if found:
            keep(self._marked, key, None, _DONE_KEPT)
        return found

    async def _turn_catalogue(self, tenant: str, run_id: str, turn_id: str) -> tuple[str | None, Catalogue | None]:
        """The digest and content of the catalogue offered in a turn.

        A turn's entry is written once (opening it again answers with the same
        snapshot), and the catalogue is content-addressed: both are kept in memory
        once read, so a candidate of a known turn costs no read.
        """
        entry = turn_key(tenant, run_id, turn_id)
        try:
            key = self._turns.get(entry)
            catalogue = self._catalogues.get(key) if key is not None else None
            if key is None or catalogue is None:
                # A turn opened a moment ago may not be on every replica yet.
                found = await confirmed_get(self.ports.js, self.ports.runs, RUNS_BUCKET, entry)
                if found is None:
                    return None, None
                key = found.decode()
                catalogue = self._catalogues.get(key)
                if catalogue is None:
                    stored = await confirmed_get(self.ports.js, self.ports.catalogues,
                                                 CATALOGUES_BUCKET, key)
                    if stored is None:
                        return None, None
                    catalogue = msgspec.json.decode(stored, type=Catalogue)
                self._keep_turn(entry, key, catalogue)
        except (InvalidKeyError, UnicodeDecodeError, msgspec.MsgspecError):
            return None, None
        return "sha256:" + key, catalogue

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
                await self.ports.runs.put(
                    refused_key(intent.tenant, intent.run_id, intent.turn_id, intent.tool),
                    intent.intent_id.encode())
            elif intent.state is State.COMPLETED:
                key = done_key(intent.tenant, intent.run_id, intent.tool)
                if key in self._marked:
                    return  # written already: a run's later calls of a tool cost nothing
                # A create (revision 0) that another replica's mark refuses in the same
                # round trip: marks are never deleted, so there is no marker for
                # ``KeyValue.create`` to look for with a get after the refusal.
                with contextlib.suppress(KeyWrongLastSequenceError):
                    await self.ports.runs.update(key, b"1", last=0)
                keep(self._marked, key, None, _DONE_KEPT)
        except (InvalidKeyError, ValueError):
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
            first = await load_intent(self.ports.store, read.tenant, target)
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
                run = await self.ports.run(read.tenant, read.candidate.run_id)
            inputs = Inputs(
                tenant=read.tenant, candidate=read.candidate, raw_size_bytes=read.size_bytes,
                run=run, catalogue_digest=None, catalogue=None, contract=None,
                max_candidate_bytes=self.settings.max_candidate_bytes, message_id=message_id,
                candidate_digest=read.candidate_digest, intent_id=target,
            )
            return [decide_candidate(inputs, self.clock(), verdict=verdict)]

        await decide_and_append(self.ports.store, read.tenant, target, step, cache=self.ports.cache)
        if read.problem is None and target == intent_id_for(read.tenant, read.candidate.run_id,
                                                              read.candidate.call_id):
            # A failing attempt may have taken holds before it failed; best effort, the
            # holds' own expiry covers a bundle that changed meanwhile.
            with contextlib.suppress(Exception):
                run = await self.ports.run(read.tenant, read.candidate.run_id)
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
        found: list[EffectIntent] = []
        taken: list[str] = []

        async def step(intent: EffectIntent | None) -> list[Event]:
            if intent is not None:
                found[:] = [intent]
                return []  # the same call id again: one intent, already recorded
            if reusing is not None:
                inputs = await self._inputs(read, message_id, intent_id, lookup=False)
                return [reused(inputs, reusing, self.clock())]
            limits = self._limits()
            run = await self.ports.run(read.tenant, read.candidate.run_id) if read.problem is None else None
            if run is not None and limits:
                # Over a rate already (by what this process last saw): refused before the
                # turn is read or the arguments parsed; a flood costs no more than this.
                over = self.limits.over_rate(limits, tenant=read.tenant, actor=run.actor,
                                             run_id=run.run_id, intent_id=intent_id)
                if over is not None:
                    inputs = await self._inputs(read, message_id, intent_id, lookup=False)
                    early = Limited(over.reason, over.detail, over.retry_after_s)
                    return [decide_candidate(inputs, self.clock(), limited=early)]
            inputs = await self._inputs(read, message_id, intent_id, lookup=True)
            verdict = assess(inputs)
            admission = Admission()
            if verdict.reason is None and inputs.run is not None and limits:
                admission = await self.limits.admit(
                    limits, tenant=read.tenant, actor=inputs.run.actor, run_id=inputs.run.run_id,
                    intent_id=intent_id)
                taken[:] = admission.holds
            refused = admission.refused
            limited = Limited(refused.reason, refused.detail, refused.retry_after_s) if refused else None
            return [decide_candidate(inputs, self.clock(), verdict=verdict, holds=admission.holds,
                                     limited=limited)]

        # Nearly every candidate is a new call: its first event is appended without a load.
        recorded = await decide_and_append(self.ports.store, read.tenant, intent_id, step,
                                           assume_new=True, cache=self.ports.cache)
        if taken and not recorded:
            # Another writer recorded this intent first (a replica, a redelivery): keep
            # only the holds its record names.
            kept = set(found[0].intake_holds) if found else set()
            await self.limits.release([k for k in taken if k not in kept], intent_id)
        return found[0] if found else None

    def _limits(self) -> tuple[Limit, ...]:
        return self.bundles.current().config.limits if self.bundles is not None else ()

    async def _inputs(self, read: Read, message_id: str, intent_id: str, *, lookup: bool) -> Inputs:
        """What the decision needs: the run, and (when ``lookup``) the turn's catalogue and contract."""
        c = read.candidate
        run = await self.ports.run(read.tenant, c.run_id) if read.problem is None else None
        digest_, catalogue, contract = None, None, None
        known_tool, follows = False, Link()
        ended = await self.leases.ended(run) if run is not None and lookup else None
        if run is not None and lookup:
            (digest_, catalogue), follows = await asyncio.gather(
                self._turn_catalogue(read.tenant, c.run_id, c.turn_id), self._link(read, intent_id))
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
            known = await load_intent(self.ports.store, read.tenant, target, cache=self.ports.cache)
            return Link(target, "declared") if known is not None else Link(unknown=True)
        if not is_capability_name(c.tool) or c.assembly_failure is not None:
            return Link()
        # Read for every candidate, though it usually finds nothing: the mark is written by
        # whichever replica answered the refusal, and nothing this process writes anyway
        # would tell it one was written since, so a miss cannot be kept. (A replica behind
        # the leader may miss a mark a moment old: a lineage link lost, no effect allowed.)
        try:
            entry = await self.ports.runs.get(refused_key(read.tenant, c.run_id, c.turn_id, c.tool))
            earlier = (entry.value or b"").decode()
        except (KeyNotFoundError, InvalidKeyError, UnicodeDecodeError, ValueError):
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
        if isinstance(event, EffectIntent.PolicyDecided) and event.outcome not in (
            DecisionOutcome.DENY, DecisionOutcome.PAUSE
        ):
            return  # the next step (review or execution) is what the model learns of
        # An intent's first event is its whole history (intake's refusals: most of a flood).
        intent = await load_intent(self.ports.store, recorded.tenant, recorded.intent_id,
                                   trigger=recorded, cache=self.ports.cache)
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
        """Store the response computed from ``intent`` unless a later one is stored already.

        The model reads a candidate's last stored response as its answer, and responses to
        consecutive events of one intent are computed concurrently (by the workers of a
        process and by its replicas): one computed from an earlier version could be stored
        after a later one and stand as the answer. So each names its version, and is
        stored only after the response it follows (``Nats-Expected-Last-Subject-Sequence``);
        when another was stored in between, the newer of the two stands.
        """
        subject = response_subject(intent.tenant, intent.run_id, intent.intent_id)
        async with self._answering(intent.intent_id):
            last = self._answered.get(subject)
            for attempt in range(RESPONSE_TRIES):
                if last is not None and last[1] >= intent.version:
                    return  # a response from this version or a later one stands
                try:
                    ack = await self.ports.js.publish(subject, data, headers={
                        "Nats-Msg-Id": msg_id, RESPONSE_VERSION: str(intent.version),
                        "Nats-Expected-Last-Subject-Sequence": str(last[0] if last else 0)})
                except APIError as exc:
                    if exc.err_code not in CONFLICT_CODES:
                        raise
                    if attempt:
                        await asyncio.sleep(0.01 * attempt)  # a replica may not show it yet
                    last = await self._last_response(subject)
                    continue
                keep(self._answered, subject, (int(ack.seq), intent.version), _ANSWERED_KEPT)
                return
        raise TransientError(f"responses to {intent.intent_id} kept changing",
                             code="response.contention")

    async def _last_response(self, subject: str) -> tuple[int, int] | None:
        """The stored response on ``subject``: its sequence, and the version it was computed from."""
        try:
            msg = await self.ports.js.get_last_msg(RESPONSES, subject, direct=True)
        except NotFoundError:
            return None
        return int(msg.seq or 0), int((msg.headers or {}).get(RESPONSE_VERSION, "0") or 0)
