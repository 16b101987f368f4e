"""Who may touch which subject: the role table as NATS accounts and users (docs/security.md).

Every process connects as its own NATS user whose publish and subscribe allow-lists are
exactly its row of the table, plus the JetStream API subjects its client library
calls. An agent runtime cannot publish an approval or an execution order because the
broker refuses it, not because a service remembered to check.

Accounts. In one NATS account a request's reply subject is not permission-checked, and
JetStream (and ``allow_responses``) answer to it: a user allowed to publish one subject
could name ``lg.exec.<capability>`` or another tenant's ``lg.evt...`` as the reply and
make the server store its acknowledgement there. So the users live in accounts:

- ``LOCKGATE`` has JetStream and the trusted processes: the topology ``admin`` and the
  six services.
- ``EDGE`` holds the people and programs at the edge: the trusted ``host``, one
  ``agent-<tenant>`` per tenant, one ``reviewer-<name>`` and ``operator-<name>`` per
  person. It has no JetStream of its own; it *imports* exactly the request subjects
  they may use from ``LOCKGATE`` (and the model-facing responses as a stream). A reply
  subject named in ``EDGE`` is delivered in ``EDGE``, where no stream or bucket exists.
- ``ADAPTER_<name>``, one per adapter process, imports its capabilities' orders,
  reports and registration, and *exports* its ``lg.adapter.<capability>.*`` requests
  to ``LOCKGATE``.

An account without JetStream answers ``$JS.API.>`` itself ("JetStream not enabled"), so
the imported JetStream API subjects are renamed ``lg.jsapi.…`` there; clients in those
accounts use ``nc.jetstream(prefix=role.js_prefix)``.

Roles:

- ``admin`` creates the topology (``ensure_topology``: streams, buckets, durables) and
  may do anything in ``LOCKGATE``. Services only *bind* to their durables.
- ``host`` (the trusted host) opens runs: ``lg.run.<tenant>.open``.
- ``agent-<tenant>`` opens turns, proposes candidates, withdraws them and reads the
  model-facing responses of its own tenant only.
- ``reviewer-<name>`` shows and decides reviews of the tenants it reviews; the subject
  ends in its name, so approval records the authenticated reviewer.
- ``operator-<name>`` settles unknown outcomes, withdraws candidates, reads the record
  and asks every process for its status, in its tenants.
- the six services, each with its own durables, its own event types (an append is a
  publish on ``lg.evt.<tenant>.<intent>.<version>.<EventType>``), the buckets and
  adapter verbs it uses, and ``allow_responses`` for the requests it answers: all read
  off its spec (``lockgate.runtime.specs``).
- ``adapter-<name>`` answers ``lg.adapter.<capability>.*``, consumes
  ``lg.exec.<capability>`` and reports on ``lg.report.<capability>.*`` for its own
  capabilities only; it never writes the event store.

Replies: a role that answers requests gets ``allow_responses`` (one reply to the reply
subject of each request it received), never a broad ``_INBOX.>`` publish. Edge roles and
adapters get a private inbox prefix, so no other user can read their replies; their
client must connect with ``inbox_prefix=role.inbox_prefix``. Services keep ``_INBOX``:
FastStream pulls on ``_INBOX.<nuid>`` whatever the connection's prefix.

Render a server's ``accounts`` block with::

    python -m lockgate.runtime.roles render --tenants tenant-a,tenant-b > accounts.conf
"""

from __future__ import annotations

import argparse
import json
import re
import secrets
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from lockgate.contracts import channels, subjects
from lockgate.eventstore.partitions import SINGLE, Partitions
from lockgate.eventstore.subjects import type_filter
from lockgate.mcp import subjects as mcp_subjects
from lockgate.runtime import specs
from lockgate.runtime.spec import ServiceSpec
from lockgate.runtime.streams import (
    BUDGETS_BUCKET,
    CAPABILITIES_BUCKET,
    CATALOGUES_BUCKET,
    EVENTS,
    EXEC,
    LEASES,
    LOCKS_BUCKET,
    PROGRESS_BUCKET,
    RESPONSES,
    RUNS_BUCKET,
)
from lockgate.runtime.streams import MCP as MCP_RECORDS

