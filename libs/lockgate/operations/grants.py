"""What a role is made of: its record, the imports of its account, the grants of the JetStream API.

``Role`` is one row of the role table (``lockgate.operations.roles``): a NATS user's account and
the exact subjects it may publish and subscribe to. ``Import`` is a subject an account outside
``LOCKGATE`` takes from another. The functions below name the JetStream API subjects that one
kind of access needs (bind to and fetch from a pull consumer, read or list or write a bucket,
load or append events), so every role grants such access the same way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from lockgate.contracts import subjects
from lockgate.eventstore.partitions import SINGLE, Partitions
from lockgate.eventstore.subjects import type_filter
from lockgate.runtime import credentials

#: The inbox prefix of trusted processes (nats-py's default).
SERVICE_INBOX = "_INBOX"
#: The account of the trusted processes; the only one with JetStream.
SERVICES_ACCOUNT = "LOCKGATE"
#: The account of hosts, agent runtimes, reviewers and operators.
EDGE_ACCOUNT = "EDGE"
#: The JetStream API as the services' account serves it.
JS_API = credentials.JS_API
#: The same API in an account that imports it (its own ``$JS.API`` would answer instead).
IMPORTED_JS_API = subjects.IMPORTED_JS_API


def adapter_account(name: str) -> str:
    """The account of the adapter process called ``name``."""
    return f"ADAPTER_{checked_token(name, 'adapter name')}"


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


def service_import(subject: str, responses: Literal["single", "stream"] = "single") -> Import:
    """Requests on ``subject`` forwarded from the services' account, under the same name."""
    return Import(subject, subject, "service", responses)


def stream_import(subject: str) -> Import:
    """The services' account's messages on ``subject``, delivered under the same name."""
    return Import(subject, subject, "stream")


def js_import(api_subject: str, responses: Literal["single", "stream"] = "single") -> Import:
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


def direct_get(stream: str, subject: str = "") -> str:
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
    behind it may have answered (``lockgate.runtime.ports.buckets``)."""
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
                 for s in (direct_get(p.stream), f"{JS_API}.STREAM.MSG.GET.{p.stream}"))


def event_append(*event_types: str, partitions: Partitions = SINGLE) -> tuple[str, ...]:
    """Append events of ``event_types`` (and only those) to any aggregate, in any partition."""
    return tuple(type_filter(t, prefix=p.prefix) for p in partitions for t in event_types)



def checked_token(value: str, what: str) -> str:
    """``value`` if it is a subject token (a tenant, a person, an adapter name).

    Raises:
        ValueError: it is not; ``what`` names it in the message.
    """
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", value):
        raise ValueError(f"{what} {value!r} is not a subject token")
    return value
