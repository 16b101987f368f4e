"""Subjects and keys of the agent-facing protocol and the edge's commands, built and parsed in one place.

Each subject family is written once, as a ``Family``: its tokens in order, literal or a
named ``Param``. Its subjects, its permission and subscription patterns, its parser and its
AsyncAPI address are all read off that one definition, so a grant cannot drift from the
subject it grants (``lockgate.operations.roles`` builds every pattern here).

Every part that comes from a client is checked against the grammar before it becomes a
subject token or a key: nats-server closes the connection of a client that sends a
control line longer than ``max_control_line`` (4 KiB by default), and nats-py then
closes for good, so an unchecked name would not be refused, it would take the service
off the broker. Builders raise ``ValueError``; the propose parser never raises, the command parsers
raise ``NotACommandSubject``.

Commands from people and agent runtimes end in the **principal**: the NATS user that
sends them. The broker lets a user publish only subjects that end in its own name
(``lockgate.operations.roles``), so the service that answers reads who asked from the
subject and never from the payload.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Literal, NamedTuple

from lockgate.core.ids import is_capability_name, is_subject_token

#: The first token of every Lockgate subject.
ROOT = "lg"
#: A pattern's wildcard for one token.
ANY = "*"
#: A pattern's wildcard for every token from there on.
REST = ">"
#: The JetStream API as an account that imports it names it: its own ``$JS.API`` would
#: answer instead (``lockgate.operations.roles``).
IMPORTED_JS_API = f"{ROOT}.jsapi"

#: Tenants and runs whose names start with this are Lockgate's own: ``open_run`` refuses
#: them, so a candidate recorded under one can never be mistaken for a client's.
RESERVED_PREFIX = "_"
#: Where a candidate is recorded whose subject names no valid tenant.
UNROUTABLE_TENANT = "_unroutable"
#: The run a candidate is recorded under when its subject names no valid run.
INVALID_RUN = "_invalid"


def is_client_token(value: str) -> bool:
    """True when ``value`` may name a tenant, run or turn a client opens."""
    return is_subject_token(value) and not value.startswith(RESERVED_PREFIX)


def _token(value: str, what: str) -> str:
    if not is_subject_token(value):
        raise ValueError(f"{what} {value[:80]!r} is not a subject token")
    return value


def capability_key(name: str) -> str:
    """Key of a capability's registration in ``LG_CAPABILITIES``: its name, checked."""
    if not is_capability_name(name):
        raise ValueError(f"{name[:80]!r} is not a capability name")
    return name


# -- the grammar ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Param:
    """A named position of a subject family, and the values it takes.

    ``name`` is the keyword the family's builders take and the name in its AsyncAPI
    address (``{tenant}``); ``what`` names it in errors. A ``token`` is one subject
    token; a ``capability`` is a capability name and a ``dotted`` one any dotted tokens
    (a process's status name), so both may span several tokens; ``choices`` fixes the
    vocabulary (a verb).
    """

    name: str
    what: str
    kind: Literal["token", "capability", "dotted"] = "token"
    choices: tuple[str, ...] = ()

    def check(self, value: str) -> str:
        """``value``, when it may stand in this position.

        Raises:
            ValueError: it may not (the message names the position).
        """
        if self.choices:
            if value not in self.choices:
                raise ValueError(f"{self.what} {value!r} is not one of {self.choices}")
            return value
        if self.kind == "capability":
            return capability_key(value)
        if self.kind == "dotted":
            if not all(is_subject_token(part) for part in value.split(".")):
                raise ValueError(f"{self.what} {value[:80]!r} is not dotted subject tokens")
            return value
        return _token(value, self.what)

    def is_wildcard(self, value: str) -> bool:
        """True when ``value`` is a pattern's wildcard for this position: ``*``, or, where a
        value spans tokens, one ``*`` per token (``*.*``)."""
        if self.kind == "token":
            return value == ANY
        return all(part == ANY for part in value.split("."))


