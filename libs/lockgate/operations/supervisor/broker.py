"""The embedded ``nats-server``: the port it takes and the checks that the server answering
there is its own.

Nothing else on the default port is taken over: a NATS server already there belongs to
another run (whose users this one does not know), and anything else is not a broker at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Literal

from lockgate.core.ids import derived_id
from lockgate.operations.cluster import DEFAULT_CLIENT_PORT
from lockgate.operations.natsserver import NatsServer, NatsServerError
from lockgate.operations.supervisor.report import SupervisorError, _say

#: Where the embedded server listens unless told otherwise (the NATS default port), when
#: nothing else listens there; otherwise it takes a free port and says which.
DEFAULT_PORT = DEFAULT_CLIENT_PORT

PortState = Literal["free", "nats", "other"]


async def server_name_at(host: str, port: int, timeout_s: float = 2.0) -> str | None:
    """The ``server_name`` of the NATS server answering on ``host:port`` (its greeting's
    ``INFO``), or ``None`` when none answers there."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
    except (TimeoutError, OSError):
        return None
    try:
        line = await asyncio.wait_for(reader.readline(), timeout_s)
    except (TimeoutError, OSError):
        return None
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    if not line.startswith(b"INFO "):
        return None
    try:
        info = json.loads(line[5:])
    except ValueError:
        return None
    name = info.get("server_name") if isinstance(info, dict) else None
    return name if isinstance(name, str) else None


async def probe_port(host: str, port: int, timeout_s: float = 1.0) -> PortState:
    """Tell whether ``host:port`` is free, served by a NATS server, or taken by something else.

    A NATS server greets every new connection with an ``INFO {...}`` line before the
    client says anything; nothing else on that port is expected to.

    Args:
        host: the address to probe.
        port: the TCP port.
        timeout_s: how long to wait for the connection and for the greeting.

    Returns:
        ``"free"`` when the connection is refused, ``"nats"`` when the greeting is
        NATS's, ``"other"`` otherwise.
    """
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
    except ConnectionRefusedError:
        return "free"
    except (TimeoutError, OSError):
        return "other"
    try:
        greeting = await asyncio.wait_for(reader.readexactly(5), timeout_s)
    except (TimeoutError, OSError, asyncio.IncompleteReadError):
        greeting = b""
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    return "nats" if greeting == b"INFO " else "other"


async def _embedded_server(var_dir: Path, chosen: int | None) -> tuple[str, NatsServer]:
    host = "127.0.0.1"
    port = DEFAULT_PORT if chosen is None else chosen
    state: PortState = "free" if port == 0 else await probe_port(host, port)
    if state != "free" and chosen is None:
        # Only the default was asked for: another run (or anything) may have it.
        _say(f"lockgate: port {port} on {host} is taken (another lockgate run?); the broker "
             "takes a free port")
        port, state = 0, "free"
    if state == "other":
        raise SupervisorError(
            f"port {port} on {host} is taken by something that is not a NATS server; "
            "stop it, choose another port (--port N), or set LOCKGATE_NATS_URL to a running NATS server"
        )
    if state == "nats":
        # Never put the streams on a server this did not start (and whose users it
        # does not know): that takes an explicit LOCKGATE_NATS_URL.
        raise SupervisorError(
            f"a NATS server already listens on {host}:{port} (another lockgate run?); stop it, "
            f"choose another port (--port N), or set LOCKGATE_NATS_URL=nats://{host}:{port} "
            "to use that server"
        )
    # A name of its own, stable for this store: the server that answers on the port must
    # be this one (two runs starting together both find the default port free; the one
    # whose server loses the bind must not take the other's for its own).
    name = "lockgate-" + derived_id("embedded", str(var_dir.resolve()))[:16]
    server = NatsServer(
        store_dir=var_dir / "nats", port=port, log_file=var_dir / "log" / "nats-server.log",
        # The accounts block holds passwords: it stays in its own 0600 file.
        config_text=f"server_name: {name}\ninclude ./accounts.conf",
    )
    try:
        try:
            await asyncio.to_thread(server.start)
            if await server_name_at(host, server.port) != name:
                server.stop()
                raise NatsServerError(f"another server answers on {server.port}")
        except NatsServerError:
            if chosen is not None or port == 0:
                raise
            # The default port was free when probed, and taken since (another run starting).
            server.port = 0
            await asyncio.to_thread(server.start)
    except NatsServerError as exc:
        raise SupervisorError(
            f"the embedded nats-server did not start: {exc} (see {server.log_file})"
        ) from exc
    _say(f"lockgate: embedded nats-server on {server.url}, store {server.store_dir}")
    return server.url, server
