"""What the ``lockgate run`` and ``lockgate status`` commands do (the CLI only parses)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys

from nats.aio.client import Client
from nats.errors import Error as NatsError

from lockgate.runtime.settings import Settings
from lockgate.runtime.status import check_status, status_names
from lockgate.runtime.supervisor import DEFAULT_PORT, run_supervisor


def cmd_run(args: argparse.Namespace) -> int:
    """Run the supervisor (``make run``) until a signal stops it.

    Reads, when present on ``args``: ``settings`` (a :class:`Settings`; default: built
    from the environment), ``port`` (the embedded server's port; default 4222) and
    ``embedded`` (default: true unless ``nats_url`` was given explicitly, e.g. through
    ``LOCKGATE_NATS_URL``).

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


async def cmd_status(settings: Settings) -> int:
    """Print one JSON line per service and adapter: ``{"service", "ok", "pid"}``.

    Returns:
        0 when every service and adapter answered, 1 otherwise.
    """
    names = status_names()
    answers: dict[str, dict[str, object] | None] = dict.fromkeys(names)
    try:
        nc = await _connect_once(settings)
    except ConnectionError as exc:
        print(f"lockgate: cannot connect to NATS at {settings.nats_url}: {exc}", file=sys.stderr)
    else:
        try:
            answers = await check_status(nc, names)
        finally:
            with contextlib.suppress(NatsError, OSError):
                await nc.close()
    for name in names:
        answer = answers[name]
        pid = answer.get("pid") if answer is not None else None
        print(json.dumps({"service": name, "ok": answer is not None, "pid": pid}), flush=True)
    return 0 if all(answer is not None for answer in answers.values()) else 1


async def _connect_once(settings: Settings) -> Client:
    """Connect without retrying: a status check should fail fast, not wait for a server."""

    async def on_error(exc: Exception) -> None:
        return None

    options = settings.connect_options()
    # nats-py drops a server from its pool only after max_reconnect_attempts (> 0)
    # failures; with the settings' unlimited value a first connection never gives up.
    options.update(
        allow_reconnect=False, max_reconnect_attempts=1, error_cb=on_error, name="lockgate-status"
    )
    nc = Client()
    try:
        await asyncio.wait_for(nc.connect(**options), 5.0)  # type: ignore[arg-type]
    except (TimeoutError, OSError, NatsError) as exc:
        reason = nc.last_error or exc
        with contextlib.suppress(Exception):
            await nc.close()
        raise ConnectionError(repr(reason)) from exc
    return nc
