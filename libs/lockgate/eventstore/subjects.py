"""Subjects of the event store, built in one place.

An event's subject is ``lg.evt.<tenant>.<intent>.<version>.<EventType>.<route>``. The
route is the value that decides who acts on the event, for the few events where that
is not their type alone (a ``PolicyDecided`` by its outcome, a ``Reconciled`` by its
resolution), and ``_`` for every other: a consumer filters on it and is handed only
what it acts on. Subjects stored before routes existed have no route token; they still
load, parse and match ``legacy_type_filter``.

The server does not check that ``Nats-Expected-Last-Subject-Sequence-Subject`` matches
the subject being published, so both come from the functions below.

A partitioned stream's subjects carry its partition after the prefix
(``lg.evt.p<k>.<tenant>...``, ``lockgate.eventstore.partitions``): built with the
partition's prefix, and parsed here with the plain one too.

Every function takes the subject prefix as a keyword (``lg.evt`` unless told): a stream
laid out like ``LG_EVENTS`` under another prefix (a test's own, a second deployment on
one broker) is built and parsed by the same code.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from lockgate.core.ids import is_subject_token

PREFIX = "lg.evt"
#: The subject prefix of a snapshots stream laid out like the events stream.
SNAPSHOTS_PREFIX = "lg.snap"
#: An event's subject as the AsyncAPI document names it.
ADDRESS = f"{PREFIX}.{{tenant}}.{{intent}}.{{version}}.{{EventType}}.{{route}}"
#: The token a partitioned stream's subjects carry after the prefix: ``p<k>``.
_PARTITION = re.compile(r"p[0-9]{1,2}")
#: The route of an event whose type alone says who acts on it.
NO_ROUTE = "_"


class NotAnEventSubject(ValueError):
    """A subject that does not name an event (forged, or from another writer)."""


class EventAddress(NamedTuple):
    """The parts of an event subject."""

    tenant: str
    intent_id: str
    version: int
    event_type: str
    route: str = NO_ROUTE


def check_prefix(prefix: str) -> str:
    """Return ``prefix`` when it can stand before an event's tokens (dotted subject tokens).

    Raises:
        ValueError: an empty token, a wildcard or a space in it.
    """
    if not prefix or not all(is_subject_token(part) for part in prefix.split(".")):
        raise ValueError(f"subject prefix {prefix!r} is not dotted subject tokens")
    return prefix


def _check(tenant: str, intent_id: str) -> None:
    if not is_subject_token(tenant):
        raise ValueError(f"tenant {tenant!r} is not a valid subject token")
    if not is_subject_token(intent_id):
        raise ValueError(f"intent id {intent_id!r} is not a valid subject token")


def event_subject(
    tenant: str, intent_id: str, version: int, event_type: str, route: str = NO_ROUTE,
    *, prefix: str = PREFIX,
) -> str:
    """Return ``lg.evt.<tenant>.<intent_id>.<version>.<EventType>.<route>``."""
    _check(tenant, intent_id)
    if not is_subject_token(event_type):
        raise ValueError(f"event type {event_type!r} is not a valid subject token")
    if not is_subject_token(route):
        raise ValueError(f"route {route!r} is not a valid subject token")
    return f"{prefix}.{tenant}.{intent_id}.{version}.{event_type}.{route}"


def all_events_filter(*, prefix: str = PREFIX) -> str:
    """Return the filter that matches every event (the events stream's subjects)."""
    return f"{prefix}.>"


def aggregate_filter(tenant: str, intent_id: str, *, prefix: str = PREFIX) -> str:
    """Return the filter that matches every event of one aggregate."""
    _check(tenant, intent_id)
    return f"{prefix}.{tenant}.{intent_id}.>"


def intent_filter(intent_id: str, *, prefix: str = PREFIX) -> str:
    """Return the filter that matches every event of one intent id, whatever its tenant.

    For a reader that knows an aggregate by its id alone (the library's recorder
    interface has no tenant); intent ids are derived from the tenant, so one id never
    names aggregates of two tenants.
    """
    if not is_subject_token(intent_id):
        raise ValueError(f"intent id {intent_id!r} is not a valid subject token")
    return f"{prefix}.*.{intent_id}.>"


def first_event_filter(tenant: str, intent_id: str, *, prefix: str = PREFIX) -> str:
    """Return the filter that matches the aggregate's first event only."""
    _check(tenant, intent_id)
    return f"{prefix}.{tenant}.{intent_id}.1.>"


def type_filter(
    event_type: str, route: str = "*", *, tenant: str = "*", prefix: str = PREFIX
) -> str:
    """Return the filter that matches one event type (on one route) across all aggregates
    (of one tenant, when told)."""
    return f"{prefix}.{tenant}.*.*.{event_type}.{route}"


def legacy_type_filter(event_type: str, *, prefix: str = PREFIX) -> str:
    """The filter of one event type as subjects were before they carried a route."""
    return f"{prefix}.*.*.*.{event_type}"


def parse_event_subject(subject: str, *, prefix: str = PREFIX) -> EventAddress:
    """Split an event subject into its parts.

    Raises:
        NotAnEventSubject: when ``subject`` is not an event subject.
    """
    head = prefix + "."
    parts = subject[len(head):].split(".") if subject.startswith(head) else []
    if len(parts) == 6 and _PARTITION.fullmatch(parts[0]):
        parts = parts[1:]  # a partitioned stream's subject (``lockgate.eventstore.partitions``)
    if len(parts) not in (4, 5) or not parts[2].isdigit():
        raise NotAnEventSubject(f"not an event subject: {subject!r}")
    return EventAddress(parts[0], parts[1], int(parts[2]), parts[3], *parts[4:])
