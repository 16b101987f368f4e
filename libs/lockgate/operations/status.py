"""Liveness over core NATS: every process answers ``lg.status.<name>``, and what ``make run`` runs."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping, Sequence

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import Error as NatsError

from lockgate.contracts import subjects
from lockgate.contracts.status import ConsumerProgress as ConsumerProgress
from lockgate.contracts.status import ProcessStatus as ProcessStatus
from lockgate.runtime import specs

#: The services ``make run`` supervises (their specs); each runs as ``python -m lockgate.<name>``.
SERVICES: tuple[str, ...] = tuple(spec.name for spec in specs.SERVICES)

#: The demo adapters ``make run`` supervises (their specs): (status name, python module).
ADAPTERS: tuple[tuple[str, str], ...] = tuple((a.status_name, a.module) for a in specs.ADAPTERS)

#: The read side ``make run`` supervises: the projector, which keeps the views, the
#: archiver, which moves what they hold out of the hot store, and the console, which
#: serves them (and people's decisions) over HTTP.
READ_SIDE: tuple[tuple[str, str], ...] = (
    ("projector", "lockgate.projector"), ("archiver", "lockgate.archiver"),
    ("console", "lockgate.console"))

#: Everything ``make run`` supervises, in start order: (status name, python module).
CHILDREN: tuple[tuple[str, str], ...] = (
    tuple((spec.status_name, spec.module) for spec in specs.SERVICES) + READ_SIDE + ADAPTERS
)

#: What a status answer looks like: ``{"service": name, "pid": int, "instance": str, ...}``.
Status = dict[str, object]

#: A durable with undelivered work and nothing settled for this long, or a handler
#: running this long, is stuck: ``lockgate status`` says so and the supervisor restarts it.
STALL_S = 30.0


def problem(answer: Status | None, stall_s: float = STALL_S) -> str | None:
    """Why a process is not OK, or ``None`` when it is: no answer, not ready, or stuck.

    A durable is stuck when one of its handlers has run for ``stall_s``, or when the
    server holds undelivered messages for it and the process has settled none for
    ``stall_s``. Timers (messages waiting out a delay) are not undelivered work.
    """
    if answer is None:
        return "no answer"
    try:
        status = msgspec.convert(answer, type=ProcessStatus)
    except msgspec.ValidationError:
        return None  # an adapter or an older process: it answered, that is all it says
    if not status.ready:
        return "not connected"
    for name, c in sorted(status.consumers.items()):
        if c.busy_s >= stall_s:
            return f"{name}: a handler has run for {c.busy_s:g}s"
        if c.pending > 0 and c.idle_s >= stall_s:
            return f"{name}: {c.pending} waiting, nothing settled for {c.idle_s:g}s"
    return None


def child_user(name: str) -> str:
    """The NATS user a supervised child connects as (``adapter.casenotes`` → ``adapter-casenotes``)."""
    return name.replace("adapter.", "adapter-", 1) if name.startswith("adapter.") else name


def status_subject(name: str) -> str:
    """The request/reply subject on which the process called ``name`` answers."""
    return subjects.status(name)


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


async def gather_status(
    nc: Client, expected: Mapping[str, int], timeout_s: float = 1.0
) -> dict[str, list[Status]]:
    """Ask every process for its status and collect the answer of each replica.

    Every replica of a process answers ``lg.status.<name>`` (no queue group), so one
    request brings one answer per running replica; the wait for a name ends when
    ``expected[name]`` answers arrived, or after ``timeout_s``.

    Args:
        nc: a connected client (in an account whose status import passes a stream of
            responses: ``LOCKGATE``, or an operator's or reviewer's ``EDGE``).
        expected: status name → how many replicas should answer.
        timeout_s: the longest wait for the answers of one name.

    Returns:
        Each name's answers (JSON objects), in arrival order; empty when none came.
    """
    names = list(expected)
    answers = await asyncio.gather(*(_collect(nc, n, expected[n], timeout_s) for n in names))
    return dict(zip(names, answers, strict=True))


async def _collect(nc: Client, name: str, count: int, timeout_s: float) -> list[Status]:
    got: list[Status] = []
    done = asyncio.Event()

    async def received(msg: Msg) -> None:
        with contextlib.suppress(ValueError):
            body = json.loads(msg.data)
            # A no-responders status has no body: nobody runs.
            if isinstance(body, dict):
                got.append(body)
        if len(got) >= count:
            done.set()

    inbox = nc.new_inbox()
    try:
        sub = await nc.subscribe(inbox, cb=received)
        await nc.publish(status_subject(name), b"", reply=inbox)
    except NatsError:
        return got
    try:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), timeout_s)
    finally:
        with contextlib.suppress(NatsError):
            await sub.unsubscribe()
    return got


def answer_of(answers: Sequence[Status], pid: int | None, *, only: bool) -> Status | None:
    """The answer of the replica whose process id is ``pid``.

    ``only``: that replica is the only one of its name, so an answer that names no pid
    (an older process) is still its own.
    """
    for answer in answers:
        if pid is not None and answer.get("pid") == pid:
            return answer
    if only and answers and all(a.get("pid") is None for a in answers):
        return answers[0]
    return None


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