@dataclass(frozen=True)
class Family:
    """One subject family: its tokens in order, each literal or a ``Param``.

    At most one parameter spans several tokens, so a subject splits one way only.
    """

    tokens: tuple[str | Param, ...]

    def __post_init__(self) -> None:
        spanning = [p for p in self.params if p.kind != "token"]
        if len(spanning) > 1:
            raise ValueError(f"{self.address()}: more than one parameter spans tokens")
        if len({p.name for p in self.params}) != len(self.params):
            raise ValueError(f"{self.address()}: a parameter is named twice")

    @cached_property
    def params(self) -> tuple[Param, ...]:
        """The named positions, in order."""
        return tuple(t for t in self.tokens if isinstance(t, Param))

    @cached_property
    def _names(self) -> frozenset[str]:
        return frozenset(p.name for p in self.params)

    def _known(self, values: dict[str, str]) -> None:
        # Kept cheap: subjects are built on every message of the hot path.
        if not values.keys() <= self._names:
            unknown = set(values) - self._names
            raise ValueError(f"{self.address()} has no parameter {sorted(unknown)}")

    def subject(self, **values: str) -> str:
        """The subject with every parameter given, each checked.

        Raises:
            ValueError: a parameter is missing, unknown or not valid in its position.
        """
        self._known(values)
        out: list[str] = []
        for token in self.tokens:
            if isinstance(token, str):
                out.append(token)
            elif token.name in values:
                out.append(token.check(values[token.name]))
            else:
                raise ValueError(f"{self.address()}: no {token.what} given")
        return ".".join(out)

    def pattern(self, **values: str) -> str:
        """A permission or subscription pattern: each omitted parameter matches one token
        (``*``); a given one is checked, or is itself a wildcard (``*``; ``*.*`` where a
        value spans tokens).

        Raises:
            ValueError: a parameter is unknown or not valid in its position.
        """
        self._known(values)
        out: list[str] = []
        for token in self.tokens:
            if isinstance(token, str):
                out.append(token)
            else:
                out.append(self._given(token, values.get(token.name, ANY)))
        return ".".join(out)

    def tail(self, **values: str) -> str:
        """Every subject of the family that begins with the given parameters: the tokens up
        to the first parameter not given, then ``>``.

        Raises:
            ValueError: a parameter is unknown or not valid, given after one that is not, or
                every one is given (nothing is left for ``>``: that is ``subject``).
        """
        self._known(values)
        out: list[str] = []
        for i, token in enumerate(self.tokens):
            if isinstance(token, str):
                out.append(token)
            elif token.name in values:
                out.append(self._given(token, values[token.name]))
            else:
                later = {t.name for t in self.tokens[i:] if isinstance(t, Param)} & set(values)
                if later:
                    raise ValueError(f"{self.address()}: {sorted(later)} after an open {token.what}")
                return ".".join([*out, REST])
        raise ValueError(f"{self.address()}: every parameter given, nothing left for {REST!r}")

    def address(self, **values: str) -> str:
        """The AsyncAPI form (``lg.run.{tenant}.open``); a given parameter stands as its value
        (a verb).

        Raises:
            ValueError: a parameter is unknown or not valid in its position.
        """
        self._known(values)
        return ".".join(
            token if isinstance(token, str)
            else token.check(values[token.name]) if token.name in values
            else f"{{{token.name}}}"
            for token in self.tokens
        )

    def match(self, subject: str) -> dict[str, str] | None:
        """The parameters of ``subject`` by name, as sent (not checked), or ``None`` when it
        is not of this family (a literal token differs, or the count of tokens)."""
        parts = subject.split(".")
        extra = len(parts) - len(self.tokens)
        if extra < 0 or (extra > 0 and all(p.kind == "token" for p in self.params)):
            return None
        values: dict[str, str] = {}
        at = 0
        for token in self.tokens:
            width = 1 + extra if isinstance(token, Param) and token.kind != "token" else 1
            piece = parts[at:at + width]
            at += width
            if isinstance(token, str):
                if piece != [token]:
                    return None
            else:
                values[token.name] = ".".join(piece)
        return values

    @staticmethod
    def _given(param: Param, value: str) -> str:
        return value if param.is_wildcard(value) else param.check(value)


_TENANT = Param("tenant", "tenant")
_RUN = Param("run", "run id")
_INTENT = Param("intent", "intent id")
_CANDIDATE = Param("candidate", "candidate id")
_CAPABILITY = Param("capability", "capability", "capability")