#: The inbox prefix of trusted processes (nats-py's and FastStream's default).
SERVICE_INBOX = "_INBOX"
#: The account of the trusted processes; the only one with JetStream.
SERVICES_ACCOUNT = "LOCKGATE"
#: The account of hosts, agent runtimes, reviewers and operators.
EDGE_ACCOUNT = "EDGE"
#: The JetStream API as the services' account serves it.
JS_API = "$JS.API"
#: The same API in an account that imports it (its own ``$JS.API`` would answer instead).
IMPORTED_JS_API = subjects.IMPORTED_JS_API


def adapter_account(name: str) -> str:
    """The account of the adapter process called ``name``."""
    return f"ADAPTER_{_token(name, 'adapter name')}"


@dataclass(frozen=True)
class Import:
    """A subject an account outside ``LOCKGATE`` takes from another account.

    ``subject`` is the name in the exporting account, ``local`` the name the importer's
    users publish (or subscribe) to. A ``service`` import forwards requests; ``stream``
    delivers the exporter's messages. ``responses="stream"`` lets one request have many
    replies (a batched direct get, a pull consumer's fetch).
    """

    subject: str
    local: str
    kind: Literal["service", "stream"] = "service"
    responses: Literal["single", "stream"] = "single"
    source: str = SERVICES_ACCOUNT


def _service(subject: str, responses: Literal["single", "stream"] = "single") -> Import:
    return Import(subject, subject, "service", responses)


def _stream(subject: str) -> Import:
    return Import(subject, subject, "stream")


def _js(api_subject: str, responses: Literal["single", "stream"] = "single") -> Import:
    """A JetStream API subject of the services' account, renamed for the importer."""
    if not api_subject.startswith(JS_API + "."):
        raise ValueError(f"{api_subject!r} is not a JetStream API subject")
    return Import(api_subject, IMPORTED_JS_API + api_subject[len(JS_API):], "service", responses)


@dataclass(frozen=True)
class Role:
    """One row of the role table: a NATS user's account and the exact subjects it may use."""

    name: str
    publish: tuple[str, ...]
    subscribe: tuple[str, ...]
    #: May answer the requests it receives (one reply each), whatever the reply subject.
    allow_responses: bool = False
    #: The ``inbox_prefix`` its client must connect with (replies arrive under it).
    inbox_prefix: str = SERVICE_INBOX
    account: str = SERVICES_ACCOUNT
    #: What its account must import for it (``publish``/``subscribe`` name the local side).
    imports: tuple[Import, ...] = ()
    #: Request subjects its account offers the services' account (adapters).
    exports: tuple[str, ...] = ()
    #: The JetStream API prefix its client must use (``nc.jetstream(prefix=...)``).
    js_prefix: str = JS_API
    #: The person or program the user is (a reviewer's name, an operator's); the
    #: principal token its command subjects end in.
    principal: str = ""
    #: Tenants it acts in (empty: every tenant); informative, the grants enforce it.
    tenants: tuple[str, ...] = field(default=())


# -- JetStream API subjects -----------------------------------------------------------------


def _direct_get(stream: str, subject: str = "") -> str:
    """The JetStream API subject of a direct get on ``stream`` (of ``subject``'s last message,
    or, without one, a batched get whose request names the subjects)."""
    return f"{JS_API}.DIRECT.GET.{stream}" + (f".{subject}" if subject else "")


def js_pull(stream: str, consumer: str) -> tuple[str, ...]:
    """Bind to (consumer info), fetch from and acknowledge one existing pull consumer."""
    return (
        f"$JS.API.CONSUMER.INFO.{stream}.{consumer}",
        f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}",
        f"$JS.ACK.{stream}.{consumer}.>",
    )


def kv_open(bucket: str) -> tuple[str, ...]:
    """``js.key_value(bucket)``: the bucket's stream info (read-only)."""
    return (f"$JS.API.STREAM.INFO.KV_{bucket}",)


def kv_read(bucket: str) -> tuple[str, ...]:
    """Get keys of a bucket: direct gets (the buckets are created with ``direct=True``),
    and message gets, which only the bucket's leader answers, to confirm what a replica
    behind it may have answered (``lockgate.contracts.buckets``)."""
    return (*kv_open(bucket), f"$JS.API.DIRECT.GET.KV_{bucket}.$KV.{bucket}.>",
            f"$JS.API.STREAM.MSG.GET.KV_{bucket}")


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


def adapter_ask(verb: str) -> tuple[str, ...]:
    """Ask any capability's adapter ``verb`` (``lg.adapter.<capability>.<verb>``)."""
    return subjects.adapter_all(verb)


