"""What would this bundle have decided? Recorded consequences and facts, under another bundle.

The policy service decides with ``lockgate.policy.domain.evaluate_for`` on the intent as
normalization left it, the adapter's facts and the evidence of the run and contract.
The record keeps the intent (the ``CandidateNormalized`` consequence, folded, is the
intent the service decided on, with the effect class and data classes of its contract),
the facts each ``PolicyDecided`` used, and whether the capability was still offered.
Evaluating the same function on them under another bundle gives that bundle's decision
on the same history, with the policies that determined it, without asking any world.

The run's history is the one the decision read, as it recorded it (``PolicyDecided.history``):
a shadow bundle's decision, made live on the same evidence, and this one agree. The run's
context is read from the deployment's runs: it is the one the decision read when the run
was opened before the decision (a run opened again since carries a later time). Each
decision says where each piece of its evidence came from (``Provenance``), and in words
(``Decided.grounds``): one that stood on anything the record cannot vouch for (today's
run or contract, a declared fixture, the compiled-in contracts, a history the decision did
not keep) is marked so, and one with no evidence at all is undecidable,
counted neither changed nor unchanged.

It is permission only: Cedar, the lineage rules and the progress checkpoint as the
recorded intent carries them. Budgets and flood limits are counters of a live
deployment; the full replay (``lockgate.replay.world``) runs those in its own world.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from lockgate.authz import PolicyBundle
from lockgate.authz.history import HistoryFacts
from lockgate.authz.intents import Evidence, keeps_history
from lockgate.contracts.capability import CapabilityContract, EffectClass
from lockgate.contracts.messages import Facts, RunContext
from lockgate.contracts.vocabulary import DecisionOutcome, Resolution
from lockgate.intent.aggregate import EffectIntent, Event, State
from lockgate.intent.codec import fold
from lockgate.intent.events import CandidateNormalized, EffectCompleted, PolicyDecided, Reconciled
from lockgate.policy.domain import evaluate_for
from lockgate.replay.record import Candidate, Provenance, Sources, grounds_of, in_words

#: The recorded reason of a decision made when the capability was no longer offered.
NOT_OFFERED = "tool.no-longer-offered"


@dataclass(frozen=True)
class Decided:
    """One recorded policy decision beside the one another bundle makes on the same evidence."""

    intent_id: str
    tenant: str
    run_id: str
    tool: str
    resource: str
    digest: str
    recorded: str
    recorded_reasons: tuple[str, ...]
    recorded_determining: tuple[str, ...]
    recorded_revision: str
    outcome: str
    reasons: tuple[str, ...]
    determining: tuple[str, ...]
    revision: str
    #: Where the run's context came from ("": none was found).
    run_from: str = Provenance.RECORDED
    #: Where the contract came from ("": none was found).
    contract_from: str = Provenance.RECORDED
    #: Where the run's history came from: the decision's record, or ``absent`` when the
    #: bundle reads a history the decision did not keep (then read as empty).
    history_from: str = Provenance.RECORDED
    #: How each piece not as recorded differs from what the record says, or why none was found.
    notes: tuple[str, ...] = ()
    #: Why no decision could be made ("": one was).
    undecidable: str = ""

    @property
    def as_recorded(self) -> bool:
        """Whether every piece of its evidence is the record's."""
        return not self.undecidable and not self.apart

    @property
    def changed(self) -> bool:
        """Whether the other bundle decides otherwise (another outcome, or another reason)."""
        return not self.undecidable and (self.outcome, self.reasons) != (self.recorded, self.recorded_reasons)

    @property
    def entered(self) -> tuple[str, ...]:
        """Policies that determine the other bundle's decision and did not determine the recorded one."""
        if self.undecidable:
            return ()
        return tuple(p for p in self.determining if p not in self.recorded_determining)

    @property
    def left(self) -> tuple[str, ...]:
        """Policies that determined the recorded decision and no longer determine it."""
        if self.undecidable:
            return ()
        return tuple(p for p in self.recorded_determining if p not in self.determining)

    @property
    def apart(self) -> tuple[str, ...]:
        """Each piece of its evidence that is not the record's, in words (what it was instead)."""
        return in_words(run=self.run_from, contract=self.contract_from, history=self.history_from)

    @property
    def grounds(self) -> str:
        """Its evidence in words: ``as recorded``, what it stood on instead, or why it is undecidable."""
        if self.undecidable:
            return f"undecidable: {self.undecidable}"
        return grounds_of(run=self.run_from, contract=self.contract_from, history=self.history_from)

    def as_json(self) -> dict[str, object]:
        """The row as JSON."""
        return {
            "intent_id": self.intent_id, "tenant": self.tenant, "run_id": self.run_id, "tool": self.tool,
            "resource": self.resource, "digest": self.digest,
            "recorded": {"outcome": self.recorded, "reasons": list(self.recorded_reasons),
                         "determining": list(self.recorded_determining), "revision": self.recorded_revision},
            "counterfactual": None if self.undecidable else {
                "outcome": self.outcome, "reasons": list(self.reasons), "determining": list(self.determining),
                "revision": self.revision},
            "evidence": {"run": self.run_from, "contract": self.contract_from, "history": self.history_from,
                         "facts": Provenance.RECORDED, "as_recorded": self.as_recorded,
                         "words": self.grounds, "notes": list(self.notes)},
            "undecidable": self.undecidable or None,
            "changed": self.changed, "entered": list(self.entered), "left": list(self.left),
        }


