"""Subjects and keys of the agent-facing protocol and the edge's commands, built and parsed in one place.

Every part that comes from a client is checked against the grammar before it becomes a
subject token or a key: nats-server closes the connection of a client that sends a
control line longer than ``max_control_line`` (4 KiB by default), and nats-py then
closes for good, so an unchecked name would not be refused, it would take the service
off the broker. Builders raise ``ValueError``; the propose parser never raises, the command parsers
raise ``NotACommandSubject``.

Commands from people and agent runtimes end in the **principal**: the NATS user that
sends them. The broker lets a user publish only subjects that end in its own name
(``lockgate.runtime.roles``), so the service that answers reads who asked from the
subject and never from the payload.
"""

from __future__ import annotations

from typing import NamedTuple

from lockgate.core.ids import is_capability_name, is_subject_token

#: Tenants and runs whose names start with this are Lockgate's own: ``open_run`` refuses
#: them, so a candidate recorded under one can never be mistaken for a client's.
RESERVED_PREFIX = "_"
#: Where a candidate is recorded whose subject names no valid tenant.
UNROUTABLE_TENANT = "_unroutable"
#: The run a candidate is recorded under when its subject names no valid run.
INVALID_RUN = "_invalid"

PROPOSE_ALL = "lg.propose.>"
RESPONSES_ALL = "lg.response.>"
RUN_OPEN_ALL = "lg.run.*.open"
RUN_CLOSE_ALL = "lg.run.*.close"
#: A run's lease (stream LG_LEASES): renewed while the run is used, ended by its close or
#: by the server when it is not renewed in time.
LEASE_ALL = "lg.lease.*.*"
TURN_ALL = "lg.turn.*.*"


def is_client_token(value: str) -> bool:
    """True when ``value`` may name a tenant, run or turn a client opens."""
    return is_subject_token(value) and not value.startswith(RESERVED_PREFIX)


def _token(value: str, what: str) -> str:
    if not is_subject_token(value):
        raise ValueError(f"{what} {value[:80]!r} is not a subject token")
    return value


def run_open_subject(tenant: str) -> str:
    """``lg.run.<tenant>.open``: the trusted host opens a run."""
    return f"lg.run.{_token(tenant, 'tenant')}.open"


def run_close_subject(tenant: str) -> str:
    """``lg.run.<tenant>.close``: the trusted host ends a run."""
    return f"lg.run.{_token(tenant, 'tenant')}.close"


def lease_subject(tenant: str, run_id: str) -> str:
    """``lg.lease.<tenant>.<run>``: the run's lease, one message (renewed, closed, or the
    server's marker when it ran out)."""
    return f"lg.lease.{_token(tenant, 'tenant')}.{_token(run_id, 'run id')}"


def turn_subject(tenant: str, run_id: str) -> str:
    """``lg.turn.<tenant>.<run>``: an agent runtime opens a turn."""
    return f"lg.turn.{_token(tenant, 'tenant')}.{_token(run_id, 'run id')}"


def propose_subject(tenant: str, run_id: str) -> str:
    """``lg.propose.<tenant>.<run>``: where a candidate is published (stream ``LG_CANDIDATES``)."""
    return f"lg.propose.{_token(tenant, 'tenant')}.{_token(run_id, 'run id')}"


class ProposeAddress(NamedTuple):
    """The tenant and run a candidate's subject names, or where it is recorded instead."""

    tenant: str
    run_id: str
    routable: bool
    """False when the subject named no valid tenant or run (the others are stand-ins)."""


def parse_propose_subject(subject: str) -> ProposeAddress:
    """Where a candidate published on ``subject`` belongs; never raises.

    The stream takes ``lg.propose.>``, so a publisher may add tokens or use any
    characters the server allows; such a candidate is still recorded, under
    ``UNROUTABLE_TENANT`` or ``INVALID_RUN``.
    """
    parts = subject.split(".")
    tenant = parts[2] if len(parts) > 2 and is_client_token(parts[2]) else UNROUTABLE_TENANT
    if tenant != UNROUTABLE_TENANT and len(parts) == 4 and is_client_token(parts[3]):
        return ProposeAddress(tenant, parts[3], True)
    return ProposeAddress(tenant, INVALID_RUN, False)


def response_subject(tenant: str, run_id: str, candidate_id: str) -> str:
    """``lg.response.<tenant>.<run>.<candidate>``: what the model may learn of a candidate."""
    return (f"lg.response.{_token(tenant, 'tenant')}.{_token(run_id, 'run id')}."
            f"{_token(candidate_id, 'candidate id')}")


def run_key(tenant: str, run_id: str) -> str:
    """Key of a run in the runs bucket."""
    return f"{_token(tenant, 'tenant')}.{_token(run_id, 'run id')}"


def turn_key(tenant: str, run_id: str, turn_id: str) -> str:
    """Key of a turn's catalogue digest in the runs bucket."""
    return f"{run_key(tenant, run_id)}.turn.{_token(turn_id, 'turn id')}"