def event_load(partitions: Partitions = SINGLE) -> tuple[str, ...]:
    """Load an aggregate (direct gets, ``multi_last``, on each events stream), and complete
    a load a lagging replica answered (message gets, which only a stream's leader
    answers: ``lockgate.eventstore.jetstream``)."""
    return tuple(s for p in partitions
                 for s in (_direct_get(p.stream), f"{JS_API}.STREAM.MSG.GET.{p.stream}"))


def event_append(*event_types: str, partitions: Partitions = SINGLE) -> tuple[str, ...]:
    """Append events of ``event_types`` (and only those) to any aggregate, in any partition."""
    return tuple(type_filter(t, prefix=p.prefix) for p in partitions for t in event_types)


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


def _scopes(tenants: Sequence[str] | None) -> list[str]:
    return [_token(t, "tenant") for t in tenants] if tenants else [subjects.ANY]


def admin_role() -> Role:
    """Owns the topology: creates streams, buckets and durables; may do anything."""
    return Role("admin", (">",), (">",), allow_responses=False)


#: The projector's status name and NATS user.
PROJECTOR = "projector"


def _edge(
    name: str, publish: Iterable[str], imports: Iterable[Import], *,
    subscribe: Iterable[str] = (), principal: str = "", tenants: Sequence[str] | None = None,
) -> Role:
    prefix = f"_INBOX_{name.replace('-', '_')}"
    return Role(
        name, tuple(publish), (*subscribe, _inbox(prefix)), inbox_prefix=prefix,
        account=EDGE_ACCOUNT, imports=tuple(imports), js_prefix=IMPORTED_JS_API,
        principal=principal, tenants=tuple(tenants or ()),
    )


def host_role(tenants: Sequence[str] | None = None) -> Role:
    """The trusted host: opens and closes runs (for ``tenants``, or for every tenant)."""
    scopes = _scopes(tenants)
    return _edge(
        "host", (*(subjects.RUN_OPEN.pattern(tenant=t) for t in scopes),
                 *(subjects.RUN_CLOSE.pattern(tenant=t) for t in scopes)),
        [_service(subjects.RUN_OPEN_ALL), _service(subjects.RUN_CLOSE_ALL)], tenants=tenants,
    )


_RESPONSES_GET = _js(_direct_get(RESPONSES, subjects.RESPONSES_ALL))


def agent_role(tenant: str) -> Role:
    """An agent runtime of ``tenant``: turns, candidates, withdrawals and responses of that tenant only."""
    t = _token(tenant, "tenant")
    name = f"agent-{t}"
    return _edge(
        name,
        (
            subjects.TURN.pattern(tenant=t),
            subjects.PROPOSE.pattern(tenant=t),
            subjects.WITHDRAW.pattern(tenant=t, user=name),
            _js(_direct_get(RESPONSES, subjects.responses_of(t))).local,
        ),
        [_service(subjects.TURN_ALL), _service(subjects.PROPOSE_ALL),
         _service(subjects.WITHDRAW_ALL), _RESPONSES_GET, _stream(subjects.RESPONSES_ALL)],
        subscribe=(subjects.responses_of(t),), principal=name, tenants=(t,),
    )


def reviewer_role(person: str, tenants: Sequence[str] | None = None) -> Role:
    """A reviewer (one person): shows and decides the reviews of ``tenants`` (or all)."""
    who = _token(person, "reviewer")
    name = f"reviewer-{who}"
    reviews = (subjects.REVIEW.pattern(tenant=t, verb=verb, reviewer=who)
               for t in _scopes(tenants) for verb in subjects.REVIEW_VERBS)
    # The projector's status: whether the review queue it reads is up to date.
    return _edge(
        name, (*reviews, subjects.status(PROJECTOR)),
        [_service(subjects.REVIEW.tail()), _service(subjects.STATUS_ALL, "stream")], principal=who,
        tenants=tenants,
    )


