"""A run's history as policy facts: what it has done and seen, folded from the record.

Policy decides each call on the run's history as well as on current facts: a run that
read a mail (results from outside) and then sends money to an account nobody gave it, a
run that has published ten times this hour, a run whose payments add up. The history is
kept as small documents (this module's ``RunRecord`` and ``Tally``), changed by pure
functions here and stored by the history port (``lockgate.runtime.ports.history``):

- **admitted**: policy allowed an intent, or sent it to a reviewer. It is *held* in the
  run's record and in each window's tally at once (in the same compare-and-set as the
  read it was decided on), so two calls decided at the same moment see each other;
- **authorized**: the final gate let it go to its adapter. From then on what it reads may
  have entered the run: an ``outside_results`` capability marks the run untrusted, a read
  adds its data classes, a write its destinations, an approved intent an approval. This
  is written *before* the order is sent, so nothing the model can have seen is missing;
- **ended**, from the record: a completed effect moves from held to executed; one that
  did not happen is given back (and counted as refused when policy, a reviewer, the gate
  or the remote system refused it).

The history may count an effect that in the end did not happen (a crash between
admission and its record), never miss one that did.

What a policy reads is ``HistoryFacts.context()``, under ``context.history``
(``deploy/policies/lockgate.cedarschema`` declares its shape); the deciding intent's own
hold is never in its own facts.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from lockgate.contracts.capability import EffectClass

#: The effect classes, in the order the facts list them.
CLASSES: tuple[str, ...] = tuple(e.value for e in EffectClass)
#: The windows a run's history counts in besides the run itself: scope and length.
WINDOWS: Mapping[str, tuple[str, float]] = {
    "actor_hour": ("actor", 3600.0),
    "actor_day": ("actor", 86400.0),
    "tenant_hour": ("tenant", 3600.0),
    "tenant_day": ("tenant", 86400.0),
}
#: The most names a record keeps in each of its sets (the first ones stay).
MAX_NAMES = 256
#: The most one effect adds to a total (``amount_of``): a whole number a float holds exactly.
MAX_AMOUNT = 2**53
#: The most a window's total reads as: past it, any amount added in a policy stays within
#: Cedar's 64-bit integers (a sum that overflowed would be an evaluation error).
MAX_TOTAL = 2**62
#: Intent ids a record or tally remembers having settled (redelivered ends count once).
_RECENT = 256
#: Outcomes of an intent's end that are refusals (by policy, a reviewer, the gate, the remote system).
REFUSED = "refused"
EXECUTED = "executed"
NOTHING = "nothing"


class Held(msgspec.Struct, frozen=True):
    """One admitted intent whose outcome is not known yet."""

    capability: str
    effect_class: str
    amount: int = 0


def _counts() -> dict[str, int]:
    return dict.fromkeys(CLASSES, 0)


class Tally(msgspec.Struct, kw_only=True):
    """Effects counted in one window (or the whole run), by class, and their amounts.

    ``held`` are admitted and not yet ended: they count until they end without effect.
    """

    counts: dict[str, int] = msgspec.field(default_factory=_counts)
    amount: int = 0
    held: dict[str, Held] = msgspec.field(default_factory=dict)
    settled: list[str] = msgspec.field(default_factory=list)


class RunRecord(msgspec.Struct, kw_only=True):
    """What one run has done and seen: the document behind its ``HistoryFacts``."""

    tally: Tally = msgspec.field(default_factory=Tally)
    refused: dict[str, int] = msgspec.field(default_factory=_counts)
    executed_capabilities: list[str] = msgspec.field(default_factory=list)
    refused_capabilities: list[str] = msgspec.field(default_factory=list)
    data_classes_read: list[str] = msgspec.field(default_factory=list)
    untrusted_from: list[str] = msgspec.field(default_factory=list)
    destinations: list[str] = msgspec.field(default_factory=list)
    approvals: int = 0
    authorized: list[str] = msgspec.field(default_factory=list)


@dataclass(frozen=True)
class Window:
    """A window's counts as a policy reads them (the deciding intent's own hold left out)."""

    counts: Mapping[str, int]
    amount: int

    @classmethod
    def of(cls, tally: Tally | None, exclude: str = "") -> Window:
        """The tally's executed effects plus its held ones, but ``exclude``'s."""
        if tally is None:
            return EMPTY_WINDOW
        counts = dict(tally.counts)
        amount = tally.amount
        for intent_id, held in tally.held.items():
            if intent_id != exclude:
                counts[held.effect_class] = counts.get(held.effect_class, 0) + 1
                amount += held.amount
        return cls(counts, amount)

    def context(self) -> dict[str, int]:
        """``{effects, read, derive, write, publish, destroy, amount}``."""
        return {"effects": sum(self.counts.get(c, 0) for c in CLASSES),
                **{c: self.counts.get(c, 0) for c in CLASSES}, "amount": min(self.amount, MAX_TOTAL)}


EMPTY_WINDOW = Window(_counts(), 0)


@dataclass(frozen=True)
class HistoryFacts:
    """A run's history as of one decision, as ``context.history`` gives it to Cedar."""

    executed: frozenset[str] = frozenset()
    refused: frozenset[str] = frozenset()
    refused_counts: Mapping[str, int] = field(default_factory=_counts)
    data_classes_read: frozenset[str] = frozenset()
    untrusted_from: frozenset[str] = frozenset()
    destinations: frozenset[str] = frozenset()
    approvals: int = 0
    run: Window = EMPTY_WINDOW
    windows: Mapping[str, Window] = field(default_factory=dict)

    @classmethod
    def of(cls, record: RunRecord | None, windows: Mapping[str, Tally | None] | None = None, *,
           exclude: str = "") -> HistoryFacts:
        """The facts of ``record`` and the window tallies, leaving ``exclude``'s hold out."""
        if record is None:
            record = RunRecord()
        return cls(
            executed=frozenset(record.executed_capabilities),
            refused=frozenset(record.refused_capabilities),
            refused_counts=dict(record.refused),
            data_classes_read=frozenset(record.data_classes_read),
            untrusted_from=frozenset(record.untrusted_from),
            destinations=frozenset(record.destinations),
            approvals=record.approvals,
            run=Window.of(record.tally, exclude),
            windows={name: Window.of(tally, exclude) for name, tally in (windows or {}).items()},
        )

    @classmethod
    def from_context(cls, context: Mapping[str, Any]) -> HistoryFacts:
        """The facts a ``context.history`` was made of (``context()``'s inverse): a decision's
        recorded history, read back for a counterfactual on the history it read.

        What a context does not hold reads as none (an older record, a part left out).
        """
        def names(key: str) -> frozenset[str]:
            value = context.get(key)
            return frozenset(str(v) for v in value) if isinstance(value, list) else frozenset()

        def window(key: str) -> Window:
            value = context.get(key)
            counts = value if isinstance(value, Mapping) else {}
            return Window({c: int(counts.get(c, 0)) for c in CLASSES}, int(counts.get("amount", 0)))

        refused = context.get("refused_count")
        return cls(
            executed=names("executed"), refused=names("refused"),
            refused_counts={c: int(refused.get(c, 0)) for c in CLASSES}
            if isinstance(refused, Mapping) else _counts(),
            data_classes_read=names("data_classes_read"), untrusted_from=names("untrusted_from"),
            destinations=names("destinations"), approvals=int(context.get("approvals", 0)),
            run=window("run"), windows={name: window(name) for name in WINDOWS},
        )

    def context(self, only: frozenset[str] | None = None) -> dict[str, Any]:
        """``context.history``: sets as sorted lists, counts by class, the windows; ``only``:
        just the attributes named (what a bundle's policies read: Cedar's cost grows with the
        size of the context it is handed)."""
        whole = self._whole()
        return whole if only is None else {k: v for k, v in whole.items() if k in only}

    def _whole(self) -> dict[str, Any]:
        executed = self.run.context()
        return {
            "executed": sorted(self.executed),
            "refused": sorted(self.refused),
            "executed_count": {c: executed[c] for c in CLASSES},
            "refused_count": {c: self.refused_counts.get(c, 0) for c in CLASSES},
            "data_classes_read": sorted(self.data_classes_read),
            "untrusted": bool(self.untrusted_from),
            "untrusted_from": sorted(self.untrusted_from),
            "destinations": sorted(self.destinations),
            "approvals": self.approvals,
            "run": executed,
            **{name: self.windows.get(name, EMPTY_WINDOW).context() for name in WINDOWS},
        }


