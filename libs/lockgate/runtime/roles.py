"""Who may touch which subject: DESIGN.md's role table as NATS users with exact permissions.

Each role connects as its own NATS user whose publish and subscribe allow-lists are
exactly its row of the table, plus the JetStream API subjects its client library
calls. An agent runtime cannot publish an approval or an execution order because the
broker refuses it, not because a service remembered to check.

Roles:

- ``admin`` creates the topology (``ensure_topology``: streams, buckets, durables) and
  may do anything. Nothing else creates or changes streams or consumers. Services
  should only *bind* to their durables; today they still call ``ensure_topology`` at
  startup (``lockgate.runtime.context.connect_ports``), which these roles refuse.
- ``host`` (the trusted host) opens runs: ``lg.run.<tenant>.open``.
- ``agent`` (an agent runtime, one per tenant) opens turns, proposes candidates and
  reads the model-facing responses of its own tenant only.
- ``reviewer`` decides reviews: ``lg.review.<tenant>.<intent>.decide``.
- the six services, each with its own durables, its own event types (an append is a
  publish on ``lg.evt.<tenant>.<intent>.<version>.<EventType>``), the buckets and
  adapter verbs it uses, and ``allow_responses`` for the requests it answers.
- ``adapter`` (per set of capabilities): answers ``lg.adapter.<capability>.*``, consumes
  ``lg.exec.<capability>`` and reports on ``lg.report.<capability>.*``; it never
  writes the event store.

Replies: a role that answers requests gets ``allow_responses`` (one reply to the reply
subject of each request it received), never a broad ``_INBOX.>`` publish. Roles at the
edge (host, agent, reviewer) and adapters get a private inbox prefix, so no other user
can subscribe to their replies and they cannot read anybody else's; their client must
connect with ``inbox_prefix=role.inbox_prefix``. Services keep ``_INBOX``: FastStream
pulls on ``_INBOX.<nuid>`` whatever the connection's prefix.

Known gap (single account): the reply subject of a request is not checked against any
permission, and JetStream and ``allow_responses`` answer to it. A user allowed to
publish ``lg.propose.<tenant>.<run>`` can therefore name ``lg.exec.<capability>`` or
another tenant's ``lg.evt...`` as the reply subject and make the server store its
publish acknowledgement there (a forged entry in the record). Closing that needs the
edge roles in an account of their own that imports only the subjects they may use
(replies then cross accounts as ``_R_`` subjects). A strict xfail in
``tests/integration/test_permissions.py`` keeps the gap visible.

Render a server's ``authorization`` block with::

    python -m lockgate.runtime.roles render --tenants tenant-a,tenant-b > authorization.conf
"""

from __future__ import annotations

import argparse
import json
import re
import secrets
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from lockgate.runtime.topology import (
    BUDGETS_BUCKET,
    CAPABILITIES_BUCKET,
    CATALOGUES_BUCKET,
    DURABLES,
    EVENTS,
    EXEC,
    LOCKS_BUCKET,
    PROGRESS_BUCKET,
    RESPONSES,
    RUNS_BUCKET,
)

#: The inbox prefix of trusted processes (nats-py's and FastStream's default).
SERVICE_INBOX = "_INBOX"


@dataclass(frozen=True)
class Role:
    """One row of the role table: the exact subjects a NATS user may publish and subscribe."""

    name: str
    publish: tuple[str, ...]
    subscribe: tuple[str, ...]
    #: May answer the requests it receives (one reply each), whatever the reply subject.
    allow_responses: bool = False
    #: The ``inbox_prefix`` its client must connect with (replies arrive under it).
    inbox_prefix: str = SERVICE_INBOX


# -- JetStream API subjects -----------------------------------------------------------------


def js_pull(stream: str, consumer: str) -> tuple[str, ...]:
    """Bind to (consumer info), fetch from and acknowledge one existing pull consumer."""
    return (
        f"$JS.API.CONSUMER.INFO.{stream}.{consumer}",
        f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}",
        f"$JS.ACK.{stream}.{consumer}.>",
    )


def js_durable(name: str) -> tuple[str, ...]:
    """``js_pull`` for one of the topology's durables, by name."""
    for d in DURABLES:
        if d.name == name:
            return js_pull(d.stream, d.name)
    raise KeyError(name)


def kv_open(bucket: str) -> tuple[str, ...]:
    """``js.key_value(bucket)``: the bucket's stream info (read-only)."""
    return (f"$JS.API.STREAM.INFO.KV_{bucket}",)


def kv_read(bucket: str) -> tuple[str, ...]:
    """Get keys of a bucket (direct get, as the buckets are created with ``direct=True``)."""
    return (*kv_open(bucket), f"$JS.API.DIRECT.GET.KV_{bucket}.$KV.{bucket}.>")