def operator_role(person: str, tenants: Sequence[str] | None = None,
                  partitions: Partitions = SINGLE) -> Role:
    """An operator (one person): settles outcomes, withdraws, reads the record and every status.

    The record is read by batched direct gets, whose filter is in the request body, so a
    tenant-scoped operator still reads every tenant's events: give scoped operators
    the projection's views instead (the request subjects themselves are scoped).
    """
    who = _token(person, "operator")
    name = f"operator-{who}"
    loads = [_js(_direct_get(p.stream), "stream") for p in partitions]
    return _edge(
        name,
        (
            *(subjects.RESOLVE.pattern(tenant=t, operator=who) for t in _scopes(tenants)),
            *(subjects.WITHDRAW.pattern(tenant=t, user=name) for t in _scopes(tenants)),
            subjects.STATUS_ALL,
            *(load.local for load in loads),
            mcp_subjects.OP.pattern(principal=who),
        ),
        [_service(subjects.RESOLVE.tail()), _service(subjects.WITHDRAW_ALL),
         _service(subjects.STATUS_ALL, "stream"), *loads, _service(mcp_subjects.OPS_ALL)],
        principal=who, tenants=tenants,
    )


#: The replay's NATS user (``lockgate replay``).
REPLAY = "replay"


def replay_role() -> Role:
    """``lockgate replay``: reads runs' contexts and capabilities' contracts, nothing else.

    A replay runs recorded candidates in a fixture world of its own (a private broker);
    from the deployment it needs only what the record (the views) does not hold: the
    context each run was opened with and the contracts of the capabilities, and whether
    the views are up to date (the projector's status). No adapter request, no order, no
    proposal, no append: it holds no credentials that reach the real world.
    """
    reads = [_js(subject) for bucket in (RUNS_BUCKET, CAPABILITIES_BUCKET) for subject in kv_read(bucket)]
    return _edge(REPLAY, (*(i.local for i in reads), subjects.status(PROJECTOR)),
                 [*reads, _service(subjects.STATUS_ALL, "stream")])


#: What each service does on NATS, by name: its spec (``lockgate.runtime.specs``).
SERVICES: dict[str, ServiceSpec] = {spec.name: spec for spec in specs.SERVICES}

#: Every bucket ``connect_ports`` opens at startup, whatever the service uses.
_OPENED_BY_EVERY_SERVICE = (
    CAPABILITIES_BUCKET, RUNS_BUCKET, CATALOGUES_BUCKET, LOCKS_BUCKET, PROGRESS_BUCKET,
    BUDGETS_BUCKET,
)


def service_role(name: str, partitions: Partitions = SINGLE) -> Role:
    """The role of the service ``name`` (``intake``, ``normalization``, ...), from its spec.

    Services bind to durables the admin created; they never create or change streams
    or consumers, so only the read-only ``INFO`` API subjects are granted.

    Raises:
        KeyError: no such service.
    """
    spec = SERVICES[name]
    publish: list[str] = []
    for consumer in spec.consumes:
        # A consumer of the events stream has its durable on every partition.
        streams = partitions.streams if consumer.stream == EVENTS else (consumer.stream,)
        publish += (s for stream in streams for s in js_pull(stream, consumer.name))
    publish += event_load(partitions)
    # Every consumer may give a message up on the record (lockgate.runtime.service).
    publish += event_append(*(event.__name__ for event in spec.may_append), partitions=partitions)
    for bucket in _OPENED_BY_EVERY_SERVICE:
        publish += kv_read(bucket) if bucket in spec.reads else kv_open(bucket)
    for bucket in spec.lists:
        publish += kv_list(bucket)
    for bucket in spec.writes:
        publish += kv_write(bucket)
    for channel in (*spec.asks, *spec.publishes):
        # A withdrawal names who asks for it in its last token: a service asks as itself.
        publish += ((subjects.withdraw_as(name),) if channel is channels.WITHDRAW
                    else channel.subjects)
    if channels.RESPONSE in spec.publishes:
        # Who stores responses reads a candidate's last one, to store only what is newer.
        publish.append(_direct_get(RESPONSES, subjects.RESPONSES_ALL))
    if channels.LEASE in spec.publishes:
        # Who keeps runs' leases reads a lease before renewing it, and lists an ended
        # run's responses (batched direct gets: the request names the subjects).
        publish += (_direct_get(LEASES), _direct_get(RESPONSES))
    answers = (s for answer in spec.answers for s in answer.channel.subjects)
    subscribe = [*answers, subjects.status(spec.status_name), _inbox(SERVICE_INBOX)]
    return Role(name, tuple(publish), tuple(subscribe), allow_responses=True)


