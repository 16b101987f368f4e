"""Subjects of the event store, built in one place.

An event's subject is ``lg.evt.<tenant>.<intent>.<version>.<EventType>.<route>``. The
route is the value that decides who acts on the event, for the few events where that
is not their type alone (a ``PolicyDecided`` by its outcome, a ``Reconciled`` by its
resolution), and ``_`` for every other: a consumer filters on it and is handed only
what it acts on. Subjects stored before routes existed have no route token; they still
load, parse and match ``legacy_type_filter``.

The server does not check that ``Nats-Expected-Last-Subject-Sequence-Subject`` matches
the subject being published, so both come from the functions below.
"""

from __future__ import annotations

from typing import NamedTuple

from lockgate.core.ids import is_subject_token

PREFIX = "lg.evt"
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


def _check(tenant: str, intent_id: str) -> None:
    if not is_subject_token(tenant):
        raise ValueError(f"tenant {tenant!r} is not a valid subject token")
    if not is_subject_token(intent_id):
        raise ValueError(f"intent id {intent_id!r} is not a valid subject token")


def event_subject(
    tenant: str, intent_id: str, version: int, event_type: str, route: str = NO_ROUTE
) -> str:
    """Return ``lg.evt.<tenant>.<intent_id>.<version>.<EventType>.<route>``."""
    _check(tenant, intent_id)
    if not is_subject_token(event_type):
        raise ValueError(f"event type {event_type!r} is not a valid subject token")
    if not is_subject_token(route):
        raise ValueError(f"route {route!r} is not a valid subject token")
    return f"{PREFIX}.{tenant}.{intent_id}.{version}.{event_type}.{route}"


def aggregate_filter(tenant: str, intent_id: str) -> str:
    """Return the filter that matches every event of one aggregate."""
    _check(tenant, intent_id)
    return f"{PREFIX}.{tenant}.{intent_id}.>"


def first_event_filter(tenant: str, intent_id: str) -> str:
    """Return the filter that matches the aggregate's first event only."""
    _check(tenant, intent_id)
    return f"{PREFIX}.{tenant}.{intent_id}.1.>"


def type_filter(event_type: str, route: str = "*") -> str:
    """Return the filter that matches one event type (on one route) across all aggregates."""
    return f"{PREFIX}.*.*.*.{event_type}.{route}"


def legacy_type_filter(event_type: str) -> str:
    """The filter of one event type as subjects were before they carried a route."""
    return f"{PREFIX}.*.*.*.{event_type}"


def parse_event_subject(subject: str) -> EventAddress:
    """Split an event subject into its parts.

    Raises:
        NotAnEventSubject: when ``subject`` is not an event subject.
    """
    parts = subject.split(".")
    if len(parts) not in (6, 7) or ".".join(parts[:2]) != PREFIX or not parts[4].isdigit():
        raise NotAnEventSubject(f"not an event subject: {subject!r}")
    return EventAddress(parts[2], parts[3], int(parts[4]), parts[5], *parts[6:])
