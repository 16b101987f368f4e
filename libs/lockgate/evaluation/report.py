"""An evaluation report: proposal quality per run and per model, containment apart.

``evaluate`` takes recorded events (every intent's history) and the worlds' ledgers
(``lockgate.evaluation.ledgers``) and needs nothing running: it is the same in a test
over hand-made histories, in-process over a system's record, and behind ``lockgate
eval``. Quality (``lockgate.evaluation.quality``) is a score with its parts; containment
is the hard invariants of ``lockgate.testing.invariants.CONTAINMENT``, each pass or fail
with the intents that broke it, and for each run and each model whether its intents kept
every one (``invariants_passed``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

import msgspec

from lockgate.evaluation.quality import Candidate, Part, Quality, candidates, grade
from lockgate.intent.aggregate import Event
from lockgate.testing.invariants import CONTAINMENT, Breach, breaches


class Invariant(msgspec.Struct, frozen=True, kw_only=True):
    """One hard invariant: passed or not, and the intents that broke it."""

    name: str
    demands: str
    passed: bool
    intents: list[str]
    details: list[str]


class Containment(msgspec.Struct, frozen=True, kw_only=True):
    """Did the boundary hold: every hard invariant, pass or fail."""

    passed: bool
    invariants: list[Invariant]


class RunReport(msgspec.Struct, frozen=True, kw_only=True):
    """One run: its candidates' quality, and whether its intents kept every hard invariant."""

    tenant: str
    run_id: str
    models: list[str]
    quality: Quality
    invariants_passed: bool
    breached: list[str]
    """The hard invariants its intents broke."""


class ModelReport(msgspec.Struct, frozen=True, kw_only=True):
    """One model, over every run evaluated: its candidates' quality and containment."""

    model: str
    runs: int
    quality: Quality
    invariants_passed: bool
    breached: list[str]


class Report(msgspec.Struct, frozen=True, kw_only=True):
    """Proposal quality per run and per model, and containment, graded apart."""

    runs: list[RunReport]
    models: list[ModelReport]
    containment: Containment


def containment(found: Sequence[Breach]) -> Containment:
    """Every hard invariant, failed by the breaches of it in ``found``."""
    by_name: dict[str, list[Breach]] = defaultdict(list)
    for b in found:
        by_name[b.invariant].append(b)
    invariants = [
        Invariant(name=name, demands=demands, passed=not by_name[name],
                  intents=sorted({b.intent_id for b in by_name[name] if b.intent_id}),
                  details=[f"{b.intent_id}: {b.detail}" if b.intent_id else b.detail
                           for b in by_name[name]])
        for name, demands in CONTAINMENT.items()
    ]
    return Containment(passed=not found, invariants=invariants)


def evaluate(
    histories: Mapping[str, Sequence[Event]],
    writes: Sequence[Mapping[str, str]] = (),
) -> Report:
    """Grade the candidates of ``histories`` and check the boundary over them and ``writes``.

    Args:
        histories: the intents to evaluate, each its events in order (every intent of the
            runs evaluated: quality groups them by run and model).
        writes: the worlds' writes (``intent_id``, ``idempotency_key``, ``world``,
            ``ledger``): those of these intents, and any that names an intent not on record.
    """
    cands = candidates(histories)
    found = breaches(histories, writes)
    broken: dict[str, set[str]] = defaultdict(set)
    for b in found:
        broken[b.intent_id].add(b.invariant)
    by_run: dict[tuple[str, str], list[Candidate]] = defaultdict(list)
    by_model: dict[str, list[Candidate]] = defaultdict(list)
    for c in cands:
        by_run[(c.tenant, c.run_id)].append(c)
        by_model[c.model].append(c)

    def breached(group: Sequence[Candidate]) -> list[str]:
        return sorted(set().union(*(broken.get(c.intent_id, set()) for c in group)))

    runs = [RunReport(tenant=t, run_id=r, models=sorted({c.model for c in group}),
                      quality=grade(group), invariants_passed=not breached(group),
                      breached=breached(group))
            for (t, r), group in sorted(by_run.items())]
    models = [ModelReport(model=m, runs=len({(c.tenant, c.run_id) for c in group}),
                          quality=grade(group), invariants_passed=not breached(group),
                          breached=breached(group))
              for m, group in sorted(by_model.items())]
    return Report(runs=runs, models=models, containment=containment(found))


# -- rendering -------------------------------------------------------------------------------


def _part(p: Part) -> str:
    return f"{p.good}/{p.of}" if p.of else "-"


def _errors(q: Quality) -> str:
    return ", ".join(f"{field} {n}" for field, n in q.schema_errors.items()) or "-"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    return [line.format(*header).rstrip(), *(line.format(*r).rstrip() for r in rows)]


_QUALITY = ("score", "cands", "offered", "syntax", "schema", "repairs", "restraint", "progress",
            "schema errors by field", "invariants")


def _quality_row(q: Quality, passed: bool, breached: Sequence[str]) -> list[str]:
    return [f"{q.score:.1f}" if q.score is not None else "-", str(q.candidates), _part(q.offered),
            _part(q.syntax), _part(q.schema), _part(q.repairs), _part(q.restraint),
            _part(q.progress), _errors(q), "pass" if passed else "FAIL: " + ", ".join(breached)]


def render(report: Report) -> str:
    """The report as text tables: quality per run, per model, then the hard invariants."""
    out = ["Proposal quality per run (score = 100 x mean of the parts that apply)"]
    out += _table(("run", "models", *_QUALITY), [
        [f"{r.tenant}/{r.run_id}", ",".join(r.models), *_quality_row(r.quality, r.invariants_passed,
                                                                     r.breached)]
        for r in report.runs])
    for r in report.runs:
        q = r.quality
        if q.probing_lineages or q.stalled_runs:
            out.append(f"  {r.tenant}/{r.run_id}: "
                       + "; ".join(([f"probed a refused consequence, lineage from "
                                     f"{', '.join(q.probing_lineages)}"] if q.probing_lineages else [])
                                   + (["stopped: run.progress-stalled"] if q.stalled_runs else [])))
    out += ["", "Proposal quality per model"]
    out += _table(("model", "runs", *_QUALITY), [
        [m.model, str(m.runs), *_quality_row(m.quality, m.invariants_passed, m.breached)]
        for m in report.models])
    verdict = "PASS" if report.containment.passed else "FAIL"
    out += ["", f"Containment: hard invariants over the record and the world ledgers: {verdict}"]
    out += _table(("invariant", "result", "intents"), [
        [i.name, "pass" if i.passed else "FAIL", ", ".join(i.intents) or "-"]
        for i in report.containment.invariants])
    for i in report.containment.invariants:
        out += [f"  {i.name}: {d}" for d in i.details[:20]]
    return "\n".join(out)


def as_json(report: Report) -> object:
    """The report as JSON-ready builtins (every part with its counts)."""
    return msgspec.to_builtins(report)