def projector_role(partitions: Partitions = SINGLE) -> Role:
    """The projector: reads the events stream in order, and nothing else.

    It reads with batched direct gets (the read every service has) and asks the stream
    how far it goes; it creates no consumer, so it cannot change the services' durables,
    and it appends nothing.
    """
    publish = tuple(s for p in partitions
                    for s in (_direct_get(p.stream), f"{JS_API}.STREAM.INFO.{p.stream}"))
    subscribe = (subjects.status(PROJECTOR), _inbox(SERVICE_INBOX))
    return Role(PROJECTOR, publish, subscribe, allow_responses=True)


#: The archiver's status name and NATS user.
ARCHIVER = "archiver"


def archiver_role(partitions: Partitions = SINGLE) -> Role:
    """The archiver: reads the record, marks an ended intent archived, purges before the mark.

    The purge grant cannot be narrowed to one intent (its filter is in the request
    body), so it is this role's alone, and the archiver checks on the record itself,
    under optimistic concurrency, that what it purges has ended.
    """
    publish = (*event_load(partitions), *event_append("IntentArchived", partitions=partitions),
               *(f"{JS_API}.STREAM.PURGE.{p.stream}" for p in partitions))
    subscribe = (subjects.status(ARCHIVER), _inbox(SERVICE_INBOX))
    return Role(ARCHIVER, publish, subscribe, allow_responses=True)


#: The console's status name and NATS user.
CONSOLE = "console"


def console_role() -> Role:
    """The console: answers its status and asks the projector how far the views lag.

    It acts for reviewers and operators only over each person's own connection (the
    token they bring names their user), so its own user holds no authority at all.
    (An empty allow-list would allow everything: the one harmless subject keeps it a list.)
    """
    return Role(CONSOLE, (subjects.status(PROJECTOR),),
                (subjects.status(CONSOLE), _inbox(SERVICE_INBOX)), allow_responses=True)


#: The MCP adapter's process name: its role also keeps the MCP records and answers operators.
MCP_ADAPTER = "mcp"


def adapter_role(capabilities: Sequence[str], name: str = "adapter") -> Role:
    """The adapter process ``name`` serving ``capabilities``, in an account of its own.

    The adapter SDK registers each capability in ``LG_CAPABILITIES`` and creates its own
    durable on ``LG_EXEC``; the create subject names the consumer and its filter, so the
    grant covers exactly that consumer on that capability's orders. An order is checked
    when the adapter crosses its send boundary: the worker asks the executor on
    ``lg.claim.<capability>``, which decides on that intent's record. The adapter cannot
    read or write the record: there is no JetStream in its account, and only its own
    reports and claims are imported.
    """
    if not capabilities:
        raise ValueError("an adapter serves at least one capability")
    who = _token(name, "adapter name")
    user = f"adapter-{who}"
    prefix = f"_INBOX_adapter_{who.replace('-', '_')}"
    imports: list[Import] = [_js(f"{JS_API}.STREAM.INFO.KV_{CAPABILITIES_BUCKET}")]
    subscribe: list[str] = []
    exports: list[str] = [subjects.adapter_status(who)]
    for cap in map(_capability, capabilities):
        consumer = "adapter-" + cap.replace(".", "_")
        imports += [
            _service(kv_write(CAPABILITIES_BUCKET, cap)[0]),
            _js(f"{JS_API}.CONSUMER.CREATE.{EXEC}.{consumer}.{subjects.order(cap)}"),
            _js(f"{JS_API}.CONSUMER.INFO.{EXEC}.{consumer}"),
            _js(f"{JS_API}.CONSUMER.MSG.NEXT.{EXEC}.{consumer}", "stream"),
            _service(f"$JS.ACK.{EXEC}.{consumer}.>"),
            _service(subjects.REPORT.pattern(capability=cap)),
            _service(subjects.claim(cap)),
            _stream(subjects.interrupt(cap)),
        ]
        asks = subjects.ADAPTER.pattern(capability=cap)
        subscribe += [asks, subjects.adapter_status(cap), subjects.interrupt(cap)]
        exports += [asks, subjects.adapter_status(cap)]
    if who == MCP_ADAPTER:
        # Its records on LG_MCP (append, and read back by direct get), and the operators'
        # requests it answers.
        imports += [_service(mcp_subjects.RECORDS_ALL),
                    _js(_direct_get(MCP_RECORDS, mcp_subjects.RECORDS_ALL)),
                    _js(_direct_get(MCP_RECORDS))]
        subscribe.append(mcp_subjects.OPS_ALL)
        exports.append(mcp_subjects.OPS_ALL)
    publish = [i.local for i in imports if i.kind == "service"]
    subscribe += [subjects.adapter_status(who), _inbox(prefix)]
    return Role(
        user, tuple(publish), tuple(subscribe), allow_responses=True, inbox_prefix=prefix,
        account=adapter_account(who), imports=tuple(imports), exports=tuple(exports),
        js_prefix=IMPORTED_JS_API, principal=who,
    )


