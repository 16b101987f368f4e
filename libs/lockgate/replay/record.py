"""What a replay replays: recorded candidates, read from the views' permanent record.

The views keep every event of every intent (``lg_events``), archived or not, so a
candidate's whole history is there: its ``CandidateReceived`` or ``CandidateRejected``
(the raw argument text and the provider's item, as received), what normalization,
policy and the reviewers made of it, and what the world answered. A replay reads it
and nothing else of the deployment's state, except the two things the record does not
hold (``Deployment``): the context each run was opened with and the capabilities'
contracts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

from lockgate.contracts.capability import CapabilityContract
from lockgate.contracts.messages import RunContext
from lockgate.core.errors import LockgateError
from lockgate.intent.aggregate import EffectIntent, Event
from lockgate.intent.codec import decode_event, fold
from lockgate.intent.events import CandidateReceived, CandidateRejected
from lockgate.views.rows import IntentRow, iso, recorded

if TYPE_CHECKING:
    from lockgate.views.store import Views

#: Intents a selection reads at most (a replay is a question about a slice of history).
MAX_CANDIDATES = 5000


class ReplayError(LockgateError):
    """A replay that cannot be made: nothing selected, a selection that is not one."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="replay.invalid")


class DeploymentUnreachable(LockgateError):
    """The deployment a replay reads runs and contracts from did not let it read them."""

    retryable = True

    def __init__(self, url: str, why: str) -> None:
        super().__init__(f"replay: cannot read runs and contracts at {url} as the replay user ({why}); "
                         "--offline replays without the running system", code="replay.deployment-unreachable")
        self.url = url
        self.why = why


def utc_text(moment: str) -> str:
    """``moment`` (ISO-8601; UTC when it names no offset) as the views write times.

    Raises:
        ReplayError: it is no ISO-8601 time.
    """
    try:
        parsed = datetime.fromisoformat(moment)
    except ValueError as exc:
        raise ReplayError(f"{moment!r} is not an ISO-8601 time") from exc
    return iso(parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC))


@dataclass(frozen=True)
class Selection:
    """Which recorded candidates to replay: a run, a time range, or intent ids.

    Times are ISO-8601 UTC text as the views write them (``utc_text``), compared with the
    intents' ``created_at`` (``since`` inclusive, ``until`` exclusive).
    """

    run_id: str = ""
    tenant: str = ""
    since: str = ""
    until: str = ""
    intent_ids: tuple[str, ...] = ()

    def check(self) -> None:
        """Refuse an empty selection.

        Raises:
            ReplayError: it names no run, no time range and no intent.
        """
        if not (self.run_id or self.since or self.until or self.intent_ids):
            raise ReplayError("name a run, a time range (--since/--until) or intents (--intent)")

    def admits(self, row: IntentRow) -> bool:
        """Whether ``row`` is in the selection."""
        if self.tenant and row.tenant != self.tenant:
            return False
        if self.run_id and row.run_id != self.run_id:
            return False
        if self.intent_ids and row.intent_id not in self.intent_ids:
            return False
        if self.since and row.created_at < self.since:
            return False
        return not (self.until and row.created_at >= self.until)


@dataclass(frozen=True)
class Candidate:
    """One recorded candidate: its intent's events, in order, as the record holds them."""

    intent_id: str
    tenant: str
    sequence: int
    """The stream position of its first event: the order candidates are replayed in."""
    events: tuple[Event, ...]

    @property
    def first(self) -> CandidateReceived | CandidateRejected | None:
        """Its first event, the candidate as intake recorded it (``None``: an archived stub)."""
        head = self.events[0] if self.events else None
        if isinstance(head, CandidateReceived | CandidateRejected):
            return head
        return None

    @property
    def received_at(self) -> datetime:
        """When intake recorded it."""
        return self.events[0].timestamp

    def of(self, cls: type[Event]) -> list[Event]:
        """Its events of one type, in order."""
        return [e for e in self.events if isinstance(e, cls)]

    def final(self) -> EffectIntent | None:
        """The intent as it ended (or stands) in the record."""
        return fold(self.events)


def candidates(views: Views, selection: Selection) -> list[Candidate]:
    """The recorded candidates ``selection`` names, in the order they were recorded.

    Raises:
        ReplayError: the selection is empty, or names more than ``MAX_CANDIDATES``.
    """
    selection.check()
    rows = _rows(views, selection)
    if len(rows) > MAX_CANDIDATES:
        raise ReplayError(f"{len(rows)} candidates selected; at most {MAX_CANDIDATES} replay at once")
    found = []
    for row in rows:
        events = views.events_of(row.intent_id)
        if not events:
            continue
        found.append(Candidate(
            intent_id=row.intent_id, tenant=row.tenant, sequence=events[0].sequence,
            events=tuple(decode_event(recorded(e)) for e in events)))
    found.sort(key=lambda c: c.sequence)
    return found


def _rows(views: Views, selection: Selection) -> list[IntentRow]:
    if selection.intent_ids:
        named = (views.intent(i) for i in dict.fromkeys(selection.intent_ids))
        return [r for r in named if r is not None and selection.admits(r)]
    rows: list[IntentRow] = []
    before: int | None = None
    while len(rows) <= MAX_CANDIDATES:
        page = views.intents(tenant=selection.tenant or None, run_id=selection.run_id or None,
                             before=before, limit=1000)
        if not page:
            break
        rows += [r for r in page if selection.admits(r)]
        before = page[-1].last_sequence
    return rows