NO_HISTORY = HistoryFacts()


# -- the changes -------------------------------------------------------------------------


def hold(tally: Tally, intent_id: str, held: Held) -> Tally:
    """``tally`` with an admitted intent held (once, however often told)."""
    if intent_id in tally.held or intent_id in tally.settled:
        return tally
    return msgspec.structs.replace(tally, held={**tally.held, intent_id: held})


def settle(tally: Tally, intent_id: str, ended: str) -> Tally:
    """``tally`` with an intent's end: executed counts, anything else is given back."""
    if intent_id in tally.settled:
        return tally
    held = tally.held.get(intent_id)
    rest = {k: v for k, v in tally.held.items() if k != intent_id}
    counts, amount = dict(tally.counts), tally.amount
    if held is not None and ended == EXECUTED:
        counts[held.effect_class] = counts.get(held.effect_class, 0) + 1
        amount += held.amount
    return Tally(counts=counts, amount=amount, held=rest,
                 settled=[*tally.settled, intent_id][-_RECENT:])


def _added(names: list[str], new: Iterable[str]) -> list[str]:
    out = list(names)
    for name in new:
        if name not in out and len(out) < MAX_NAMES:
            out.append(name)
    return out


def unhold(tally: Tally, intent_id: str) -> Tally:
    """``tally`` without an intent's hold, as if it had not been admitted: a decision made
    again on a moved history takes back what it held (it may be held again, unlike an end)."""
    if intent_id not in tally.held:
        return tally
    return msgspec.structs.replace(tally, held={k: v for k, v in tally.held.items() if k != intent_id})