def kv_list(bucket: str) -> tuple[str, ...]:
    """List a bucket's keys: nats-py watches it through an ephemeral ordered consumer.

    The consumer is created with a server-chosen name, pushes to the inbox with flow
    control (answered on ``$JS.FC.<stream>.>``) and is left to its inactivity threshold.
    """
    return (
        f"$JS.API.CONSUMER.CREATE.KV_{bucket}",
        f"$JS.API.CONSUMER.INFO.KV_{bucket}.*",
        f"$JS.FC.KV_{bucket}.>",
    )


def kv_write(bucket: str, keys: str = ">") -> tuple[str, ...]:
    """Put keys matching ``keys`` into a bucket."""
    return (f"$KV.{bucket}.{keys}",)


#: Capability names are dotted (``case.add_note``): a subject wildcard stands for one
#: token, so asking any capability one verb is granted for names of up to this many parts.
MAX_CAPABILITY_PARTS = 4


def adapter_ask(verb: str) -> tuple[str, ...]:
    """Ask any capability's adapter ``verb`` (``lg.adapter.<capability>.<verb>``)."""
    return tuple(
        "lg.adapter." + ".".join(["*"] * n) + f".{verb}" for n in range(1, MAX_CAPABILITY_PARTS + 1)
    )


#: Load an aggregate or verify an order: direct get (``multi_last``) on the events stream.
EVENT_LOAD = f"$JS.API.DIRECT.GET.{EVENTS}"


def event_append(*event_types: str) -> tuple[str, ...]:
    """Append events of ``event_types`` (and only those) to any aggregate."""
    return tuple(f"lg.evt.*.*.*.{t}" for t in event_types)


# -- the roles ----------------------------------------------------------------------------


