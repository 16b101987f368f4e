"""The record's upkeep: refused reports, abandoned messages, and archival."""

from __future__ import annotations

from typing import ClassVar

from lockgate.contracts.vocabulary import ReportStage, Settles
from lockgate.intent.events.base import Created, Event


class ReportRefused(Event, frozen=True, kw_only=True):
    """The executor refused a report that did not prove it answers an order it received.

    Changes no state (it may follow a terminal one). ``attempt_id`` is empty and
    ``stage`` ``other`` when the report named none the record knows, so at most one
    is recorded per attempt, stage and reason however many forgeries arrive.
    """

    neutral: ClassVar[bool] = True
    attempt_id: str
    stage: ReportStage
    reason: str
    adapter: str


class ProcessingAbandoned(Event, frozen=True, kw_only=True):
    """A consumer gave up on a message about this intent after bounded failures.

    ``durable`` names the consumer, ``trigger`` the message (an event id, or the
    stream sequence), ``cause`` the last error (for operators, never shown to a
    model), ``deliveries`` how often it was delivered. Before any order could be out
    the intent ends refused (``candidate.unprocessable``); once one may be out, an
    operator decides (``needs_operator``), since the effect may have happened. A
    settled intent keeps its state: the event only says what was given up.
    """

    routed_by: ClassVar[str] = "settles"
    neutral: ClassVar[bool] = True  # it may follow a terminal state, and then changes nothing
    durable: str
    trigger: str
    cause: str
    deliveries: int

    #: What policy has to settle when this ends the intent (its route); set by
    #: ``next`` from the intent. Events recorded before it existed read as ``budget``.
    settles: Settles = Settles.BUDGET


class IntentArchived(Created, frozen=True, kw_only=True):
    """The intent's earlier events left the hot store; the views keep every one.

    The archiver appends it to an intent that ended, once the views hold all its
    events, and then purges the events before it. It stays in the stream as the
    intent's identity: a retried call id finds its intent (and its outcome) here,
    never a free id to record again. Folded alone it is the ended intent, as far as
    deciding needs it (who, which call, which bytes, how it ended); after the
    intent's events it changes nothing but marks the intent archived.
    """

    neutral: ClassVar[bool] = True
    tenant: str
    run_id: str
    turn_id: str
    call_id: str
    actor: str
    tool: str
    raw_digest: str
    raw_size_bytes: int
    catalogue_digest: str
    contract_revision: str
    candidate_digest: str
    state: str
    reason: str | None
    archived_versions: int
