"""Liveness over core NATS: every process answers ``lg.status.<name>``, and what ``make run`` runs."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence

from nats.aio.client import Client
from nats.errors import Error as NatsError

#: The services ``make run`` supervises; each runs as ``python -m lockgate.<name>``.
SERVICES: tuple[str, ...] = (
    "intake",
    "normalization",
    "policy",
    "approval",
    "executor",
    "reconciler",
)

#: The demo adapters ``make run`` supervises: (status name, python module).
ADAPTERS: tuple[tuple[str, str], ...] = (
    ("adapter.casenotes", "lockgate.worlds.casenotes"),
    ("adapter.items", "lockgate.worlds.items"),
)

#: Everything ``make run`` supervises, in start order: (status name, python module).
CHILDREN: tuple[tuple[str, str], ...] = (
    tuple((name, f"lockgate.{name}") for name in SERVICES) + ADAPTERS
)

#: What a status answer looks like: ``{"service": name, "pid": int, "instance": str}``.
Status = dict[str, object]


def status_subject(name: str) -> str:
    """The request/reply subject on which the process called ``name`` answers."""
    return f"lg.status.{name}"


def status_names() -> tuple[str, ...]:
    """The status names of every service and adapter ``make run`` supervises."""
    return tuple(name for name, _ in CHILDREN)


async def check_status(
    nc: Client, names: Sequence[str], timeout_s: float = 1.0
) -> dict[str, Status | None]:
    """Ask every process in ``names`` for its status, all at once.

    Args:
        nc: a connected client.
        names: status names (``intake``, ``adapter.casenotes``, ...).
        timeout_s: how long to wait for each answer.

    Returns:
        The answer of each name, or ``None`` when nobody answered in time (or the
        answer was not a JSON object).
    """
    answers = await asyncio.gather(*(_ask(nc, name, timeout_s) for name in names))
    return dict(zip(names, answers, strict=True))


async def _ask(nc: Client, name: str, timeout_s: float) -> Status | None:
    try:
        reply = await nc.request(status_subject(name), b"", timeout=timeout_s)
    except (TimeoutError, NatsError):
        # NoRespondersError (nobody subscribed) and TimeoutError both mean "not up".
        return None
    try:
        body = json.loads(reply.data)
    except ValueError:
        return None
    return body if isinstance(body, dict) else None