def _token(value: str, what: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", value):
        raise ValueError(f"{what} {value!r} is not a subject token")
    return value


def _capability(value: str) -> str:
    if not re.fullmatch(r"[a-z][a-z0-9_-]*(\.[a-z][a-z0-9_-]*)*", value):
        raise ValueError(f"capability {value!r} is not lower-case dotted")
    return value


def _inbox(prefix: str) -> str:
    return f"{prefix}.>"


def admin_role() -> Role:
    """Owns the topology: creates streams, buckets and durables; may do anything."""
    return Role("admin", (">",), (">",), allow_responses=False)


def host_role(tenants: Sequence[str] | None = None) -> Role:
    """The trusted host: opens runs (for ``tenants``, or for every tenant)."""
    scopes = [_token(t, "tenant") for t in tenants] if tenants else ["*"]
    prefix = "_INBOX_host"
    return Role(
        "host",
        tuple(f"lg.run.{t}.open" for t in scopes),
        (_inbox(prefix),),
        inbox_prefix=prefix,
    )


def agent_role(tenant: str) -> Role:
    """An agent runtime of ``tenant``: turns, candidates and responses of that tenant only."""
    t = _token(tenant, "tenant")
    prefix = f"_INBOX_agent_{t}"
    return Role(
        f"agent-{t}",
        (
            f"lg.turn.{t}.*",
            f"lg.propose.{t}.*",
            f"lg.withdraw.{t}.*",
            f"$JS.API.DIRECT.GET.{RESPONSES}.lg.response.{t}.>",
        ),
        (f"lg.response.{t}.>", _inbox(prefix)),
        inbox_prefix=prefix,
    )


def reviewer_role(tenants: Sequence[str] | None = None) -> Role:
    """Authenticated reviewers (dashboard, CLI): decide reviews of ``tenants`` (or all)."""
    scopes = [_token(t, "tenant") for t in tenants] if tenants else ["*"]
    prefix = "_INBOX_reviewer"
    return Role(
        "reviewer",
        tuple(f"lg.review.{t}.*.decide" for t in scopes),
        (_inbox(prefix),),
        inbox_prefix=prefix,
    )


def operator_role(tenants: Sequence[str] | None = None) -> Role:
    """Operators: settle unknown outcomes and withdraw candidates of ``tenants`` (or all)."""
    scopes = [_token(t, "tenant") for t in tenants] if tenants else ["*"]
    prefix = "_INBOX_operator"
    return Role(
        "operator",
        tuple(f"lg.reconcile.{t}.*.resolve" for t in scopes)
        + tuple(f"lg.withdraw.{t}.*" for t in scopes),
        (_inbox(prefix),),
        inbox_prefix=prefix,
    )


@dataclass(frozen=True)
class _ServiceRow:
    durables: tuple[str, ...]
    appends: tuple[str, ...]
    answers: tuple[str, ...] = ()
    reads: tuple[str, ...] = ()
    lists: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    asks: tuple[str, ...] = ()
    publishes: tuple[str, ...] = ()


#: What each service does on NATS (see ``services/lockgate/<name>``).
SERVICES: dict[str, _ServiceRow] = {
    "intake": _ServiceRow(
        durables=("intake", "intake-responses"),
        appends=("CandidateReceived", "CandidateRejected"),
        answers=("lg.run.*.open", "lg.turn.*.*"),
        reads=(CAPABILITIES_BUCKET, RUNS_BUCKET, CATALOGUES_BUCKET),
        lists=(CAPABILITIES_BUCKET,),
        writes=(RUNS_BUCKET, CATALOGUES_BUCKET),
        asks=("describe",),
        publishes=("lg.response.>",),
    ),
    "normalization": _ServiceRow(
        durables=("normalization",),
        appends=("CandidateNormalized", "NormalizationFailed"),
        reads=(CAPABILITIES_BUCKET, RUNS_BUCKET),
        asks=("normalize",),
    ),
    "policy": _ServiceRow(
        durables=("policy", "policy-pauses", "policy-budgets"),
        appends=("PolicyDecided",),
        reads=(PROGRESS_BUCKET, BUDGETS_BUCKET, CAPABILITIES_BUCKET, RUNS_BUCKET),
        writes=(PROGRESS_BUCKET, BUDGETS_BUCKET),
        asks=("facts",),
    ),
    "approval": _ServiceRow(
        durables=("approval", "approval-expiry"),
        appends=("ReviewRequested", "ReviewApproved", "ReviewDenied", "ReviewExpired"),
        answers=("lg.review.*.*.decide",),
    ),
    "executor": _ServiceRow(
        durables=(
            "executor-gate", "executor-dispatch", "executor-deadlines", "executor-reports",
            "executor-locks",
        ),
        appends=(
            "ExecutionAuthorized",
            "GateRefused",
            "AttemptSent",
            "EffectCompleted",
            "AttemptRejected",
            "AttemptFailedBeforeSend",
            "OutcomeUnknown",
            "Reconciled",
            "Withdrawn",
            "InterruptionRequested",
            "AttemptAcknowledged",
            "ResultObserved",
            "AttemptInterrupted",
        ),
        answers=("lg.withdraw.*.*",),
        reads=(CAPABILITIES_BUCKET, LOCKS_BUCKET, BUDGETS_BUCKET, PROGRESS_BUCKET, RUNS_BUCKET),
        writes=(LOCKS_BUCKET,),
        asks=("facts",),
        publishes=("lg.exec.>", "lg.interrupt.>"),
    ),
    "reconciler": _ServiceRow(
        durables=("reconciler",),
        appends=("Reconciled",),
        answers=("lg.reconcile.*.*.resolve",),
        reads=(CAPABILITIES_BUCKET,),
        asks=("query",),
    ),
}

#: Every bucket ``connect_ports`` opens at startup, whatever the service uses.
_OPENED_BY_EVERY_SERVICE = (
    CAPABILITIES_BUCKET, RUNS_BUCKET, CATALOGUES_BUCKET, LOCKS_BUCKET, PROGRESS_BUCKET,
    BUDGETS_BUCKET,
)


def service_role(name: str) -> Role:
    """The role of the service ``name`` (``intake``, ``normalization``, ...).

    Services bind to durables the admin created; they never create or change streams
    or consumers, so only the read-only ``INFO`` API subjects are granted.

    Raises:
        KeyError: no such service.
    """
    row = SERVICES[name]
    publish: list[str] = []
    for durable in row.durables:
        publish += js_durable(durable)
    publish.append(EVENT_LOAD)
    publish += event_append(*row.appends)
    for bucket in _OPENED_BY_EVERY_SERVICE:
        publish += kv_read(bucket) if bucket in row.reads else kv_open(bucket)
    for bucket in row.lists:
        publish += kv_list(bucket)
    for bucket in row.writes:
        publish += kv_write(bucket)
    for verb in row.asks:
        publish += adapter_ask(verb)
    publish += row.publishes
    subscribe = [*row.answers, f"lg.status.{name}", _inbox(SERVICE_INBOX)]
    return Role(name, tuple(publish), tuple(subscribe), allow_responses=True)


def adapter_role(capabilities: Sequence[str], name: str = "adapter") -> Role:
    """An adapter process serving ``capabilities``.

    The adapter SDK registers each capability in ``LG_CAPABILITIES`` and creates its own
    durable on ``LG_EXEC``; the create subject names the consumer and its filter, so the
    grant covers exactly that consumer on that capability's orders.
    """
    if not capabilities:
        raise ValueError("an adapter serves at least one capability")
    prefix = f"_INBOX_{_token(name, 'adapter name')}"
    publish: list[str] = [*kv_open(CAPABILITIES_BUCKET), EVENT_LOAD]
    subscribe: list[str] = []
    for cap in map(_capability, capabilities):
        consumer = "adapter-" + cap.replace(".", "_")
        publish += [
            *kv_write(CAPABILITIES_BUCKET, cap),
            f"$JS.API.CONSUMER.CREATE.{EXEC}.{consumer}.lg.exec.{cap}",
            *js_pull(EXEC, consumer),
            f"lg.report.{cap}.*",
        ]
        subscribe += [f"lg.adapter.{cap}.*", f"lg.status.adapter.{cap}", f"lg.interrupt.{cap}"]
    # The worker process answers for itself under the name it runs as (casenotes, items…).
    subscribe += ["lg.status.adapter.*", _inbox(prefix)]
    return Role(name, tuple(publish), tuple(subscribe), allow_responses=True, inbox_prefix=prefix)


def roles(tenants: Sequence[str], capabilities: Sequence[str] = ("case.add_note",)) -> list[Role]:
    """Every role of a deployment serving ``tenants`` and one adapter for ``capabilities``."""
    return [
        admin_role(),
        host_role(),
        reviewer_role(),
        operator_role(),
        *(agent_role(t) for t in tenants),
        *(service_role(s) for s in SERVICES),
        adapter_role(capabilities),
        adapter_role(("draft.prepare_private", "item.publish"), name="adapter-items"),
    ]


# -- the server configuration -----------------------------------------------------------

_SAFE = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+")  # printable ASCII without '"' and '\'


def _quote(value: str) -> str:
    if not _SAFE.fullmatch(value):
        raise ValueError(f"{value!r} must be printable ASCII without quotes or backslashes")
    return json.dumps(value)


def _allow(kind: str, items: Iterable[str]) -> list[str]:
    return [f"        {kind}: {{ allow: [", *(f"          {_quote(i)}" for i in items), "        ] }"]


def render_authorization(users: Mapping[str, tuple[Role, str]]) -> str:
    """A nats-server ``authorization { users = [...] }`` block for ``users``.

    Args:
        users: user name → (its role, its password).
    """
    lines = [
        "# Rendered from lockgate.runtime.roles: one user per role, permissions exactly its row.",
        "authorization {",
        "  users = [",
    ]
    for user, (role, password) in users.items():
        lines += [
            "    {",
            f"      # role: {role.name}; connect with inbox_prefix {role.inbox_prefix}",
            f"      user: {_quote(user)}",
            f"      password: {_quote(password)}",
            "      permissions: {",
            *_allow("publish", role.publish),
            *_allow("subscribe", role.subscribe),
        ]
        if role.allow_responses:
            lines.append("        allow_responses: true")
        lines += ["      }", "    }"]
    lines += ["  ]", "}"]
    return "\n".join(lines) + "\n"


def demo_users(
    tenants: Sequence[str],
    capabilities: Sequence[str] = ("case.add_note",),
    *,
    password: Callable[[str], str] | None = None,
) -> dict[str, tuple[Role, str]]:
    """One user per role, named after it, with a generated password (or ``password(user)``)."""
    make = password or (lambda _user: secrets.token_urlsafe(24))
    return {role.name: (role, make(role.name)) for role in roles(tenants, capabilities)}


def env_name(user: str) -> str:
    """The variable that carries ``user``'s password in a compose ``.env`` file."""
    return "LG_PASSWORD_" + re.sub(r"[^A-Za-z0-9]", "_", user).upper()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m lockgate.runtime.roles render --tenants a,b [--env-file F]``."""
    parser = argparse.ArgumentParser(prog="python -m lockgate.runtime.roles")
    commands = parser.add_subparsers(dest="command", required=True)
    render = commands.add_parser("render", help="print a nats-server authorization block")
    render.add_argument("--tenants", required=True, help="comma-separated tenant ids")
    render.add_argument("--capabilities", default="case.add_note",
                        help="comma-separated capabilities of the adapter user")
    render.add_argument("--placeholder-passwords", action="store_true",
                        help="write CHANGE-ME-<user> instead of generated passwords")
    render.add_argument("--env-file", type=Path,
                        help="also write LG_PASSWORD_<USER>=... lines here (for docker compose)")
    args = parser.parse_args(argv)
    tenants = [t for t in args.tenants.split(",") if t]
    capabilities = [c for c in args.capabilities.split(",") if c]
    placeholder = (lambda user: f"CHANGE-ME-{user}") if args.placeholder_passwords else None
    try:
        users = demo_users(tenants, capabilities, password=placeholder)
    except ValueError as exc:
        parser.error(str(exc))
    sys.stdout.write(render_authorization(users))
    if args.env_file:
        args.env_file.write_text(
            "".join(f"{env_name(u)}={pw}\n" for u, (_, pw) in users.items())
        )
        args.env_file.chmod(0o600)
    return 0


if __name__ == "__main__":
    sys.exit(main())
