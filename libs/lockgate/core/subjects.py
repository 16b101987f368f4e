"""Subjects of the requests that cross the edge, each family with a builder, a parser and a wildcard.

Commands from people and agent runtimes end in the **principal**: the NATS user that
sends them. The broker lets a user publish only subjects that end in its own name
(``lockgate.runtime.roles``), so the service that answers reads who asked from the
subject and never from the payload.
"""

from __future__ import annotations

from typing import NamedTuple

from lockgate.core.ids import is_subject_token


class NotACommandSubject(ValueError):
    """A subject that does not belong to the family it was parsed as."""


def _tokens(*values: str) -> None:
    for value in values:
        if not is_subject_token(value):
            raise ValueError(f"{value!r} is not a subject token ([A-Za-z0-9_-]{{1,64}})")


def _split(subject: str, family: tuple[str, ...], count: int) -> list[str]:
    parts = subject.split(".")
    head = list(family)
    if len(parts) != count or parts[: len(head)] != head:
        raise NotACommandSubject(f"{subject!r} is not a {'.'.join(family)} subject")
    if not all(is_subject_token(p) for p in parts[len(head):]):
        raise NotACommandSubject(f"{subject!r} has a malformed token")
    return parts


# -- runs, turns, candidates, responses ---------------------------------------------------


def run_open(tenant: str) -> str:
    """``lg.run.<tenant>.open``: the trusted host opens a run."""
    _tokens(tenant)
    return f"lg.run.{tenant}.open"


RUN_OPEN_ALL = "lg.run.*.open"


def parse_run_open(subject: str) -> str:
    """The tenant of a run-open subject."""
    parts = subject.split(".")
    if len(parts) != 4 or parts[:2] != ["lg", "run"] or parts[3] != "open":
        raise NotACommandSubject(f"{subject!r} is not a run-open subject")
    return parts[2]


def turn(tenant: str, run_id: str) -> str:
    """``lg.turn.<tenant>.<run>``: an agent runtime opens a turn."""
    _tokens(tenant, run_id)
    return f"lg.turn.{tenant}.{run_id}"


TURN_ALL = "lg.turn.*.*"


def parse_turn(subject: str) -> tuple[str, str]:
    """(tenant, run) of a turn subject."""
    parts = subject.split(".")
    if len(parts) != 4 or parts[:2] != ["lg", "turn"]:
        raise NotACommandSubject(f"{subject!r} is not a turn subject")
    return parts[2], parts[3]


def propose(tenant: str, run_id: str) -> str:
    """``lg.propose.<tenant>.<run>``: where candidates are published (stream LG_CANDIDATES)."""
    _tokens(tenant, run_id)
    return f"lg.propose.{tenant}.{run_id}"


PROPOSE_ALL = "lg.propose.>"


def response(tenant: str, run_id: str, candidate_id: str) -> str:
    """``lg.response.<tenant>.<run>.<candidate>``: what the model may learn of a candidate."""
    _tokens(tenant, run_id, candidate_id)
    return f"lg.response.{tenant}.{run_id}.{candidate_id}"


RESPONSE_ALL = "lg.response.>"


def responses_of(tenant: str) -> str:
    """Every response of one tenant."""
    _tokens(tenant)
    return f"lg.response.{tenant}.>"


# -- commands on intents, ending in the principal -----------------------------------------


class Command(NamedTuple):
    """The parts of a command subject: whose intent, and who asks."""

    tenant: str
    intent_id: str
    principal: str
    run_id: str = ""


def withdraw(tenant: str, run_id: str, intent_id: str, principal: str) -> str:
    """``lg.withdraw.<tenant>.<run>.<intent>.<principal>``: stop a candidate by its state."""
    _tokens(tenant, run_id, intent_id, principal)
    return f"lg.withdraw.{tenant}.{run_id}.{intent_id}.{principal}"


WITHDRAW_ALL = "lg.withdraw.*.*.*.*"


def parse_withdraw(subject: str) -> Command:
    """The parts of a withdraw subject."""
    _, _, tenant, run_id, intent_id, principal = _split(subject, ("lg", "withdraw"), 6)
    return Command(tenant, intent_id, principal, run_id)


def review(tenant: str, intent_id: str, verb: str, principal: str) -> str:
    """``lg.review.<tenant>.<intent>.<verb>.<principal>`` (verb: ``show`` or ``decide``)."""
    _tokens(tenant, intent_id, principal)
    if verb not in REVIEW_VERBS:
        raise ValueError(f"review verb {verb!r} is not one of {REVIEW_VERBS}")
    return f"lg.review.{tenant}.{intent_id}.{verb}.{principal}"


REVIEW_VERBS = ("show", "decide")


def review_all(verb: str) -> str:
    """Every review request with ``verb``."""
    return f"lg.review.*.*.{verb}.*"


def parse_review(subject: str) -> Command:
    """The parts of a review subject."""
    _, _, tenant, intent_id, verb, principal = _split(subject, ("lg", "review"), 6)
    if verb not in REVIEW_VERBS:
        raise NotACommandSubject(f"{subject!r}: unknown review verb")
    return Command(tenant, intent_id, principal)


def resolve(tenant: str, intent_id: str, principal: str) -> str:
    """``lg.reconcile.<tenant>.<intent>.resolve.<principal>``: an operator settles an outcome."""
    _tokens(tenant, intent_id, principal)
    return f"lg.reconcile.{tenant}.{intent_id}.resolve.{principal}"


RESOLVE_ALL = "lg.reconcile.*.*.resolve.*"


def parse_resolve(subject: str) -> Command:
    """The parts of a resolve subject."""
    _, _, tenant, intent_id, verb, principal = _split(subject, ("lg", "reconcile"), 6)
    if verb != "resolve":
        raise NotACommandSubject(f"{subject!r} is not a resolve subject")
    return Command(tenant, intent_id, principal)


# -- what an adapter may read of the record -----------------------------------------------


def record(capability: str) -> str:
    """``lg.record.<capability>``: an adapter asks for the record of an intent of its capability."""
    return f"lg.record.{capability}"


RECORD_ALL = "lg.record.>"
_RECORD = "lg.record."


def parse_record(subject: str) -> str:
    """The capability a record request names."""
    capability = subject[len(_RECORD):] if subject.startswith(_RECORD) else ""
    if not capability or not all(is_subject_token(p) for p in capability.split(".")):
        raise NotACommandSubject(f"{subject!r} is not a record subject")
    return capability


# -- liveness -----------------------------------------------------------------------------


def status(name: str) -> str:
    """``lg.status.<name>``: where the process called ``name`` answers (``adapter.casenotes``)."""
    return f"lg.status.{name}"


STATUS_ALL = "lg.status.>"