#: The demo deployment's adapter processes and the capabilities each serves (their specs).
DEMO_ADAPTERS: dict[str, tuple[str, ...]] = {a.name: a.capabilities for a in specs.ADAPTERS}
#: The demo's people: reviewers and operators, each with the tenants they act in
#: (empty: every tenant). ``user-42`` is also an actor of the case world, so the demo
#: shows a person refused approval of their own request.
DEMO_REVIEWERS: dict[str, tuple[str, ...]] = {"alice": (), "user-42": ("tenant-a",)}
DEMO_OPERATORS: dict[str, tuple[str, ...]] = {"ops": ()}


def roles(
    tenants: Sequence[str],
    adapters: Mapping[str, Sequence[str]] | None = None,
    *,
    reviewers: Mapping[str, Sequence[str]] | None = None,
    operators: Mapping[str, Sequence[str]] | None = None,
    partitions: Partitions = SINGLE,
) -> list[Role]:
    """Every role of a deployment serving ``tenants`` with these adapters and people, its
    events in ``partitions``."""
    adapters = DEMO_ADAPTERS if adapters is None else adapters
    reviewers = DEMO_REVIEWERS if reviewers is None else reviewers
    operators = DEMO_OPERATORS if operators is None else operators
    return [
        admin_role(),
        *(service_role(s, partitions) for s in SERVICES),
        projector_role(partitions),
        archiver_role(partitions),
        console_role(),
        replay_role(),
        host_role(),
        *(agent_role(t) for t in tenants),
        *(reviewer_role(p, scope) for p, scope in reviewers.items()),
        *(operator_role(p, scope, partitions) for p, scope in operators.items()),
        *(adapter_role(caps, name) for name, caps in adapters.items()),
    ]


# -- the server configuration -----------------------------------------------------------

_SAFE = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+")  # printable ASCII without '"' and '\'


def _quote(value: str) -> str:
    if not _SAFE.fullmatch(value):
        raise ValueError(f"{value!r} must be printable ASCII without quotes or backslashes")
    return json.dumps(value)


def _allow(kind: str, items: Iterable[str]) -> list[str]:
    items = list(items)
    if not items:
        # nats-server reads an empty allow-list as no restriction at all (measured).
        raise ValueError(f"an empty {kind} allow-list would allow every subject")
    return [f"            {kind}: {{ allow: [", *(f"              {_quote(i)}" for i in items),
            "            ] }"]


def _responses_of(subject: str) -> Literal["single", "stream"]:
    """How many answers a request to an exported ``subject`` may get.

    A status request is answered by every replica of the process (each says how it is),
    so status subjects pass a stream of responses; any other request gets one answer.
    """
    return "stream" if subjects.is_status(subject) else "single"


@dataclass
class _Account:
    users: list[tuple[str, Role, str]] = field(default_factory=list)
    imports: dict[tuple[str, str, str, str], Import] = field(default_factory=dict)
    #: (kind, subject) → (response type, importing accounts)
    exports: dict[tuple[str, str], tuple[str, set[str]]] = field(default_factory=dict)


def _accounts(users: Mapping[str, tuple[Role, str]]) -> dict[str, _Account]:
    """Group users by account and derive every import and the matching export."""
    accounts: dict[str, _Account] = {SERVICES_ACCOUNT: _Account()}
    for user, (role, password) in users.items():
        accounts.setdefault(role.account, _Account()).users.append((user, role, password))
    for name, account in list(accounts.items()):
        for _, role, _ in account.users:
            for imp in role.imports:
                account.imports[(imp.kind, imp.subject, imp.local, imp.source)] = imp
                source = accounts.setdefault(imp.source, _Account())
                responses, importers = source.exports.setdefault(
                    (imp.kind, imp.subject), (imp.responses, set()))
                if responses != imp.responses:
                    raise ValueError(f"{imp.subject}: imported with two response types")
                importers.add(name)
            for subject in role.exports:
                # An adapter's requests and status, for the services (and, by their
                # export of lg.status.>, for operators).
                responses = _responses_of(subject)
                _, importers = account.exports.setdefault(("service", subject), (responses, set()))
                importers.add(SERVICES_ACCOUNT)
                back = Import(subject, subject, "service", responses, source=name)
                accounts[SERVICES_ACCOUNT].imports[("service", subject, subject, name)] = back
    return accounts