REVIEW_VERBS = ("show", "decide", "edit")
#: What an operator may ask of the policy bundles (where they stand, a shadow, a promotion).
POLICY_VERBS = ("status", "shadow", "shadow-off", "promote")
#: What services ask an adapter, ``lg.adapter.<capability>.<verb>``.
ADAPTER_VERBS = ("describe", "normalize", "facts", "query")

#: The trusted host opens a run.
RUN_OPEN = Family((ROOT, "run", _TENANT, "open"))
#: The trusted host ends a run.
RUN_CLOSE = Family((ROOT, "run", _TENANT, "close"))
#: A run's lease (stream LG_LEASES): renewed while the run is used, ended by its close or
#: by the server when it is not renewed in time.
LEASE = Family((ROOT, "lease", _TENANT, _RUN))
#: An agent runtime opens a turn.
TURN = Family((ROOT, "turn", _TENANT, _RUN))
#: Where a candidate is published (stream ``LG_CANDIDATES``).
PROPOSE = Family((ROOT, "propose", _TENANT, _RUN))
#: What the model may learn of a candidate (stream ``LG_RESPONSES``).
RESPONSE = Family((ROOT, "response", _TENANT, _RUN, _CANDIDATE))
#: Stop a candidate by its state, asked by the user the last token names.
WITHDRAW = Family((ROOT, "withdraw", _TENANT, _RUN, _INTENT, Param("user", "principal")))
#: A reviewer shows, decides or edits a review.
REVIEW = Family((ROOT, "review", _TENANT, _INTENT, Param("verb", "review verb", choices=REVIEW_VERBS),
                 Param("reviewer", "principal")))
#: An operator settles an unknown outcome.
RESOLVE = Family((ROOT, "reconcile", _TENANT, _INTENT, "resolve", Param("operator", "principal")))
#: An operator manages the policy bundles (policy answers).
POLICY = Family((ROOT, "policy", Param("verb", "policy verb", choices=POLICY_VERBS),
                 Param("operator", "principal")))
#: An adapter asks to cross the send boundary of an order it holds.
CLAIM = Family((ROOT, "claim", _CAPABILITY))
#: Execution orders (stream ``LG_EXEC``).
EXEC = Family((ROOT, "exec", _CAPABILITY))
#: Interruptions of running attempts.
INTERRUPT = Family((ROOT, "interrupt", _CAPABILITY))
#: Adapters' reports (stream ``LG_REPORTS``).
REPORT = Family((ROOT, "report", _CAPABILITY, _INTENT))
#: What services ask a capability's adapter.
ADAPTER = Family((ROOT, "adapter", _CAPABILITY, Param("verb", "adapter verb", choices=ADAPTER_VERBS)))
#: Where a process answers how it is (``adapter.casenotes``: names may be dotted).
STATUS = Family((ROOT, "status", Param("name", "status name", "dotted")))

PROPOSE_ALL = PROPOSE.tail()
RESPONSES_ALL = RESPONSE.tail()
RUN_OPEN_ALL = RUN_OPEN.pattern()
RUN_CLOSE_ALL = RUN_CLOSE.pattern()
LEASE_ALL = LEASE.pattern()
TURN_ALL = TURN.pattern()


def run_open_subject(tenant: str) -> str:
    """``lg.run.<tenant>.open``: the trusted host opens a run."""
    return RUN_OPEN.subject(tenant=tenant)


def run_close_subject(tenant: str) -> str:
    """``lg.run.<tenant>.close``: the trusted host ends a run."""
    return RUN_CLOSE.subject(tenant=tenant)


def lease_subject(tenant: str, run_id: str) -> str:
    """``lg.lease.<tenant>.<run>``: the run's lease, one message (renewed, closed, or the
    server's marker when it ran out)."""
    return LEASE.subject(tenant=tenant, run=run_id)


def turn_subject(tenant: str, run_id: str) -> str:
    """``lg.turn.<tenant>.<run>``: an agent runtime opens a turn."""
    return TURN.subject(tenant=tenant, run=run_id)


