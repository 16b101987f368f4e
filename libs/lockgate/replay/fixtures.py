"""Fixtures: what a replay's world answers, from recorded evidence or a declared fixture.

A replayed candidate asks its world what a live one asks an adapter: ``normalize`` (the
canonical arguments and resource), ``facts`` (the resource's state, for policy and the
final gate), ``execute`` (the effect) and ``query`` (did it happen). A fixture answers
each from the record, when the record holds the answer to that very question, or from a
declared fixture file; a question neither answers is a **missing fixture**, and the
world says so instead of guessing (``replay.fixture-missing``): it never asks anything
real, and it has no credentials for anything real to ask.

Questions are keyed by what they ask, never by who asks: normalize by the capability,
tenant, actor and the parsed arguments; facts by the capability, tenant, actor and
resource; execute and query by the consequence's digest (the one approvals and
idempotency bind). A replayed candidate that normalizes to another consequence than
its recorded one (another contract revision, a counterfactual that lets it further)
finds no recorded effect, and its attempt is refused before anything could be sent.

The declared file (YAML), every section optional; a declared answer wins over the
record's::

    runs:        # the context a run was opened with (else the deployment's record of it)
      - {tenant: tenant-a, run_id: r1, actor: user-42, context: {case_id: case-123},
         stage: default, roles: [], delegation: null}
    normalize:
      - {capability: case.add_note, tenant: tenant-a, actor: user-42,
         arguments: {note: "Called back."},
         result: {arguments: {...}, resource: {type: case, id: case-123}, destination: ...}}
    facts:
      - {capability: case.add_note, tenant: tenant-a, actor: user-42,
         resource: {type: case, id: case-123}, facts: {exists: true, ...}}
    execute:
      - {digest: "sha256:...", receipt: {note_id: n1}, result: {note_id: n1}}
      - {digest: "sha256:...", rejected: case.version-conflict}
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import yaml

from lockgate.contracts.messages import (
    AttemptReport,
    ExecutionOrder,
    Facts,
    FactsRequest,
    NormalizeRequest,
    NormalizeResult,
    QueryRequest,
    QueryResult,
    RunContext,
)
from lockgate.contracts.vocabulary import QueryFinding, ReportStage, Resolution
from lockgate.core.canonical import digest
from lockgate.intent.events import (
    AttemptRejected,
    CandidateNormalized,
    CandidateReceived,
    EffectCompleted,
    ExecutionAuthorized,
    GateRefused,
    NormalizationFailed,
    PolicyDecided,
    Reconciled,
)
from lockgate.replay.record import Candidate, ReplayError

#: The reason a replayed intent stops with when its world has no answer.
FIXTURE_MISSING = "replay.fixture-missing"
#: The adapter name fixture answers and reports carry (their provenance).
FIXTURE_ADAPTER = "replay-fixture"
#: Normalization failures that are the service's own, not an adapter's answer.
_NOT_ADAPTER_ANSWERS = frozenset({"capability.changed", "capability.unavailable", FIXTURE_MISSING})


def normalize_key(capability: str, tenant: str, actor: str, arguments: dict[str, Any]) -> str:
    """The key of a normalize question."""
    return digest({"verb": "normalize", "capability": capability, "tenant": tenant, "actor": actor,
                   "arguments": arguments})


def facts_key(capability: str, tenant: str, actor: str, resource: dict[str, str]) -> str:
    """The key of a facts question."""
    return digest({"verb": "facts", "capability": capability, "tenant": tenant, "actor": actor,
                   "resource": resource})


@dataclass(frozen=True)
class Effect:
    """What the world did with a consequence: completed with a receipt, or rejected."""

    receipt: dict[str, str] = field(default_factory=dict)
    result: dict[str, Any] = field(default_factory=dict)
    rejected: str = ""


@dataclass(frozen=True)
class Miss:
    """One question no fixture answered."""

    verb: str
    capability: str
    key: str


class _DeclaredRun(msgspec.Struct, frozen=True, kw_only=True):
    tenant: str
    run_id: str
    actor: str
    context: dict[str, str] = msgspec.field(default_factory=dict)
    stage: str = "default"
    roles: tuple[str, ...] = ()
    delegation: str | None = None
    data_classes: tuple[str, ...] | None = None


class _DeclaredNormalize(msgspec.Struct, frozen=True, kw_only=True):
    capability: str
    tenant: str
    actor: str
    arguments: dict[str, Any]
    result: NormalizeResult


class _DeclaredFacts(msgspec.Struct, frozen=True, kw_only=True):
    capability: str
    tenant: str
    actor: str
    resource: dict[str, str]
    facts: dict[str, str | int | bool]


class _DeclaredEffect(msgspec.Struct, frozen=True, kw_only=True):
    digest: str
    receipt: dict[str, str] = msgspec.field(default_factory=dict)
    result: dict[str, Any] = msgspec.field(default_factory=dict)
    rejected: str = ""


class _Declared(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    runs: tuple[_DeclaredRun, ...] = ()
    normalize: tuple[_DeclaredNormalize, ...] = ()
    facts: tuple[_DeclaredFacts, ...] = ()
    execute: tuple[_DeclaredEffect, ...] = ()


@dataclass
class Fixtures:
    """Every answer a replay's world may give, and the questions it could not answer."""

    normalize: dict[str, NormalizeResult] = field(default_factory=dict)
    #: Each facts question's recorded answers in the order they were given (policy's,
    #: then the final gate's); asked more often, the last one answers again.
    facts: dict[str, list[Facts]] = field(default_factory=dict)
    effects: dict[str, Effect] = field(default_factory=dict)
    #: Declared runs' contexts (else the deployment's record of them).
    runs: dict[tuple[str, str], RunContext] = field(default_factory=dict)
    #: The questions no fixture answered, in the order they were asked.
    misses: list[Miss] = field(default_factory=list)
    _asked: Counter[str] = field(default_factory=Counter)

    @property
    def digest(self) -> str:
        """A digest of every answer these fixtures give (part of a replay's identity)."""
        return digest({
            # Facts are the facts fixtures' (a normalization's own are never answered).
            "normalize": {k: _without_facts(msgspec.to_builtins(v))
                          for k, v in sorted(self.normalize.items())},
            "facts": {k: [msgspec.to_builtins(f) for f in v] for k, v in sorted(self.facts.items())},
            "effects": {k: {"receipt": v.receipt, "result": v.result, "rejected": v.rejected}
                        for k, v in sorted(self.effects.items())},
            "runs": {f"{t}/{r}": msgspec.to_builtins(c) for (t, r), c in sorted(self.runs.items())},
        })

    def reset(self) -> None:
        """Forget what was asked (a new replay over the same fixtures)."""
        self.misses.clear()
        self._asked.clear()

    # -- building --------------------------------------------------------------------------

    @classmethod
    def recorded(cls, candidates: Iterable[Candidate]) -> Fixtures:
        """The answers the record holds for ``candidates``."""
        fixtures = cls()
        for candidate in candidates:
            fixtures.add_recorded(candidate)
        return fixtures

    def add_recorded(self, candidate: Candidate) -> None:
        """Add what ``candidate``'s record answers."""
        first = candidate.first
        if not isinstance(first, CandidateReceived):
            return  # refused by intake: nothing was asked of a world
        ask = normalize_key(first.tool, first.tenant, first.actor, first.arguments)
        normalized: CandidateNormalized | None = None
        for event in candidate.events:
            if isinstance(event, CandidateNormalized):
                normalized = event
                self.normalize.setdefault(ask, NormalizeResult(
                    arguments=event.arguments, resource=event.resource, destination=event.destination))
            elif isinstance(event, NormalizationFailed) and (
                    event.reason not in _NOT_ADAPTER_ANSWERS):
                self.normalize.setdefault(ask, NormalizeResult(reason=event.reason, field=event.field))
        if normalized is None:
            return
        resource = facts_key(first.tool, first.tenant, first.actor, normalized.resource)
        seen = self.facts.setdefault(resource, [])
        for event in candidate.events:
            if isinstance(event, PolicyDecided) and event.facts:
                seen.append(Facts(facts=dict(event.facts)))
            elif isinstance(event, ExecutionAuthorized | GateRefused) and (
                    event.gate_facts):
                seen.append(Facts(facts=dict(event.gate_facts)))
            elif isinstance(event, EffectCompleted):
                self.effects.setdefault(normalized.digest, Effect(dict(event.receipt), dict(event.result)))
            elif isinstance(event, Reconciled) and event.resolution == Resolution.COMPLETED:
                self.effects.setdefault(normalized.digest, Effect(dict(event.receipt)))
            elif isinstance(event, AttemptRejected):
                self.effects.setdefault(normalized.digest, Effect(rejected=event.reason))
        if not seen:
            del self.facts[resource]

    def declare(self, path: Path) -> None:
        """Add the fixtures declared in ``path`` (they win over recorded ones).

        Raises:
            ReplayError: the file cannot be read or is not a fixture file.
        """
        try:
            declared = msgspec.convert(yaml.safe_load(path.read_text()) or {}, _Declared)
        except (OSError, yaml.YAMLError, msgspec.ValidationError) as exc:
            raise ReplayError(f"{path}: not a fixture file: {exc}") from exc
        for run in declared.runs:
            self.runs[(run.tenant, run.run_id)] = RunContext(
                run_id=run.run_id, tenant=run.tenant, actor=run.actor, context=dict(run.context),
                delegation=run.delegation, stage=run.stage, opened_at=datetime.fromtimestamp(0, UTC),
                roles=run.roles, data_classes=run.data_classes)
        for n in declared.normalize:
            self.normalize[normalize_key(n.capability, n.tenant, n.actor, n.arguments)] = n.result
        for f in declared.facts:
            self.facts[facts_key(f.capability, f.tenant, f.actor, f.resource)] = [Facts(facts=dict(f.facts))]
        for e in declared.execute:
            self.effects[e.digest] = Effect(dict(e.receipt), dict(e.result), e.rejected)

    # -- answering -------------------------------------------------------------------------

    def answer_normalize(self, capability: str, request: NormalizeRequest) -> NormalizeResult:
        """The fixture's normalization, or ``replay.fixture-missing`` (the intent stops there)."""
        key = normalize_key(capability, request.tenant, request.actor, request.arguments)
        found = self.normalize.get(key)
        if found is None:
            self.misses.append(Miss("normalize", capability, key))
            return NormalizeResult(reason=FIXTURE_MISSING)
        # What policy decides on comes from the facts fixtures, asked in turn, as a
        # world's facts are: never from a declared normalization.
        return msgspec.structs.replace(found, facts=None)

    def answer_facts(self, capability: str, request: FactsRequest) -> Facts | None:
        """The fixture's facts (``None``: missing; the world refuses the question)."""
        key = facts_key(capability, request.tenant, request.actor, request.resource)
        answers = self.facts.get(key)
        if not answers:
            self.misses.append(Miss("facts", capability, key))
            return None
        n = self._asked[key]
        self._asked[key] += 1
        return answers[min(n, len(answers) - 1)]

    def answer_query(self, capability: str, request: QueryRequest, digest_: str) -> QueryResult | None:
        """Whether the consequence's effect is in the fixture world (``None``: missing; the
        world refuses the question with ``replay.fixture-missing``).

        Only an answer on record says ``absent``: a recorded rejection. A consequence no
        fixture knows is not known to be absent.
        """
        effect = self.effects.get(digest_)
        if effect is None:
            self.misses.append(Miss("query", capability, digest_))
            return None
        if effect.rejected:
            return QueryResult(finding=QueryFinding.ABSENT)
        return QueryResult(finding=QueryFinding.FOUND, receipt=dict(effect.receipt))

    def execute(self, order: ExecutionOrder, now: datetime) -> list[AttemptReport]:
        """The reports of an order's attempt, as a fixture adapter makes them.

        A recorded or declared effect crosses the (simulated) send boundary and completes
        with its receipt; a recorded rejection is rejected again; a consequence no fixture
        knows is rejected with ``replay.fixture-missing`` before its boundary: nothing
        anywhere was sent.
        """
        effect = self.effects.get(order.digest)

        def report(stage: ReportStage, **fields: Any) -> AttemptReport:
            return AttemptReport(tenant=order.tenant, intent_id=order.intent_id, attempt_id=order.attempt_id,
                                 stage=stage, adapter=FIXTURE_ADAPTER, reported_at=now,
                                 token=order.report_token, **fields)

        if effect is None:
            self.misses.append(Miss("execute", order.capability, order.digest))
            return [report(ReportStage.REJECTED, reason=FIXTURE_MISSING,
                           detail="no recorded or declared effect for this consequence")]
        if effect.rejected:
            return [report(ReportStage.REJECTED, reason=effect.rejected, detail="as recorded")]
        return [report(ReportStage.SENT),
                report(ReportStage.COMPLETED, receipt=dict(effect.receipt), result=dict(effect.result))]


def _without_facts(normalized: dict[str, Any]) -> dict[str, Any]:
    """A normalization's answer as a replay's identity counts it (without ``facts``)."""
    return {k: v for k, v in normalized.items() if k != "facts"}
