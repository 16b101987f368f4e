"""What the ``lockgate run`` and ``lockgate status`` commands do (the CLI only parses)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys

from nats.aio.client import Client
from nats.errors import Error as NatsError

from lockgate.runtime.deployment import Credentials
from lockgate.runtime.settings import Settings
from lockgate.runtime.status import check_status, problem, status_names
from lockgate.runtime.supervisor import DEFAULT_PORT, run_supervisor


def cmd_run(args: argparse.Namespace) -> int:
    """Run the supervisor (``make run``) until a signal stops it.

    Reads, when present on ``args``: ``settings`` (a :class:`Settings`; default: built
    from the environment), ``port`` (the embedded server's port; default 4222) and
    ``embedded`` (default: true unless ``nats_url`` was given explicitly, e.g. through
    ``LOCKGATE_NATS_URL``: then that server is used and nothing is started).

    Returns:
        The supervisor's exit code: 0 after a signal, 2 when it could not start.
    """
    settings = getattr(args, "settings", None) or Settings()
    embedded = getattr(args, "embedded", None)
    if embedded is None:
        embedded = "nats_url" not in settings.model_fields_set
    port = getattr(args, "port", None)
    return asyncio.run(
        run_supervisor(
            settings, embedded=bool(embedded), port=DEFAULT_PORT if port is None else int(port)
        )
    )


async def cmd_status(url: str, credentials: Credentials | None = None) -> int:
    """Print one JSON line per service and adapter: ``{"service", "ok", "pid", "metrics", "problem"}``.

    ``ok`` means it answered and makes progress (see ``status.problem``); ``metrics`` is
    where the process serves its Prometheus metrics (absent when it serves none).

    Returns:
        0 when every service and adapter is OK, 1 otherwise.
    """
    names = status_names()
    answers: dict[str, dict[str, object] | None] = dict.fromkeys(names)
    try:
        nc = await _connect_once(url, credentials)
    except ConnectionError as exc:
        print(f"lockgate: cannot connect to NATS at {url}: {exc}", file=sys.stderr)
        return 1
    try:
        answers = await check_status(nc, names)
    finally:
        with contextlib.suppress(NatsError, OSError):
            await nc.close()
    healthy = True
    for name in names:
        answer = answers[name]
        why = problem(answer)
        healthy = healthy and why is None
        pid = answer.get("pid") if answer is not None else None
        line: dict[str, object] = {"service": name, "ok": why is None, "pid": pid}
        if answer is not None and answer.get("metrics"):
            line["metrics"] = answer["metrics"]
        if why is not None:
            line["problem"] = why
        print(json.dumps(line), flush=True)
    return 0 if healthy else 1


async def _connect_once(url: str, credentials: Credentials | None) -> Client:
    """Connect without retrying: a status check should fail fast, not wait for a server."""

    async def on_error(exc: Exception) -> None:
        return None

    options: dict[str, object] = dict(
        servers=[url], connect_timeout=2, allow_reconnect=False, max_reconnect_attempts=1,
        error_cb=on_error, name="lockgate-status",
    )
    # nats-py drops a server from its pool only after max_reconnect_attempts (> 0)
    # failures; with unlimited attempts a first connection never gives up.
    if credentials is not None:
        options.update(user=credentials.user, password=credentials.password,
                       inbox_prefix=credentials.inbox_prefix)
    nc = Client()
    try:
        await asyncio.wait_for(nc.connect(**options), 5.0)  # type: ignore[arg-type]
    except (TimeoutError, OSError, NatsError) as exc:
        reason = nc.last_error or exc
        with contextlib.suppress(Exception):
            await nc.close()
        raise ConnectionError(repr(reason)) from exc
    return nc
