"""A replay's fixture world: the services' own handlers on a private broker, driven in order.

Recorded candidates cross the same intake, normalization, policy, approval and
executor code the live services run (their ``handlers`` classes, over real JetStream
streams and buckets), under new run identities, in a world of their own:

- **A private broker.** A ``nats-server`` started for this replay on loopback, with a
  temporary store, no route to any other server and no user that exists anywhere
  else. Everything the handlers append, read and publish stays there and is deleted
  with it. The deployment is read before (the record, and by the ``replay`` role the
  context of each run and the contracts) and never written.
- **Fixture adapters.** The capabilities are registered by a fixture adapter that
  answers ``lg.adapter.<capability>.{describe,normalize,facts,query}`` and executes
  orders from ``lockgate.replay.fixtures``; a question it cannot answer stops the
  intent with ``replay.fixture-missing``, never reaches a real adapter.
- **Driven, not consumed.** Instead of durable consumers, each stored event is handed
  to the reactions ``lockgate.runtime.specs`` says consume it, one after another, in
  store order, until the intent has nothing more to do. Reactions that only wait for
  time to pass (a pause's recheck, a review's expiry, an attempt's deadline) are not
  run: a replay is a snapshot, and its clock does not move while it waits.
- **Deterministic.** The clock is the recorded time of each candidate, run and turn ids
  are derived from the replay's identity and the recorded ones, and every other id the
  handlers make is derived from what caused it; the same replay twice appends the same
  events with the same ids, decisions and digests.

Historical approvals are evidence, not authority: the fixture world has no reviewer. A
replayed candidate that policy sends to review waits there (``awaiting_approval``),
and the replay shows what the recorded reviewer decided beside it; nothing executes on
the strength of a recorded approval.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType

import msgspec
import nats
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from lockgate.approval.handlers import ApprovalHandlers
from lockgate.authz.source import BundleSource
from lockgate.contracts import subjects
from lockgate.contracts.capability import CapabilityContract
from lockgate.contracts.messages import (
    Candidate as CandidateMessage,
)
from lockgate.contracts.messages import (
    Claim,
    Describe,
    FactsRequest,
    NormalizeRequest,
    OpenRun,
    OpenTurn,
    QueryRequest,
    Refusal,
    RunContext,
)
from lockgate.contracts.vocabulary import ReportStage
from lockgate.core.canonical import digest_bytes
from lockgate.core.errors import LockgateError
from lockgate.core.ids import derived_id, intent_id_for, reused_call_id_intent
from lockgate.eventstore.base import RecordedEvent
from lockgate.executor.domain import order_for
from lockgate.executor.handlers import AttemptDue, ExecutorHandlers
from lockgate.intake.domain import read_candidate
from lockgate.intake.handlers import IntakeHandlers
from lockgate.intent.aggregate import EffectIntent, Event
from lockgate.intent.codec import decode_event, encode_event, fold
from lockgate.intent.events import CandidateReceived, CandidateRejected, ExecutionAuthorized
from lockgate.normalization.handlers import GIVE_UP_AFTER, NormalizationHandlers
from lockgate.operations.natsserver import NatsServer
from lockgate.policy.handlers import PAUSE_AFTER, PolicyHandlers
from lockgate.reconciler.handlers import ReconcilerHandlers
from lockgate.replay.fixtures import FIXTURE_ADAPTER, FIXTURE_MISSING, Fixtures
from lockgate.replay.record import Candidate, Deployment
from lockgate.runtime import specs
from lockgate.runtime.context import Ports, ports_for
from lockgate.runtime.ports.adapters import AdapterRefused, AdapterUnavailable
from lockgate.runtime.ports.capabilities import CapabilityRegistry
from lockgate.runtime.ports.intents import abandonment, decide_and_append, load_intent
from lockgate.runtime.service import Retry
from lockgate.runtime.settings import Settings
from lockgate.runtime.settlement import Abandonment
from lockgate.runtime.topology import CAPABILITIES_BUCKET

#: Events one replayed intent may append before the driver stops it (a loop is a bug).
MAX_EVENTS = 64

#: Reactions a replay does not run, and why.
NOT_RUN: dict[tuple[str, str], str] = {
    ("policy", "paused"): "asks again for missing evidence later: a replay's clock does not move",
    ("approval", "review_opened"): "expires a review at its deadline: a replay's clock does not move",
}


@dataclass(frozen=True)
class Replayed:
    """One recorded candidate and what became of it in the fixture world."""

    source: Candidate
    run_id: str
    intent_id: str
    events: tuple[Event, ...]
    #: Why the driver stopped before the intent had nothing more to do ("" if it had not).
    stopped: str = ""

    def final(self) -> EffectIntent | None:
        """The replayed intent as it stands."""
        return fold(self.events)


Reaction = Callable[[RecordedEvent], Awaitable[None]]


@dataclass(frozen=True)
class _Services:
    """The handlers the world drives: intake's requests, the executor's reports, every reaction."""

    #: The ports they were built with, on the private broker.
    ports: Ports
    intake: IntakeHandlers
    executor: ExecutorHandlers
    #: The executor's report-token key (the fixture adapter echoes each order's token).
    report_key: bytes
    #: (service, reaction) of the specs → the handler's method.
    reactions: dict[tuple[str, str], Reaction]


def replay_identity(candidates: Sequence[Candidate], bundle_revision: str, fixtures: Fixtures) -> str:
    """A replay's identity: what it replays, under which bundle, with which answers."""
    return derived_id("replay", json.dumps([c.intent_id for c in candidates]), bundle_revision,
                      fixtures.digest)