def refused_key(tenant: str, run_id: str, turn_id: str, tool: str) -> str:
    """Key of the latest refused candidate of ``tool`` in a turn (its intent id): the
    predecessor a later call of the same tool in the turn follows."""
    return f"{turn_key(tenant, run_id, turn_id)}.refused.{capability_key(tool)}"


def done_key(tenant: str, run_id: str, capability: str) -> str:
    """Key marking that ``capability`` executed in a run (what ``Offer.after`` asks)."""
    return f"{run_key(tenant, run_id)}.done.{capability_key(capability)}"


def capability_key(name: str) -> str:
    """Key of a capability's registration in ``LG_CAPABILITIES``: its name, checked."""
    if not is_capability_name(name):
        raise ValueError(f"{name[:80]!r} is not a capability name")
    return name


def responses_of(tenant: str) -> str:
    """Every model-facing response of one tenant."""
    return f"lg.response.{_token(tenant, 'tenant')}.>"


def responses_of_run(tenant: str, run_id: str) -> str:
    """Every model-facing response of one run."""
    return f"lg.response.{_token(tenant, 'tenant')}.{_token(run_id, 'run id')}.*"


class NotACommandSubject(ValueError):
    """A subject that does not belong to the family it was parsed as."""


def parse_run_open(subject: str) -> str:
    """The tenant of a run-open subject."""
    parts = subject.split(".")
    if len(parts) != 4 or parts[:2] != ["lg", "run"] or parts[3] != "open":
        raise NotACommandSubject(f"{subject[:200]!r} is not a run-open subject")
    return parts[2]


def parse_run_close(subject: str) -> str:
    """The tenant of a run-close subject."""
    parts = subject.split(".")
    if len(parts) != 4 or parts[:2] != ["lg", "run"] or parts[3] != "close":
        raise NotACommandSubject(f"{subject[:200]!r} is not a run-close subject")
    return parts[2]


def parse_lease(subject: str) -> tuple[str, str]:
    """The tenant and run of a lease subject."""
    parts = subject.split(".")
    if len(parts) != 4 or parts[:2] != ["lg", "lease"]:
        raise NotACommandSubject(f"{subject[:200]!r} is not a lease subject")
    return parts[2], parts[3]


def parse_turn(subject: str) -> tuple[str, str]:
    """(tenant, run) of a turn subject."""
    parts = subject.split(".")
    if len(parts) != 4 or parts[:2] != ["lg", "turn"]:
        raise NotACommandSubject(f"{subject[:200]!r} is not a turn subject")
    return parts[2], parts[3]


# -- commands on intents, ending in the principal -----------------------------------------


class Command(NamedTuple):
    """The parts of a command subject: whose intent, and who asks."""

    tenant: str
    intent_id: str
    principal: str
    run_id: str = ""


def _split(subject: str, family: tuple[str, ...], count: int) -> list[str]:
    parts = subject.split(".")
    if len(parts) != count or tuple(parts[: len(family)]) != family:
        raise NotACommandSubject(f"{subject[:200]!r} is not a {'.'.join(family)} subject")
    if not all(is_subject_token(p) for p in parts[len(family):]):
        raise NotACommandSubject(f"{subject[:200]!r} has a malformed token")
    return parts


def withdraw(tenant: str, run_id: str, intent_id: str, principal: str) -> str:
    """``lg.withdraw.<tenant>.<run>.<intent>.<principal>``: stop a candidate by its state."""
    return (f"lg.withdraw.{_token(tenant, 'tenant')}.{_token(run_id, 'run id')}."
            f"{_token(intent_id, 'intent id')}.{_token(principal, 'principal')}")


WITHDRAW_ALL = "lg.withdraw.*.*.*.*"


def withdraw_as(user: str) -> str:
    """Every withdrawal ``user`` may ask for (in any tenant and run: a service's grant)."""
    return f"lg.withdraw.*.*.*.{_token(user, 'user')}"


def parse_withdraw(subject: str) -> Command:
    """The parts of a withdraw subject."""
    _, _, tenant, run_id, intent_id, principal = _split(subject, ("lg", "withdraw"), 6)
    return Command(tenant, intent_id, principal, run_id)


REVIEW_VERBS = ("show", "decide", "edit")


def review(tenant: str, intent_id: str, verb: str, principal: str) -> str:
    """``lg.review.<tenant>.<intent>.<verb>.<principal>`` (verb: ``show``, ``decide``, ``edit``)."""
    if verb not in REVIEW_VERBS:
        raise ValueError(f"review verb {verb!r} is not one of {REVIEW_VERBS}")
    return (f"lg.review.{_token(tenant, 'tenant')}.{_token(intent_id, 'intent id')}.{verb}."
            f"{_token(principal, 'principal')}")


def review_all(verb: str) -> str:
    """Every review request with ``verb``."""
    return f"lg.review.*.*.{verb}.*"