def propose_subject(tenant: str, run_id: str) -> str:
    """``lg.propose.<tenant>.<run>``: where a candidate is published (stream ``LG_CANDIDATES``)."""
    return PROPOSE.subject(tenant=tenant, run=run_id)


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
    return RESPONSE.subject(tenant=tenant, run=run_id, candidate=candidate_id)


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


def responses_of(tenant: str) -> str:
    """Every model-facing response of one tenant."""
    return RESPONSE.tail(tenant=_token(tenant, "tenant"))


def responses_of_run(tenant: str, run_id: str) -> str:
    """Every model-facing response of one run."""
    return RESPONSE.pattern(tenant=_token(tenant, "tenant"), run=_token(run_id, "run id"))


class NotACommandSubject(ValueError):
    """A subject that does not belong to the family it was parsed as."""


def _parts(family: Family, subject: str) -> dict[str, str]:
    values = family.match(subject)
    if values is None:
        raise NotACommandSubject(f"{subject[:200]!r} is not a {family.address()} subject")
    return values


def parse_run_open(subject: str) -> str:
    """The tenant of a run-open subject."""
    return _parts(RUN_OPEN, subject)["tenant"]


def parse_run_close(subject: str) -> str:
    """The tenant of a run-close subject."""
    return _parts(RUN_CLOSE, subject)["tenant"]


def parse_lease(subject: str) -> tuple[str, str]:
    """The tenant and run of a lease subject."""
    values = _parts(LEASE, subject)
    return values["tenant"], values["run"]


def parse_turn(subject: str) -> tuple[str, str]:
    """(tenant, run) of a turn subject."""
    values = _parts(TURN, subject)
    return values["tenant"], values["run"]


# -- commands on intents, ending in the principal -----------------------------------------


class Command(NamedTuple):
    """The parts of a command subject: whose intent, and who asks."""

    tenant: str
    intent_id: str
    principal: str
    run_id: str = ""


def _command_parts(family: Family, subject: str) -> dict[str, str]:
    values = _parts(family, subject)
    if not all(is_subject_token(v) for v in values.values()):
        raise NotACommandSubject(f"{subject[:200]!r} has a malformed token")
    return values


def withdraw(tenant: str, run_id: str, intent_id: str, principal: str) -> str:
    """``lg.withdraw.<tenant>.<run>.<intent>.<principal>``: stop a candidate by its state."""
    return WITHDRAW.subject(tenant=tenant, run=run_id, intent=intent_id, user=principal)


WITHDRAW_ALL = WITHDRAW.pattern()


def withdraw_as(user: str) -> str:
    """Every withdrawal ``user`` may ask for (in any tenant and run: a service's grant)."""
    return WITHDRAW.pattern(user=_token(user, "user"))


def parse_withdraw(subject: str) -> Command:
    """The parts of a withdraw subject."""
    values = _command_parts(WITHDRAW, subject)
    return Command(values["tenant"], values["intent"], values["user"], values["run"])


def review(tenant: str, intent_id: str, verb: str, principal: str) -> str:
    """``lg.review.<tenant>.<intent>.<verb>.<principal>`` (verb: ``show``, ``decide``, ``edit``)."""
    return REVIEW.subject(tenant=tenant, intent=intent_id, verb=verb, reviewer=principal)


def review_all(verb: str) -> str:
    """Every review request with ``verb``."""
    return REVIEW.pattern(verb=verb)


def parse_review(subject: str) -> Command:
    """The parts of a review subject."""
    values = _command_parts(REVIEW, subject)
    if values["verb"] not in REVIEW_VERBS:
        raise NotACommandSubject(f"{subject[:200]!r}: unknown review verb")
    return Command(values["tenant"], values["intent"], values["reviewer"])


def resolve(tenant: str, intent_id: str, principal: str) -> str:
    """``lg.reconcile.<tenant>.<intent>.resolve.<principal>``: an operator settles an outcome."""
    return RESOLVE.subject(tenant=tenant, intent=intent_id, operator=principal)


RESOLVE_ALL = RESOLVE.pattern()


def parse_resolve(subject: str) -> Command:
    """The parts of a resolve subject."""
    values = _command_parts(RESOLVE, subject)
    return Command(values["tenant"], values["intent"], values["operator"])