def render_accounts(users: Mapping[str, tuple[Role, str]]) -> str:
    """A nats-server ``accounts { ... }`` block for ``users``, one account per trust boundary.

    Every import an account's roles need is matched by an export of its source that
    names exactly the importing accounts.

    Args:
        users: user name → (its role, its password).
    """
    lines = [
        "# Rendered from lockgate.runtime.roles: accounts per trust boundary, one user per",
        "# role, permissions exactly its row. Holds passwords: keep it private (mode 0600).",
        "accounts {",
    ]
    for name, account in _accounts(users).items():
        lines.append(f"  {name}: {{")
        if name == SERVICES_ACCOUNT:
            lines.append("    jetstream: enabled")
        lines.append("    users: [")
        for user, role, password in account.users:
            lines += [
                "      {",
                f"        # role: {role.name}; connect with inbox_prefix {role.inbox_prefix}"
                + (f", JetStream prefix {role.js_prefix}" if role.js_prefix != JS_API else ""),
                f"        user: {_quote(user)}",
                f"        password: {_quote(password)}",
                "        permissions: {",
                *_allow("publish", role.publish),
                *_allow("subscribe", role.subscribe),
            ]
            if role.allow_responses:
                lines.append("            allow_responses: true")
            lines += ["        }", "      }"]
        lines.append("    ]")
        if account.exports:
            lines.append("    exports: [")
            for (kind, subject), (responses, importers) in account.exports.items():
                extra = ", response_type: \"stream\"" if responses == "stream" else ""
                targets = ", ".join(_quote(a) for a in sorted(importers))
                lines.append(f"      {{{kind}: {_quote(subject)}, accounts: [{targets}]{extra}}}")
            lines.append("    ]")
        if account.imports:
            lines.append("    imports: [")
            for imp in account.imports.values():
                to = f", to: {_quote(imp.local)}" if imp.local != imp.subject else ""
                lines.append(
                    f"      {{{imp.kind}: {{account: {_quote(imp.source)}, "
                    f"subject: {_quote(imp.subject)}}}{to}}}"
                )
            lines.append("    ]")
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def deployment_users(
    roles_: Iterable[Role], *, password: Callable[[str], str] | None = None
) -> dict[str, tuple[Role, str]]:
    """One user per role, named after it, with a generated password (or ``password(user)``)."""
    make = password or (lambda _user: secrets.token_urlsafe(24))
    return {role.name: (role, make(role.name)) for role in roles_}


def demo_users(
    tenants: Sequence[str], *, password: Callable[[str], str] | None = None,
    partitions: Partitions = SINGLE,
) -> dict[str, tuple[Role, str]]:
    """The demo deployment's users (``roles(tenants)``)."""
    return deployment_users(roles(tenants, partitions=partitions), password=password)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m lockgate.runtime.roles render --tenants a,b [--placeholder-passwords]``.

    Prints the accounts block (for reading, or as the example beside a cluster's
    configuration). To make a deployment's users with their credentials files, use
    ``python -m lockgate.runtime.deployment``.
    """
    parser = argparse.ArgumentParser(prog="python -m lockgate.runtime.roles")
    commands = parser.add_subparsers(dest="command", required=True)
    render = commands.add_parser("render", help="print a nats-server accounts block")
    render.add_argument("--tenants", required=True, help="comma-separated tenant ids")
    render.add_argument("--placeholder-passwords", action="store_true",
                        help="write CHANGE-ME-<user> instead of generated passwords")
    args = parser.parse_args(argv)
    tenants = [t for t in args.tenants.split(",") if t]
    placeholder = (lambda user: f"CHANGE-ME-{user}") if args.placeholder_passwords else None
    try:
        users = demo_users(tenants, password=placeholder)
    except ValueError as exc:
        parser.error(str(exc))
    sys.stdout.write(render_accounts(users))
    return 0


if __name__ == "__main__":
    sys.exit(main())