@dataclass
class FixtureWorld:
    """The handlers of every service on a private broker, with fixture adapters."""

    fixtures: Fixtures
    deployment: Deployment
    bundle_dir: Path
    replay_id: str = ""
    root: Path | None = None
    _server: NatsServer | None = None
    _nc: Client | None = None
    _subs: list[Subscription] = field(default_factory=list)
    _now: datetime = field(default_factory=lambda: datetime.fromtimestamp(0, UTC))
    _contracts: dict[str, CapabilityContract] = field(default_factory=dict)
    _runs: dict[tuple[str, str], str] = field(default_factory=dict)
    _turns: set[tuple[str, str, str]] = field(default_factory=set)
    _services: _Services | None = None
    #: Recorded intent id → its call id (what a declared ``follows`` names).
    _calls: dict[str, str] = field(default_factory=dict)
    _own_root: bool = False

    # -- lifecycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> FixtureWorld:
        try:
            await self.start()
        except BaseException:
            await self.close()  # a broker half started is stopped, its store deleted
            raise
        return self

    async def __aexit__(self, *exc: object | type[BaseException] | TracebackType | None) -> None:
        await self.close()

    async def start(self) -> None:
        """Start the private broker, make the topology, build the handlers."""
        if self.root is None:
            self.root = Path(tempfile.mkdtemp(prefix="lockgate-replay-"))
            self._own_root = True
        self._server = NatsServer(store_dir=self.root / "nats", log_file=self.root / "nats.log").start()
        self._nc = await nats.connect(self._server.url, max_reconnect_attempts=0)
        settings = Settings(nats_url=self._server.url, var_dir=self.root, policy_dir=self.bundle_dir,
                            manage_topology=True, credentials_file=None, adapter_timeout_s=2.0)
        ports = await ports_for(self._nc, settings)
        # Registrations are read fresh: each candidate's clock renews them (a cached one
        # would be a heartbeat from another candidate's time).
        ports.registry = CapabilityRegistry(await ports.js.key_value(CAPABILITIES_BUCKET), ttl_s=0.0)
        bundles = BundleSource(self.bundle_dir)
        clock = self.clock
        key = hashlib.sha256(f"replay-report-key:{self.replay_id}".encode()).digest()
        intake = IntakeHandlers(ports, settings, clock, None)  # no flood limits: a replay is no flood
        normalization = NormalizationHandlers(ports, clock)
        policy = PolicyHandlers(ports, bundles, clock)
        approval = ApprovalHandlers(ports, clock, review_ttl_s=settings.review_ttl_s, bundles=bundles)
        executor = ExecutorHandlers(ports, bundles, clock, report_key=key)
        reconciler = ReconcilerHandlers(ports, clock)
        reactions: dict[tuple[str, str], Reaction] = {
            ("intake", "respond"): intake.respond,
            ("normalization", "received"): lambda r: normalization.received(r, GIVE_UP_AFTER),
            ("policy", "normalized"): lambda r: policy.normalized(r, PAUSE_AFTER),
            ("policy", "settled"): policy.settled,
            ("approval", "decided"): approval.decided,
            ("executor", "ready"): executor.ready,
            ("executor", "settled"): executor.settled,
            ("reconciler", "unknown"): lambda r: reconciler.unknown(r, 1),
        }
        self._services = _Services(ports, intake, executor, key, reactions)

    async def close(self) -> None:
        """Stop the broker and delete the world."""
        for sub in self._subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        if self._nc is not None:
            with contextlib.suppress(Exception):
                await self._nc.close()
        if self._server is not None:
            self._server.stop()
        if self._own_root and self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)

    def clock(self) -> datetime:
        """The fixture world's time: the recorded time of the candidate being replayed."""
        return self._now

    @property
    def services(self) -> _Services:
        """The handlers on the private broker.

        Raises:
            RuntimeError: the world was not started.
        """
        if self._services is None:
            raise RuntimeError("fixture world not started")
        return self._services

    @property
    def ports(self) -> Ports:
        """The handlers' ports on the private broker.

        Raises:
            RuntimeError: the world was not started.
        """
        return self.services.ports

    # -- the fixture adapter ------------------------------------------------------------------

    async def _register(self, contract: CapabilityContract) -> None:
        """Register (or renew, at the world's time) a capability the fixture adapter serves."""
        if self._nc is not None and contract.name not in self._contracts:
            for verb in subjects.ADAPTER_VERBS:
                self._subs.append(await self._nc.subscribe(
                    subjects.adapter(contract.name, verb), cb=self._answering(contract.name, verb)))
        self._contracts[contract.name] = contract
        kv = await self.ports.js.key_value(CAPABILITIES_BUCKET)
        await kv.put(subjects.capability_key(contract.name), msgspec.json.encode(
            Describe(contract=contract, adapter=FIXTURE_ADAPTER, alive_at=self._now)))

    def _answering(self, capability: str, verb: str) -> Callable[[Msg], Awaitable[None]]:
        async def answer(msg: Msg) -> None:
            await msg.respond(msgspec.json.encode(await self._answer(capability, verb, msg.data)))

        return answer

    async def _answer(self, capability: str, verb: str, data: bytes) -> object:
        """The fixture adapter's answer to ``verb`` about ``capability``."""
        contract = self._contracts[capability]
        body: object
        try:
            if verb == "describe":
                body = Describe(contract=contract, adapter=FIXTURE_ADAPTER, alive_at=self._now)
            elif verb == "normalize":
                body = self.fixtures.answer_normalize(
                    capability, msgspec.json.decode(data, type=NormalizeRequest))
            elif verb == "facts":
                found = self.fixtures.answer_facts(capability, msgspec.json.decode(data, type=FactsRequest))
                body = found if found is not None else Refusal(FIXTURE_MISSING, "no facts for this resource")
            elif verb == "query":
                request = msgspec.json.decode(data, type=QueryRequest)
                intent = await load_intent(self.ports.store, request.tenant, request.intent_id)
                known = self.fixtures.answer_query(capability, request, (intent.digest or "") if intent else "")
                body = known if known is not None else Refusal(FIXTURE_MISSING, "no recorded effect to query")
            else:
                body = Refusal("adapter.unknown-verb", verb[:64])
        except msgspec.MsgspecError as exc:
            body = Refusal("adapter.malformed-request", str(exc)[:200])
        return body

    async def _execute(self, recorded: RecordedEvent, event: ExecutionAuthorized) -> None:
        """Hand the order of an authorized attempt to the fixture adapter; record its reports."""
        intent = await load_intent(self.ports.store, recorded.tenant, recorded.intent_id, trigger=recorded)
        order = order_for(intent, event, key=self.services.report_key) if intent is not None else None
        if order is None:
            return
        for n, report in enumerate(self.fixtures.execute(order, self._now), start=1):
            if report.stage is ReportStage.SENT:
                # Crossing is a claim the executor decides on the record, as a worker asks it.
                await self.services.executor.claim(subjects.claim(order.capability), msgspec.json.encode(
                    Claim(order=order, claimant=f"{FIXTURE_ADAPTER}:{order.attempt_id}")))
                continue
            await self.services.executor.report(msgspec.json.encode(report),
                                        subjects.report(order.capability, order.intent_id), n)

    # -- replaying ---------------------------------------------------------------------------

    async def replay(self, candidates: Sequence[Candidate]) -> list[Replayed]:
        """Replay ``candidates`` in order; each one's intent until it has nothing more to do."""
        for name in sorted({c.first.tool for c in candidates if c.first is not None}):
            contract = await self.deployment.contract(name)
            if contract is not None:
                await self._register(contract)
        return [await self._one(c) for c in candidates]

    def _run_id(self, tenant: str, run_id: str) -> str:
        return derived_id("replay-run", self.replay_id, tenant, run_id)

    async def _one(self, source: Candidate) -> Replayed:
        first = source.first
        if first is None:
            return Replayed(source, "", "", (), stopped="archived: its first event is no longer on record")
        self._now = source.received_at
        run_id = self._run_id(first.tenant, first.run_id)
        if isinstance(first, CandidateReceived) and first.tool not in self._contracts:
            return Replayed(source, run_id, "", (), stopped=f"{FIXTURE_MISSING}: no contract for {first.tool}")
        for contract in self._contracts.values():  # the fixture adapter's heartbeat, at this time
            await self._register(contract)
        opened = await self._open(first)
        if opened:
            return Replayed(source, run_id, "", (), stopped=opened)
        raw = first.raw_arguments
        if digest_bytes(raw.encode("utf-8", "surrogatepass")) != first.raw_digest:
            # Bounded on the record: a candidate received whole is its parsed arguments again.
            if not isinstance(first, CandidateReceived):
                return Replayed(source, run_id, "", (),
                                stopped=f"{FIXTURE_MISSING}: the recorded argument text is incomplete")
            raw = json.dumps(first.arguments, ensure_ascii=False)
        message = CandidateMessage(
            run_id=run_id, turn_id=derived_id("replay-turn", self.replay_id, first.turn_id),
            call_id=first.call_id, tool=first.tool, arguments=raw, provider_item=first.provider_item,
            provider=first.provider, model=first.model, follows=self._follows(source))
        subject = subjects.propose_subject(first.tenant, run_id)
        data = msgspec.json.encode(message)
        message_id = derived_id("replay-candidate", self.replay_id, source.intent_id)
        await self.services.intake.candidate(subject, data, message_id)
        intent_id = intent_id_for(first.tenant, run_id, first.call_id)
        if _reason(first) == "proposal.call-id-reused":
            read = read_candidate(subject, data, message_id)
            intent_id = reused_call_id_intent(first.tenant, run_id, first.call_id, read.candidate_digest)
        stopped = await self._drive(first.tenant, intent_id)
        history = await self.ports.store.load(first.tenant, intent_id)
        return Replayed(source, run_id, intent_id, tuple(decode_event(e) for e in history.events),
                        stopped=stopped)

    def _follows(self, source: Candidate) -> str | None:
        """The call id a candidate declared it follows (an automatic link is made again)."""
        first = source.first
        if first is None or first.follows_how != "declared" or not first.follows:
            return None
        return self._calls.get(first.follows)

    async def _open(self, first: CandidateReceived | CandidateRejected) -> str:
        """Open the candidate's run and turn in the fixture world; why not, if they cannot be."""
        self._calls[intent_id_for(first.tenant, first.run_id, first.call_id)] = first.call_id
        key = (first.tenant, first.run_id)
        run_id = self._run_id(*key)
        if key not in self._runs:
            if _reason(first) == "run.unknown":
                self._runs[key] = run_id  # no run was opened live either: none is opened here
            else:
                run = await self.deployment.run(first.tenant, first.run_id)
                if run is None:
                    return f"{FIXTURE_MISSING}: the context run {first.run_id} was opened with is unknown"
                answer = await self.services.intake.open_run(first.tenant, msgspec.json.encode(_reopen(run, run_id)))
                refused = msgspec.json.decode(answer)
                if isinstance(refused, dict) and "error" in refused:
                    return f"run not opened: {refused['error']}"
                self._runs[key] = run_id
        turn = (first.tenant, first.run_id, first.turn_id)
        if turn not in self._turns and _reason(first) not in ("run.unknown", "turn.unknown"):
            turn_id = derived_id("replay-turn", self.replay_id, first.turn_id)
            await self.services.intake.open_turn(first.tenant, run_id, msgspec.json.encode(OpenTurn(turn_id=turn_id)))
            self._turns.add(turn)
        return ""

    async def _drive(self, tenant: str, intent_id: str) -> str:
        """Hand each new event of the intent to its reactions until none appends more.

        Returns why it stopped early: a reaction that waits for time to pass, or one the
        fixture world gave up (recorded on the intent as ``ProcessingAbandoned``, its cause
        ``replay.fixture-missing`` when a fixture was missing); "" when it ran out of work.
        """
        done, gave_up = 0, ""
        while True:
            history = await self.ports.store.load(tenant, intent_id)
            fresh = history.events[done:]
            if not fresh:
                return gave_up
            if history.version > MAX_EVENTS:
                return f"stopped after {MAX_EVENTS} events"
            for recorded in fresh:
                done = recorded.version
                event = decode_event(recorded)
                for consumer, reaction in self._handed(event):
                    try:
                        await reaction(recorded)
                    except AttemptDue:
                        # The gate's trigger held as its attempt's timer: the deadline turns
                        # silence into an unknown outcome, and a replay's clock does not
                        # move (the fixture adapter is handed every order at once).
                        pass
                    except Retry as exc:
                        return f"waiting: {exc}"
                    except (AdapterRefused, AdapterUnavailable, LockgateError) as exc:
                        gave_up = gave_up or await self._abandon(recorded, f"replay-{consumer}", exc)
                if isinstance(event, ExecutionAuthorized):
                    await self._execute(recorded, event)

    def _handed(self, event: Event) -> list[tuple[str, Reaction]]:
        """The reactions ``event`` is handed to, in the services' order (from their specs)."""
        handed = []
        for spec in specs.SERVICES:
            for consumer in spec.consumes:
                if type(event) not in consumer.events:
                    continue
                routes = consumer.routes_of(type(event))
                if routes is not None and str(getattr(event, type(event).routed_by)) not in routes:
                    continue
                key = (spec.name, consumer.reaction)
                if key in NOT_RUN:
                    continue
                reaction = self.services.reactions.get(key)
                if reaction is None:
                    raise ReplayWiringError(f"{spec.name}.{consumer.reaction} has no replay reaction")
                handed.append((consumer.name, reaction))
        return handed

    async def _abandon(self, recorded: RecordedEvent, durable: str, exc: Exception) -> str:
        """Record that the fixture world gave the intent up, with why (the services' way).

        A live consumer gives a message up after bounded failures; here a failure does not
        pass with time (the fixtures stay what they are), so the first one is the last.
        Returns the cause recorded.
        """
        cause = FIXTURE_MISSING if FIXTURE_MISSING in str(exc) else f"{type(exc).__name__}: {exc}"[:200]
        why = Abandonment(durable=durable, cause=cause, deliveries=1)

        async def step(intent: EffectIntent | None) -> list[Event]:
            return abandonment(intent, why, recorded.event_id, self._now) if intent is not None else []

        await decide_and_append(self.ports.store, recorded.tenant, recorded.intent_id, step)
        return cause


def _reason(first: CandidateReceived | CandidateRejected) -> str:
    """Intake's recorded refusal of a candidate ("" for one it received)."""
    return first.reason if isinstance(first, CandidateRejected) else ""


class ReplayWiringError(LockgateError):
    """A service consumes an event with a reaction the replay does not know (add it)."""


def _reopen(run: RunContext, run_id: str) -> OpenRun:
    """The trusted host's request that opens ``run`` again, under the replay's run id."""
    return OpenRun(tenant=run.tenant, actor=run.actor, context=dict(run.context), delegation=run.delegation,
                   stage=run.stage, roles=tuple(run.roles), run_id=run_id, data_classes=run.data_classes)


def world_digest(replayed: Sequence[Replayed]) -> str:
    """A digest of every event a replay appended, as stored (the same replay twice: the same)."""
    stored = hashlib.sha256()
    for r in replayed:
        for event in r.events:
            new = encode_event(event)
            stored.update(f"{new.event_type}\x00".encode() + new.data + b"\x00")
    return "sha256:" + stored.hexdigest()
