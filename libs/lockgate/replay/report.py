"""A replay's outcome per candidate: what the record says beside what the fixture world did."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from lockgate.authz import PolicyBundle
from lockgate.core.canonical import digest
from lockgate.intent.aggregate import Event
from lockgate.intent.events import (
    CandidateNormalized,
    CandidateReceived,
    CandidateRejected,
    EffectCompleted,
    PolicyDecided,
    ReviewApproved,
    ReviewDenied,
    ReviewExpired,
    ReviewRequested,
)
from lockgate.replay.counterfactual import Decided
from lockgate.replay.fixtures import Fixtures, Miss
from lockgate.replay.record import Candidate, Deployment, Known, Provenance, Sources, grounds_of
from lockgate.replay.world import FixtureWorld, Replayed, replay_identity, world_digest


@dataclass(frozen=True)
class Row:
    """One candidate: recorded, and replayed."""

    source: str
    tenant: str
    tool: str
    recorded_state: str
    recorded_reason: str
    recorded_decision: str
    recorded_digest: str
    #: What the recorded reviewer decided (evidence only: never an approval in the replay).
    recorded_review: str
    intent: str
    state: str
    reason: str
    decision: str
    determining: tuple[str, ...]
    digest: str
    executed: bool
    stopped: str
    #: Its run and contract in a few words: ``as recorded``, or what was not and whence.
    grounds: str = "as recorded"

    def as_json(self) -> dict[str, object]:
        """The row as JSON."""
        return {
            "source": self.source, "tenant": self.tenant, "tool": self.tool, "evidence": self.grounds,
            "recorded": {"state": self.recorded_state, "reason": self.recorded_reason,
                         "decision": self.recorded_decision, "digest": self.recorded_digest,
                         "review": self.recorded_review},
            "replayed": {"intent": self.intent, "state": self.state, "reason": self.reason,
                         "decision": self.decision, "determining": list(self.determining),
                         "digest": self.digest, "executed": self.executed, "stopped": self.stopped},
        }


@dataclass(frozen=True)
class Replay:
    """A whole replay: its identity, bundle, rows, and the digests two equal replays share."""

    replay_id: str
    bundle_revision: str
    rows: tuple[Row, ...]
    world_digest: str
    misses: tuple[Miss, ...]
    #: Every replayed intent with the events the fixture world stored for it.
    replayed: tuple[Replayed, ...] = field(default=(), compare=False, repr=False)

    @property
    def decisions_digest(self) -> str:
        """A digest of every replayed decision, digest and end state, in order."""
        return digest([[r.source, r.decision, list(r.determining), r.digest, r.state, r.reason]
                       for r in self.rows])

    def as_json(self) -> dict[str, object]:
        """The replay as JSON."""
        return {"replay": self.replay_id, "bundle_revision": self.bundle_revision,
                "decisions_digest": self.decisions_digest, "world_digest": self.world_digest,
                "candidates": [r.as_json() for r in self.rows],
                "fixture_misses": [{"verb": m.verb, "capability": m.capability, "key": m.key}
                                   for m in self.misses]}


def _review(events: Sequence[Event]) -> str:
    """What the record says the reviewers did (the last decision of the last review)."""
    said = ""
    for event in events:
        if isinstance(event, ReviewRequested):
            said = "waiting"
        elif isinstance(event, ReviewApproved):
            said = f"approved by {event.reviewer}"
        elif isinstance(event, ReviewDenied):
            said = f"{'edited' if event.edited_into else 'denied'} by {event.reviewer}"
        elif isinstance(event, ReviewExpired):
            said = "expired"
    return said


def _decision(events: Sequence[Event]) -> PolicyDecided | None:
    decided = [e for e in events if isinstance(e, PolicyDecided)]
    return decided[-1] if decided else None


def _digest(events: Sequence[Event]) -> str:
    normalized = [e for e in events if isinstance(e, CandidateNormalized)]
    return normalized[-1].digest if normalized else ""


def row(replayed: Replayed, grounds: str = "as recorded") -> Row:
    """The row of one replayed candidate (``grounds``: its evidence in a few words)."""
    source = replayed.source
    recorded = source.final()
    final = replayed.final()
    was, now = _decision(source.events), _decision(replayed.events)
    first = source.first
    return Row(
        source=source.intent_id, tenant=source.tenant, tool=first.tool if first else "",
        recorded_state=str(recorded.state) if recorded else "", recorded_reason=(recorded.reason or "") if recorded else "",
        recorded_decision=str(was.outcome) if was else "", recorded_digest=_digest(source.events),
        recorded_review=_review(source.events), intent=replayed.intent_id,
        state=str(final.state) if final else "", reason=(final.reason or "") if final else "",
        decision=str(now.outcome) if now else "", determining=tuple(now.determining) if now else (),
        digest=_digest(replayed.events),
        executed=any(isinstance(e, EffectCompleted) for e in replayed.events),
        stopped=replayed.stopped, grounds=grounds,
    )


async def grounds(candidate: Candidate, sources: Sources) -> str:
    """What a replayed candidate's run and contract stood on: ``as recorded``, or what was not.

    Its run is the record's when it was opened before the candidate was received (and
    not since); its contract when it has the revision the candidate was received under.
    """
    first = candidate.first
    if first is None:
        return "as recorded"
    pieces: dict[str, str] = {}
    if not (isinstance(first, CandidateRejected) and first.reason == "run.unknown"):
        _, pieces["run"], _ = await sources.run_read_at(first.tenant, first.run_id, first.actor,
                                                        candidate.received_at)
    if isinstance(first, CandidateReceived):
        hit = await sources.found_contract(first.tool)
        pieces["contract"] = "" if hit is None else Provenance.RECORDED if (
            hit[1] is Provenance.CURRENT and hit[0].revision == first.contract_revision) else hit[1]
    return grounds_of(**pieces)


async def replay(
    candidates: Sequence[Candidate], deployment: Deployment, bundle_dir: Path, *,
    declared: Path | None = None, recorded_evidence: bool = True, root: Path | None = None,
) -> Replay:
    """Replay ``candidates`` in a fixture world of their own, under the bundle in ``bundle_dir``.

    Args:
        candidates: the recorded candidates (``lockgate.replay.record.candidates``).
        deployment: the runs' contexts and the contracts (the ``replay`` role's reads; a
            ``Sources`` names where each came from, anything else is the running system).
        bundle_dir: the policy bundle the replay decides under.
        declared: a fixture file (``lockgate.replay.fixtures``); its answers win.
        recorded_evidence: answer from the record as well (else only from ``declared``).
        root: where the fixture world keeps its broker store (default: a temporary directory).

    Raises:
        BundleError: the bundle does not load.
        ReplayError: the fixture file is not one.
    """
    fixtures = Fixtures.recorded(candidates) if recorded_evidence else Fixtures()
    if declared is not None:
        fixtures.declare(declared)
    base = deployment if isinstance(deployment, Sources) else Sources(deployment=deployment)
    sources = replace(base, declared=Known({**base.declared.runs, **fixtures.runs}, dict(base.declared.contracts)))
    bundle = PolicyBundle.load(bundle_dir)
    replay_id = replay_identity(candidates, bundle.revision, fixtures)
    async with FixtureWorld(fixtures, sources, bundle_dir, replay_id=replay_id, root=root) as world:
        replayed = await world.replay(candidates)
    said = [await grounds(c, sources) for c in candidates]
    return Replay(replay_id=replay_id, bundle_revision=bundle.revision,
                  rows=tuple(row(r, g) for r, g in zip(replayed, said, strict=True)),
                  world_digest=world_digest(replayed), misses=tuple(fixtures.misses), replayed=tuple(replayed))


def _short(value: str, n: int = 12) -> str:
    return value.removeprefix("sha256:")[:n]


def replay_table(result: Replay) -> str:
    """The replay as a table: each candidate as recorded, and as replayed, and on what evidence."""
    header = ("candidate", "tool", "recorded", "review (evidence)", "replayed", "digest", "evidence")
    lines = [header]
    for r in result.rows:
        recorded = f"{r.recorded_decision or '-'} → {r.recorded_state}" + (
            f" ({r.recorded_reason})" if r.recorded_reason else "")
        replayed = f"{r.decision or '-'} → {r.state or 'not replayed'}" + (
            f" ({r.reason})" if r.reason else "") + (f" [{r.stopped}]" if r.stopped else "")
        same = "same" if r.digest and r.digest == r.recorded_digest else (_short(r.digest) or "-")
        lines.append((_short(r.source), r.tool, recorded, r.recorded_review or "-", replayed, same, r.grounds))
    body = _columns(lines)
    apart = sum(r.grounds != "as recorded" for r in result.rows)
    return (f"replay {result.replay_id[:12]} under bundle {_short(result.bundle_revision)}: "
            f"{len(result.rows)} candidates, decisions {_short(result.decisions_digest)}, "
            f"world {_short(result.world_digest)}, {len(result.misses)} fixture misses"
            + (f", {apart} not on the evidence as recorded" if apart else "") + f"\n{body}")


def changes_table(rows: Sequence[Decided], bundle: str, *, every: bool = False) -> str:
    """The decisions another bundle changes (``every``: all of them), with the policies that
    determine each; every decision not made on the evidence as recorded is listed, and says so."""
    shown = [r for r in rows if every or r.changed or not r.as_recorded]
    lines: list[tuple[str, ...]] = [("candidate", "tool", "resource", "recorded", "counterfactual",
                                     "determining (+ now, - no longer)", "evidence")]
    for r in shown:
        moved = [f"+{p}" for p in r.entered] + [f"-{p}" for p in r.left]
        lines.append((_short(r.intent_id), r.tool, r.resource, _outcome(r.recorded, r.recorded_reasons),
                      "undecidable" if r.undecidable else _outcome(r.outcome, r.reasons),
                      ", ".join(moved or r.determining) or "-", r.grounds))
    why = [f"  {_short(r.intent_id)}  {'; '.join(r.notes)}" for r in shown if r.notes and not r.undecidable]
    return summary(rows, bundle) + ("\n" + _columns(lines) if shown else "") + (
        "\nnot as recorded, because:\n" + "\n".join(why) if why else "")


def summary(rows: Sequence[Decided], bundle: str) -> str:
    """How many decisions change, how many stood on evidence not as recorded and on what
    instead (in words), how many are undecidable."""
    decided = [r for r in rows if not r.undecidable]
    head = f"{sum(r.changed for r in decided)} of {len(decided)} recorded decisions change under {bundle}"
    apart = [r for r in decided if not r.as_recorded]
    if apart:
        instead = Counter(words for r in apart for words in r.apart)
        head += (f"; {len(apart)} of the {len(decided)} decided on evidence not as recorded: "
                 + "; ".join(f"{words} ({n} decision{'s' if n > 1 else ''})" for words, n in instead.items()))
    if len(decided) < len(rows):
        head += f"; {len(rows) - len(decided)} undecidable (no evidence), not counted"
    return head


def _outcome(outcome: str, reasons: Sequence[str]) -> str:
    shown = [r for r in reasons if r != "policy.approval-required"]
    return outcome + (f" ({', '.join(shown)})" if shown else "")


def _columns(lines: Sequence[Sequence[str]]) -> str:
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
                     for line in lines)
