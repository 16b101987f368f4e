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
client must connect with ``inbox_prefix=role.inbox_prefix``. Services keep ``_INBOX``, the
prefix of the inboxes their pull consumers ask for batches on (``lockgate.runtime.consumer``).

Render a server's ``accounts`` block with::

    python -m lockgate.operations.roles render --tenants tenant-a,tenant-b > accounts.conf
"""

from __future__ import annotations

import argparse
import re
import secrets
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence

from lockgate.contracts import channels, mcp_subjects, subjects
from lockgate.eventstore.partitions import SINGLE, Partitions
from lockgate.operations.accounts import render_accounts
from lockgate.operations.grants import (
    EDGE_ACCOUNT,
    IMPORTED_JS_API,
    JS_API,
    SERVICE_INBOX,
    SERVICES_ACCOUNT,
    Import,
    Role,
    adapter_account,
    adapter_ask,
    checked_token,
    direct_get,
    event_append,
    event_load,
    js_import,
    js_pull,
    kv_list,
    kv_open,
    kv_read,
    kv_write,
    service_import,
    stream_import,
)
from lockgate.runtime import specs
from lockgate.runtime.settings import DEMO_ADAPTERS, DEMO_OPERATORS, DEMO_REVIEWERS, Settings
from lockgate.runtime.spec import ServiceSpec
from lockgate.runtime.streams import (
    BUDGETS_BUCKET,
    CAPABILITIES_BUCKET,
    CATALOGUES_BUCKET,
    EVENTS,
    EXEC,
    LEASES,
    LOCKS_BUCKET,
    POLICY_BUCKET,
    PROGRESS_BUCKET,
    RESPONSES,
    RUNS_BUCKET,
)
from lockgate.runtime.streams import MCP as MCP_RECORDS

__all__ = [
    "ARCHIVER",
    "CONSOLE",
    "DEMO_ADAPTERS",
    "DEMO_OPERATORS",
    "DEMO_REVIEWERS",
    "EDGE_ACCOUNT",
    "IMPORTED_JS_API",
    "JS_API",
    "MCP_ADAPTER",
    "PROJECTOR",
    "REPLAY",
    "SERVICES",
    "SERVICES_ACCOUNT",
    "SERVICE_INBOX",
    "Import",
    "Role",
    "adapter_account",
    "adapter_ask",
    "adapter_role",
    "admin_role",
    "agent_role",
    "archiver_role",
    "console_role",
    "demo_users",
    "deployment_roles",
    "deployment_users",
    "event_append",
    "event_load",
    "host_role",
    "js_pull",
    "kv_list",
    "kv_open",
    "kv_read",
    "kv_write",
    "main",
    "operator_role",
    "projector_role",
    "render_accounts",
    "replay_role",
    "reviewer_role",
    "roles",
    "service_role",
]


def _capability(value: str) -> str:
    if not re.fullmatch(r"[a-z][a-z0-9_-]*(\.[a-z][a-z0-9_-]*)*", value):
        raise ValueError(f"capability {value!r} is not lower-case dotted")
    return value


def _inbox(prefix: str) -> str:
    return f"{prefix}.>"


def _scopes(tenants: Sequence[str] | None) -> list[str]:
    return [checked_token(t, "tenant") for t in tenants] if tenants else [subjects.ANY]


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
        [service_import(subjects.RUN_OPEN_ALL), service_import(subjects.RUN_CLOSE_ALL)], tenants=tenants,
    )


_RESPONSES_GET = js_import(direct_get(RESPONSES, subjects.RESPONSES_ALL))


def agent_role(tenant: str) -> Role:
    """An agent runtime of ``tenant``: turns, candidates, withdrawals and responses of that tenant only."""
    t = checked_token(tenant, "tenant")
    name = f"agent-{t}"
    return _edge(
        name,
        (
            subjects.TURN.pattern(tenant=t),
            subjects.PROPOSE.pattern(tenant=t),
            subjects.WITHDRAW.pattern(tenant=t, user=name),
            js_import(direct_get(RESPONSES, subjects.responses_of(t))).local,
        ),
        [service_import(subjects.TURN_ALL), service_import(subjects.PROPOSE_ALL),
         service_import(subjects.WITHDRAW_ALL), _RESPONSES_GET, stream_import(subjects.RESPONSES_ALL)],
        subscribe=(subjects.responses_of(t),), principal=name, tenants=(t,),
    )


def reviewer_role(person: str, tenants: Sequence[str] | None = None) -> Role:
    """A reviewer (one person): shows and decides the reviews of ``tenants`` (or all)."""
    who = checked_token(person, "reviewer")
    name = f"reviewer-{who}"
    reviews = (subjects.REVIEW.pattern(tenant=t, verb=verb, reviewer=who)
               for t in _scopes(tenants) for verb in subjects.REVIEW_VERBS)
    # The projector's status: whether the review queue it reads is up to date.
    return _edge(
        name, (*reviews, subjects.status(PROJECTOR)),
        [service_import(subjects.REVIEW.tail()), service_import(subjects.STATUS_ALL, "stream")], principal=who,
        tenants=tenants,
    )


def operator_role(person: str, tenants: Sequence[str] | None = None,
                  partitions: Partitions = SINGLE) -> Role:
    """An operator (one person): settles outcomes, withdraws, reads the record and every status.

    The record is read by batched direct gets, whose filter is in the request body, so a
    tenant-scoped operator still reads every tenant's events: give scoped operators
    the projection's views instead (the request subjects themselves are scoped).
    """
    who = checked_token(person, "operator")
    name = f"operator-{who}"
    loads = [js_import(direct_get(p.stream), "stream") for p in partitions]
    return _edge(
        name,
        (
            *(subjects.RESOLVE.pattern(tenant=t, operator=who) for t in _scopes(tenants)),
            *(subjects.WITHDRAW.pattern(tenant=t, user=name) for t in _scopes(tenants)),
            subjects.STATUS_ALL,
            *(load.local for load in loads),
            mcp_subjects.OP.pattern(principal=who),
            # The bundles are every tenant's: only an operator of every tenant manages them.
            *(() if tenants else (subjects.POLICY.pattern(operator=who),)),
        ),
        [service_import(subjects.RESOLVE.tail()), service_import(subjects.WITHDRAW_ALL),
         service_import(subjects.POLICY.tail()),
         service_import(subjects.STATUS_ALL, "stream"), *loads, service_import(mcp_subjects.OPS_ALL)],
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
    reads = [js_import(subject) for bucket in (RUNS_BUCKET, CAPABILITIES_BUCKET) for subject in kv_read(bucket)]
    return _edge(REPLAY, (*(i.local for i in reads), subjects.status(PROJECTOR)),
                 [*reads, service_import(subjects.STATUS_ALL, "stream")])


#: What each service does on NATS, by name: its spec (``lockgate.runtime.specs``).
SERVICES: dict[str, ServiceSpec] = {spec.name: spec for spec in specs.SERVICES}

#: Every bucket ``ports_for`` opens at startup, whatever the service uses.
_OPENED_BY_EVERY_SERVICE = (
    CAPABILITIES_BUCKET, RUNS_BUCKET, CATALOGUES_BUCKET, LOCKS_BUCKET, PROGRESS_BUCKET,
    BUDGETS_BUCKET, POLICY_BUCKET,
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
        publish.append(direct_get(RESPONSES, subjects.RESPONSES_ALL))
    if channels.LEASE in spec.publishes:
        # Who keeps runs' leases reads a lease before renewing it, and lists an ended
        # run's responses (batched direct gets: the request names the subjects).
        publish += (direct_get(LEASES), direct_get(RESPONSES))
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
                    for s in (direct_get(p.stream), f"{JS_API}.STREAM.INFO.{p.stream}"))
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
    who = checked_token(name, "adapter name")
    user = f"adapter-{who}"
    prefix = f"_INBOX_adapter_{who.replace('-', '_')}"
    imports: list[Import] = [js_import(f"{JS_API}.STREAM.INFO.KV_{CAPABILITIES_BUCKET}")]
    subscribe: list[str] = []
    exports: list[str] = [subjects.adapter_status(who)]
    for cap in map(_capability, capabilities):
        consumer = "adapter-" + cap.replace(".", "_")
        imports += [
            service_import(kv_write(CAPABILITIES_BUCKET, cap)[0]),
            js_import(f"{JS_API}.CONSUMER.CREATE.{EXEC}.{consumer}.{subjects.order(cap)}"),
            js_import(f"{JS_API}.CONSUMER.INFO.{EXEC}.{consumer}"),
            js_import(f"{JS_API}.CONSUMER.MSG.NEXT.{EXEC}.{consumer}", "stream"),
            service_import(f"$JS.ACK.{EXEC}.{consumer}.>"),
            service_import(subjects.REPORT.pattern(capability=cap)),
            service_import(subjects.claim(cap)),
            stream_import(subjects.interrupt(cap)),
        ]
        asks = subjects.ADAPTER.pattern(capability=cap)
        subscribe += [asks, subjects.adapter_status(cap), subjects.interrupt(cap)]
        exports += [asks, subjects.adapter_status(cap)]
    if who == MCP_ADAPTER:
        # Its records on LG_MCP (append, and read back by direct get), and the operators'
        # requests it answers.
        imports += [service_import(mcp_subjects.RECORDS_ALL),
                    js_import(direct_get(MCP_RECORDS, mcp_subjects.RECORDS_ALL)),
                    js_import(direct_get(MCP_RECORDS))]
        subscribe.append(mcp_subjects.OPS_ALL)
        exports.append(mcp_subjects.OPS_ALL)
    publish = [i.local for i in imports if i.kind == "service"]
    subscribe += [subjects.adapter_status(who), _inbox(prefix)]
    return Role(
        user, tuple(publish), tuple(subscribe), allow_responses=True, inbox_prefix=prefix,
        account=adapter_account(who), imports=tuple(imports), exports=tuple(exports),
        js_prefix=IMPORTED_JS_API, principal=who,
    )


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



def deployment_roles(settings: Settings) -> list[Role]:
    """Every role of the deployment ``settings`` describe (what ``lockgate run`` makes users for)."""
    return roles(settings.tenants, settings.adapters, reviewers=settings.reviewers,
                 operators=settings.operators, partitions=settings.partitions)


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
    """``python -m lockgate.operations.roles render --tenants a,b [--placeholder-passwords]``.

    Prints the accounts block (for reading, or as the example beside a cluster's
    configuration). To make a deployment's users with their credentials files, use
    ``python -m lockgate.operations.deployment``.
    """
    parser = argparse.ArgumentParser(prog="python -m lockgate.operations.roles")
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