def policy_command(verb: str, principal: str) -> str:
    """``lg.policy.<verb>.<principal>``: an operator manages the policy bundles."""
    return POLICY.subject(verb=verb, operator=principal)


POLICY_ALL = POLICY.pattern()


def parse_policy(subject: str) -> tuple[str, str]:
    """The verb and the operator of a policy command's subject (``NotACommandSubject``: not
    one, or a verb policy does not know)."""
    values = _command_parts(POLICY, subject)
    if values["verb"] not in POLICY_VERBS:
        raise NotACommandSubject(f"{subject[:200]!r}: unknown policy verb")
    return values["verb"], values["operator"]


# -- an adapter's claim of a send boundary -------------------------------------------------


def claim(capability: str) -> str:
    """``lg.claim.<capability>``: an adapter asks to cross the send boundary of an order it holds."""
    return CLAIM.subject(capability=capability)


CLAIM_ALL = CLAIM.tail()


def parse_claim(subject: str) -> str:
    """The capability a claim names."""
    values = CLAIM.match(subject)
    capability = values["capability"] if values is not None else ""
    if not is_capability_name(capability):
        raise NotACommandSubject(f"{subject[:200]!r} is not a claim subject")
    return capability


# -- between the executor and adapters ---------------------------------------------------

#: Execution orders (stream ``LG_EXEC``), ``lg.exec.<capability>``.
EXEC_ALL = EXEC.tail()
#: Interruptions of running attempts, ``lg.interrupt.<capability>``.
INTERRUPT_ALL = INTERRUPT.tail()
#: Adapters' reports (stream ``LG_REPORTS``), ``lg.report.<capability>.<intent>``.
REPORT_ALL = REPORT.tail()

#: Capability names are dotted (``case.add_note``): a subject wildcard stands for one
#: token, so asking any capability one verb is matched for names of up to this many parts.
MAX_CAPABILITY_PARTS = 4


def adapter(capability: str, verb: str) -> str:
    """``lg.adapter.<capability>.<verb>``: ask a capability's adapter (a verb of ``ADAPTER_VERBS``)."""
    return ADAPTER.subject(capability=capability, verb=verb)


def order(capability: str) -> str:
    """``lg.exec.<capability>``: where the executor publishes the capability's execution orders."""
    return EXEC.subject(capability=capability)


def interrupt(capability: str) -> str:
    """``lg.interrupt.<capability>``: where the executor asks the capability's workers to stop."""
    return INTERRUPT.subject(capability=capability)


def report(capability: str, intent_id: str) -> str:
    """``lg.report.<capability>.<intent>``: where an adapter reports an intent's attempts."""
    return REPORT.subject(capability=capability, intent=intent_id)


class ReportAddress(NamedTuple):
    """The capability and intent a report's subject names."""

    capability: str
    intent_id: str


def parse_report_subject(subject: str) -> ReportAddress | None:
    """The capability and intent of a report subject, or ``None`` when it is not one.

    Only the family is checked: whether the parts name the report's own capability and
    intent is the executor's question (it records a report that does not as refused).
    """
    values = REPORT.match(subject)
    if values is None:
        return None
    return ReportAddress(values["capability"], values["intent"])


def adapter_all(verb: str) -> tuple[str, ...]:
    """Every ``lg.adapter.<capability>.<verb>`` (one wildcard per capability name length)."""
    return tuple(ADAPTER.pattern(capability=".".join([ANY] * n), verb=verb)
                 for n in range(1, MAX_CAPABILITY_PARTS + 1))


# -- liveness -----------------------------------------------------------------------------


def status(name: str) -> str:
    """``lg.status.<name>``: where the process called ``name`` answers (``adapter.casenotes``)."""
    return STATUS.subject(name=name)


def adapter_status(name: str) -> str:
    """``lg.status.adapter.<name>``: where an adapter process, or one of its capabilities, answers.

    ``name`` is the process's name or a capability's (both may be dotted, so it is not
    checked as one token).
    """
    return status(f"adapter.{name}")


STATUS_ALL = STATUS.tail()


def is_status(subject: str) -> bool:
    """True when ``subject`` (a subject or a pattern) is a status request's."""
    return STATUS.match(subject) is not None