def admit_in_run(record: RunRecord, intent_id: str, held: Held) -> RunRecord:
    """The run's record with an admitted intent held (the same record when it was)."""
    tally = hold(record.tally, intent_id, held)
    return record if tally is record.tally else msgspec.structs.replace(record, tally=tally)


def unhold_in_run(record: RunRecord, intent_id: str) -> RunRecord:
    """The run's record without an intent's hold (``unhold``)."""
    tally = unhold(record.tally, intent_id)
    return record if tally is record.tally else msgspec.structs.replace(record, tally=tally)


@dataclass(frozen=True)
class Authorized:
    """What the final gate lets through, as the history notes it."""

    intent_id: str
    capability: str
    effect_class: str
    outside_results: bool
    data_classes: tuple[str, ...]
    destinations: tuple[str, ...]
    approved: bool


def authorize_in_run(record: RunRecord, authorized: Authorized) -> RunRecord:
    """The run's record once the gate let ``authorized`` go (once per intent)."""
    if authorized.intent_id in record.authorized:
        return record
    reads = authorized.effect_class in (EffectClass.READ, EffectClass.DERIVE)
    return msgspec.structs.replace(
        record,
        untrusted_from=_added(record.untrusted_from,
                              [authorized.capability] if authorized.outside_results else []),
        data_classes_read=_added(record.data_classes_read, authorized.data_classes if reads else ()),
        destinations=_added(record.destinations, () if reads else authorized.destinations),
        approvals=record.approvals + (1 if authorized.approved else 0),
        authorized=[*record.authorized, authorized.intent_id][-_RECENT:],
    )