class Deployment(Protocol):
    """What a replay needs of the deployment besides the record (``lockgate.replay.sources``)."""

    async def run(self, tenant: str, run_id: str) -> RunContext | None:
        """The context ``run_id`` was opened with (``None``: unknown)."""

    async def contract(self, capability: str) -> CapabilityContract | None:
        """The contract of ``capability`` (``None``: unknown)."""


@dataclass(frozen=True)
class Known:
    """A ``Deployment`` from what is at hand: runs and contracts given outright."""

    runs: dict[tuple[str, str], RunContext]
    contracts: dict[str, CapabilityContract]

    async def run(self, tenant: str, run_id: str) -> RunContext | None:
        """The run given for ``(tenant, run_id)``."""
        return self.runs.get((tenant, run_id))

    async def contract(self, capability: str) -> CapabilityContract | None:
        """The contract given for ``capability``."""
        return self.contracts.get(capability)


class Provenance(StrEnum):
    """Where a piece of a replay's evidence came from."""

    #: On the intent's record, or a copy the record proves is the one the decision read.
    RECORDED = "recorded"
    #: Declared in a fixture file (``--fixtures``).
    DECLARED = "declared"
    #: The running system's today, which the record cannot vouch for.
    CURRENT = "current"
    #: Compiled into lockgate (the demo worlds' contracts), only when asked for.
    BUILTIN = "built-in"
    #: Not on the record, and no source has it: decided without it (a decision that kept
    #: no history, under a bundle that reads it).
    ABSENT = "absent"


#: Each piece of evidence, from each source but the record, in the words a person reads.
_WORDS: dict[tuple[str, str], str] = {
    ("run", Provenance.CURRENT): "the run's context as the deployment's runs hold it today",
    ("run", Provenance.DECLARED): "the run's context declared in the fixture file",
    ("run", ""): "no run's context at all",
    ("contract", Provenance.CURRENT): "the contract registered today",
    ("contract", Provenance.DECLARED): "the contract declared in the fixture file",
    ("contract", Provenance.BUILTIN): "the contract compiled into lockgate",
    ("contract", ""): "no contract at all",
    ("history", Provenance.ABSENT): "no history on the record, decided without it",
}


def in_words(**pieces: str) -> tuple[str, ...]:
    """What each piece of evidence (``run=``, ``contract=``, ``history=``: its provenance)
    stood on, in words, for every piece not as recorded."""
    return tuple(_WORDS.get((piece, source), f"the {piece} as {source}")
                 for piece, source in pieces.items() if source != Provenance.RECORDED)


def grounds_of(**pieces: str) -> str:
    """The evidence of a decision in a sentence: ``as recorded``, or what it stood on instead."""
    apart = in_words(**pieces)
    return "as recorded" if not apart else "not as recorded: " + "; ".join(apart)


@dataclass(frozen=True)
class Sources:
    """What a replay reads besides the record, each source with the provenance it gives.

    Declared runs first, then the running system's (``None``: none was read), then the
    compiled-in contracts (``None``: not asked for). As a ``Deployment`` it answers what
    the first source that knows does.
    """

    declared: Known = field(default_factory=lambda: Known({}, {}))
    deployment: Deployment | None = None
    builtin: Known | None = None

    def _layers(self) -> list[tuple[Provenance, Deployment]]:
        layers: list[tuple[Provenance, Deployment]] = [(Provenance.DECLARED, self.declared)]
        if self.deployment is not None:
            layers.append((Provenance.CURRENT, self.deployment))
        if self.builtin is not None:
            layers.append((Provenance.BUILTIN, self.builtin))
        return layers

    async def found_run(self, tenant: str, run_id: str) -> tuple[RunContext, Provenance] | None:
        """The context ``run_id`` was opened with, and the source that had it."""
        for provenance, layer in self._layers():
            found = await layer.run(tenant, run_id)
            if found is not None:
                return found, provenance
        return None

    async def found_contract(self, capability: str) -> tuple[CapabilityContract, Provenance] | None:
        """The contract of ``capability``, and the source that had it."""
        for provenance, layer in self._layers():
            found = await layer.contract(capability)
            if found is not None:
                return found, provenance
        return None

    async def run_read_at(self, tenant: str, run_id: str, actor: str, at: datetime,
                          ) -> tuple[RunContext | None, str, str]:
        """The context of ``run_id`` a step taken ``at`` read, where it came from ("": nowhere),
        and a note when it is not the record's."""
        hit = await self.found_run(tenant, run_id)
        if hit is None:
            return None, "", f"no record of the context run {run_id} was opened with"
        run, source = hit
        if source is not Provenance.CURRENT:
            return run, source, f"run {run_id}'s context is the one {source}, not the deployment's"
        if run.actor == actor and run.opened_at <= at:
            # Runs are kept one entry per run: one written before the step, and not since,
            # is the very context the step read.
            return run, Provenance.RECORDED, ""
        return run, source, (f"run {run_id} was opened again at {run.opened_at.isoformat()}, after it: "
                             "today's context of it may not be the one it read")

    async def run(self, tenant: str, run_id: str) -> RunContext | None:
        """The first source's context of ``run_id``."""
        found = await self.found_run(tenant, run_id)
        return found[0] if found else None

    async def contract(self, capability: str) -> CapabilityContract | None:
        """The first source's contract of ``capability``."""
        found = await self.found_contract(capability)
        return found[0] if found else None


def demo_contracts() -> dict[str, CapabilityContract]:
    """The contracts the demo worlds declare in code, by name (``--builtin-contracts``)."""
    from lockgate.worlds.casenotes.adapter import CONTRACT
    from lockgate.worlds.items.adapter import DRAFT_CONTRACT, PUBLISH_CONTRACT

    return {c.name: c for c in (CONTRACT, DRAFT_CONTRACT, PUBLISH_CONTRACT)}