@dataclass(frozen=True)
class _Recorded:
    """What policy decided on, as the record holds it."""

    intent: EffectIntent
    normalized: CandidateNormalized
    decision: PolicyDecided


def _decided_on(candidate: Candidate) -> _Recorded | None:
    """The intent policy decided on, and its recorded decision (the last one that was not a pause)."""
    before: list[Event] = []
    normalized: EffectIntent | None = None
    consequence: CandidateNormalized | None = None
    decision: PolicyDecided | None = None
    for event in candidate.events:
        if normalized is None:
            before.append(event)
            if isinstance(event, CandidateNormalized):
                normalized, consequence = fold(before), event
        elif isinstance(event, PolicyDecided) and (
                decision is None or event.outcome != DecisionOutcome.PAUSE):
            decision = event
    if normalized is None or consequence is None or decision is None or normalized.state is not State.NORMALIZED:
        return None
    return _Recorded(normalized, consequence, decision)


async def _run(found: _Recorded, sources: Sources) -> tuple[RunContext | None, str, str]:
    """The run's context the decision read, its provenance, and a note when it is not the record's."""
    intent = found.intent
    return await sources.run_read_at(intent.tenant, intent.run_id, intent.actor, found.decision.timestamp)


def _history(found: _Recorded, bundle: PolicyBundle) -> tuple[HistoryFacts | None, str, str]:
    """The run's history the decision read (``None``: it read none), its provenance, and a
    note when the bundle reads one the record does not hold."""
    recorded = found.decision.history
    if recorded:
        return HistoryFacts.from_context(recorded), Provenance.RECORDED, ""
    if not keeps_history(bundle, found.intent)[0]:
        return None, Provenance.RECORDED, ""  # none is read, so none is missing
    # Its bundle read none (or it was recorded before histories were kept): this bundle
    # decides without it, as a shadow beside that bundle did.
    return None, Provenance.ABSENT, f"the decision kept no history of run {found.intent.run_id}"


def _short(revision: str) -> str:
    return revision.removeprefix("sha256:")[:12] or "?"