def end_in_run(record: RunRecord, intent_id: str, capability: str, effect_class: str,
               ended: str) -> RunRecord:
    """The run's record once an intent ended: executed, refused, or nothing happened."""
    if intent_id in record.tally.settled:
        return record
    refused = dict(record.refused)
    refused_capabilities = record.refused_capabilities
    executed_capabilities = record.executed_capabilities
    if ended == REFUSED:
        refused[effect_class] = refused.get(effect_class, 0) + 1
        refused_capabilities = _added(refused_capabilities, [capability])
    elif ended == EXECUTED:
        executed_capabilities = _added(executed_capabilities, [capability])
    return msgspec.structs.replace(
        record, tally=settle(record.tally, intent_id, ended), refused=refused,
        refused_capabilities=refused_capabilities, executed_capabilities=executed_capabilities)


# -- what one effect is ------------------------------------------------------------------


def destinations_of(arguments: Mapping[str, Any], names: Iterable[str]) -> tuple[str, ...]:
    """The destinations the named arguments hold: each a text or a list of texts."""
    out: list[str] = []
    for name in names:
        value = arguments.get(name)
        values = value if isinstance(value, list | tuple) else [value]
        out += [str(v) for v in values if v is not None and str(v) != ""]
    return tuple(dict.fromkeys(out))


def amount_of(arguments: Mapping[str, Any], name: str | None) -> int:
    """The amount the named argument holds, as a whole number that never lowers a total.

    Absent (no argument named, or ``None``): ``0``. A negative number adds nothing (``0``):
    a refund does not buy room under a spending cap. A fraction counts as the next whole
    number up, so that the run's total is never less than what was paid. Anything else
    that is not a finite number of at most ``MAX_AMOUNT`` (a bool, a text that reads as no
    number, NaN, infinity, a number past the cap) counts as ``MAX_AMOUNT``: what cannot
    be read as an amount is taken as the largest, so a cap refuses it rather than lets it by.
    """
    if name is None:
        return 0
    value = arguments.get(name)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return MAX_AMOUNT
    try:
        number = float(value) if not isinstance(value, int) else value
    except ValueError:
        return MAX_AMOUNT
    if isinstance(number, float) and not math.isfinite(number):
        return MAX_AMOUNT
    if number <= 0:
        return 0
    return min(math.ceil(number), MAX_AMOUNT)


#: What separates the words of a trusted value: white space and the punctuation around
#: addresses in a text (``"Bob" <bob@example.com>, (alice@example.com); ...``).
_SEPARATORS = re.compile(r"""[\s,;<>()\[\]{}"'`]+""")
#: What may end a word without being part of it (a sentence's full stop after an address).
_TRAILING = ".:!?"


def _words(text: str) -> list[str]:
    """``text``'s words, without case, for comparing destinations whole."""
    words = (w.rstrip(_TRAILING) for w in _SEPARATORS.split(text.casefold()))
    return [w for w in words if w]


def _names(words: list[str], given: list[str]) -> bool:
    """Whether ``words`` occur in ``given`` as a run of whole words."""
    n = len(words)
    return n > 0 and any(given[i:i + n] == words for i in range(len(given) - n + 1))


def untrusted(destinations: Iterable[str], trusted: Iterable[str]) -> tuple[str, ...]:
    """The destinations the run's trusted context does not give: those that occur in none
    of its values as whole words (compared without case; a task's text names them).

    Whole words, not a part of one: a task that names ``alice@example.com`` does not name
    ``e@example.com`` (an address an attacker may hold), nor does ``IBAN DE89 3704`` name
    ``DE89 37``. A destination of several words must occur as those words in a row.
    """
    given = [_words(t) for t in trusted if t]
    return tuple(d for d in destinations if not any(_names(_words(d), g) for g in given))