def parse_review(subject: str) -> Command:
    """The parts of a review subject."""
    _, _, tenant, intent_id, verb, principal = _split(subject, ("lg", "review"), 6)
    if verb not in REVIEW_VERBS:
        raise NotACommandSubject(f"{subject[:200]!r}: unknown review verb")
    return Command(tenant, intent_id, principal)


def resolve(tenant: str, intent_id: str, principal: str) -> str:
    """``lg.reconcile.<tenant>.<intent>.resolve.<principal>``: an operator settles an outcome."""
    return (f"lg.reconcile.{_token(tenant, 'tenant')}.{_token(intent_id, 'intent id')}.resolve."
            f"{_token(principal, 'principal')}")


RESOLVE_ALL = "lg.reconcile.*.*.resolve.*"


def parse_resolve(subject: str) -> Command:
    """The parts of a resolve subject."""
    _, _, tenant, intent_id, verb, principal = _split(subject, ("lg", "reconcile"), 6)
    if verb != "resolve":
        raise NotACommandSubject(f"{subject[:200]!r} is not a resolve subject")
    return Command(tenant, intent_id, principal)


# -- an adapter's claim of a send boundary -------------------------------------------------


def claim(capability: str) -> str:
    """``lg.claim.<capability>``: an adapter asks to cross the send boundary of an order it holds."""
    return f"lg.claim.{capability_key(capability)}"


CLAIM_ALL = "lg.claim.>"
_CLAIM = "lg.claim."


def parse_claim(subject: str) -> str:
    """The capability a claim names."""
    capability = subject[len(_CLAIM):] if subject.startswith(_CLAIM) else ""
    if not is_capability_name(capability):
        raise NotACommandSubject(f"{subject[:200]!r} is not a claim subject")
    return capability


# -- between the executor and adapters ---------------------------------------------------

#: Execution orders (stream ``LG_EXEC``), ``lg.exec.<capability>``.
EXEC_ALL = "lg.exec.>"
#: Interruptions of running attempts, ``lg.interrupt.<capability>``.
INTERRUPT_ALL = "lg.interrupt.>"
#: Adapters' reports (stream ``LG_REPORTS``), ``lg.report.<capability>.<intent>``.
REPORT_ALL = "lg.report.>"

#: What services ask an adapter, ``lg.adapter.<capability>.<verb>``.
ADAPTER_VERBS = ("describe", "normalize", "facts", "query")
#: Capability names are dotted (``case.add_note``): a subject wildcard stands for one
#: token, so asking any capability one verb is matched for names of up to this many parts.
MAX_CAPABILITY_PARTS = 4


def _verb(verb: str) -> str:
    if verb not in ADAPTER_VERBS:
        raise ValueError(f"adapter verb {verb!r} is not one of {ADAPTER_VERBS}")
    return verb


def adapter(capability: str, verb: str) -> str:
    """``lg.adapter.<capability>.<verb>``: ask a capability's adapter (a verb of ``ADAPTER_VERBS``)."""
    return f"lg.adapter.{capability_key(capability)}.{_verb(verb)}"


def order(capability: str) -> str:
    """``lg.exec.<capability>``: where the executor publishes the capability's execution orders."""
    return f"lg.exec.{capability_key(capability)}"


def interrupt(capability: str) -> str:
    """``lg.interrupt.<capability>``: where the executor asks the capability's workers to stop."""
    return f"lg.interrupt.{capability_key(capability)}"


def report(capability: str, intent_id: str) -> str:
    """``lg.report.<capability>.<intent>``: where an adapter reports an intent's attempts."""
    return f"lg.report.{capability_key(capability)}.{_token(intent_id, 'intent id')}"


class ReportAddress(NamedTuple):
    """The capability and intent a report's subject names."""

    capability: str
    intent_id: str


def parse_report_subject(subject: str) -> ReportAddress | None:
    """The capability and intent of a report subject, or ``None`` when it is not one.

    Only the family is checked: whether the parts name the report's own capability and
    intent is the executor's question (it records a report that does not as refused).
    """
    parts = subject.split(".")
    if len(parts) < 4 or parts[:2] != ["lg", "report"]:
        return None
    return ReportAddress(".".join(parts[2:-1]), parts[-1])


def adapter_all(verb: str) -> tuple[str, ...]:
    """Every ``lg.adapter.<capability>.<verb>`` (one wildcard per capability name length)."""
    return tuple(
        "lg.adapter." + ".".join(["*"] * n) + f".{_verb(verb)}"
        for n in range(1, MAX_CAPABILITY_PARTS + 1)
    )


# -- liveness -----------------------------------------------------------------------------


def status(name: str) -> str:
    """``lg.status.<name>``: where the process called ``name`` answers (``adapter.casenotes``)."""
    return f"lg.status.{name}"


def adapter_status(name: str) -> str:
    """``lg.status.adapter.<name>``: where an adapter process, or one of its capabilities, answers.

    ``name`` is the process's name or a capability's (both may be dotted, so it is not
    checked as one token).
    """
    return status(f"adapter.{name}")


STATUS_ALL = "lg.status.>"