async def _contract(found: _Recorded, sources: Sources) -> tuple[CapabilityContract | None, str, str]:
    """The contract it was normalized under, its provenance, and a note when it is not the record's."""
    tool, normalized = found.intent.tool, found.normalized
    recorded = normalized.contract_revision
    hit = await sources.found_contract(tool)
    if hit is not None and hit[0].revision == recorded and hit[1] is Provenance.CURRENT:
        return hit[0], Provenance.RECORDED, ""  # the revision is the contract's digest
    if normalized.data_classes is not None:
        # What a decision reads of a contract is its effect class and data classes, and the
        # record holds both: the contract as recorded, whatever is registered today.
        return CapabilityContract(
            name=tool, description="", argument_schema={}, effect_class=EffectClass(normalized.effect_class),
            data_classes=normalized.data_classes), Provenance.RECORDED, ""
    if hit is None:
        return None, "", f"no contract for {tool} (recorded revision {_short(recorded)})"
    contract, source = hit
    return contract, source, (f"contract {tool} is {_short(contract.revision)} ({in_words(contract=source)[0]}); "
                              f"the decision's was {_short(recorded)}, which the record does not hold")


def _completions(record: Sequence[Candidate]) -> dict[tuple[str, str, str], list[datetime]]:
    """When each effect of each run's capabilities completed, on the record."""
    done: dict[tuple[str, str, str], list[datetime]] = {}
    for candidate in record:
        final = candidate.final()
        if final is None or final.state is not State.COMPLETED:
            continue
        at = next((e.timestamp for e in candidate.events if isinstance(e, EffectCompleted) or (
            isinstance(e, Reconciled) and e.resolution == Resolution.COMPLETED)), None)
        if at is not None:
            done.setdefault((final.tenant, final.run_id, final.tool), []).append(at)
    return done


async def counterfactual(
    candidates: Sequence[Candidate], bundle: PolicyBundle, sources: Sources, *,
    runs: Sequence[Candidate] | None = None,
) -> list[Decided]:
    """Every recorded policy decision among ``candidates``, beside ``bundle``'s on the same evidence.

    Prior effects (for a bundle whose policies read them) are the effects of the same
    capability the run completed before the decision, as ``runs`` records them: every
    candidate of the runs ``candidates`` belong to (default: ``candidates`` alone). A
    decision whose run or contract no source has is undecidable (``Decided.undecidable``).
    """
    done = _completions(candidates if runs is None else runs)
    rows = []
    for candidate in candidates:
        found = _decided_on(candidate)
        if found is not None:
            rows.append(await _decide(found, bundle, sources, done))
    return rows


async def _decide(found: _Recorded, bundle: PolicyBundle, sources: Sources,
                  done: dict[tuple[str, str, str], list[datetime]]) -> Decided:
    intent, recorded = found.intent, found.decision
    run, run_from, run_note = await _run(found, sources)
    contract, contract_from, contract_note = await _contract(found, sources)
    row = Decided(
        intent_id=intent.intent_id, tenant=intent.tenant, run_id=intent.run_id, tool=intent.tool,
        resource="/".join(v for v in (intent.resource.get("type"), intent.resource.get("id")) if v),
        digest=intent.digest or "", recorded=str(recorded.outcome),
        recorded_reasons=tuple(recorded.reasons), recorded_determining=tuple(recorded.determining),
        recorded_revision=recorded.policy_revision, outcome="", reasons=(), determining=(), revision="",
        run_from=run_from, contract_from=contract_from, notes=tuple(n for n in (run_note, contract_note) if n))
    if run is None or contract is None:
        return replace(row, undecidable="; ".join(row.notes))
    history, history_from, history_note = _history(found, bundle)
    row = replace(row, history_from=history_from, notes=(*row.notes, *((history_note,) if history_note else ())))
    evidence = Evidence(
        run=run, contract=contract,
        prior_effects=sum(at < recorded.timestamp for at in done.get((intent.tenant, intent.run_id, intent.tool), ())),
        # Whether the capability was still offered is on the record: the decision says so.
        offered_now=NOT_OFFERED not in recorded.reasons,
    )
    if history is not None:
        # A history the decision did not read is not read here either: the request carries
        # what a shadow bundle's beside it carried.
        evidence = replace(evidence, history=history)
    facts = Facts(facts=dict(recorded.facts)) if recorded.facts else None
    decision = evaluate_for(intent, bundle, facts, evidence=evidence)
    return replace(row, outcome=str(decision.outcome), reasons=tuple(decision.reasons),
                   determining=tuple(decision.determining)[:16], revision=decision.revision)
