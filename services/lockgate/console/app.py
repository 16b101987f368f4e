"""The console process: the HTTP API and page, its status and metrics like every process.

It listens on 127.0.0.1 unless ``LOCKGATE_CONSOLE_ADDR`` says otherwise (a container's).

It answers ``lg.status.console`` like every process, with the URL it serves on (the port
may be chosen by the system: ``LOCKGATE_CONSOLE_PORT=0``), so ``make run`` can print it
and tests can find it. Its own NATS user can do nothing but that; everything a person
does goes over their own connection (``lockgate.console.people``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
from collections.abc import Iterator

import msgspec
import uvicorn
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import Error as NatsError

from lockgate.client.tokens import ConsoleInfo, ConsoleSettings, token_key, write_console_info
from lockgate.console.api import create_app
from lockgate.console.people import People, people_of
from lockgate.console.running import Console
from lockgate.contracts import subjects
from lockgate.contracts.status import ProcessStatus
from lockgate.operations.roles import CONSOLE, PROJECTOR
from lockgate.runtime import metrics
from lockgate.runtime.entry import CONFIG_ERROR_EXIT, connect, run_process
from lockgate.runtime.settings import Settings
from lockgate.views.store import Views, ViewsError, open_views

log = logging.getLogger("lockgate.console")



class ConsoleStatus(ProcessStatus, frozen=True, kw_only=True):
    """The console's status answer: a process status and where it serves."""

    url: str = ""


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: the process's loop owns shutdown."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def bind(port: int, addr: str = "127.0.0.1") -> socket.socket:
    """A listening socket on ``addr``, loopback by default (port 0: any free port).

    Raises:
        OSError: the port is taken.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((addr, port))
    except OSError:
        sock.close()
        raise
    sock.listen(128)
    sock.setblocking(False)
    return sock


async def serve(settings: Settings, console_settings: ConsoleSettings, stop: asyncio.Event) -> int:
    """Serve until ``stop`` is set (0), or fail to start (1: the supervisor restarts it;
    ``CONFIG_ERROR_EXIT``: the port it was told to take is not free, and will not be).

    The default port taken (by another run's console) is no error: it serves on a free
    one, and its status answer says which.
    """
    try:
        sock = bind(console_settings.port, console_settings.addr)
    except OSError as exc:
        if "port" in console_settings.model_fields_set:
            log.error("cannot listen on %s:%s: %s (set LOCKGATE_CONSOLE_PORT to a free port)",
                      console_settings.addr, console_settings.port, exc)
            return CONFIG_ERROR_EXIT
        log.warning("port %s is taken (%s); serving on a free port", console_settings.port, exc)
        sock = bind(0, console_settings.addr)
    host = "127.0.0.1" if console_settings.addr in ("0.0.0.0", "") else console_settings.addr
    url = f"http://{host}:{sock.getsockname()[1]}/"
    key = await asyncio.to_thread(token_key, settings, console_settings)
    views = await _open_views(settings)
    people = People(_bare(settings), key, people_of(settings.reviewers, settings.operators),
                    idle_s=console_settings.idle_s)
    nc = await connect(settings, name=f"lockgate-{CONSOLE}", stop=stop)
    console = Console(views, people, poll_s=console_settings.poll_s, lag=lambda: views_lag(nc),
                      sources=settings.partitions.streams)
    app = create_app()
    app.state.console = console
    server = _Server(uvicorn.Config(
        app, log_level=settings.log_level.lower(), access_log=False, lifespan="off",
        timeout_graceful_shutdown=2, server_header=False, proxy_headers=False))
    endpoint = metrics.start_endpoint(settings)
    status = ConsoleStatus(service=CONSOLE, pid=os.getpid(), instance="serving", url=url,
                           metrics=metrics.url_of(endpoint))

    async def answer(msg: Msg) -> None:
        if msg.reply:
            await msg.respond(msgspec.json.encode(status))

    sub = await nc.subscribe(subjects.status(CONSOLE), cb=answer)
    tasks = [asyncio.create_task(server.serve(sockets=[sock])),
             asyncio.create_task(console.follow()),
             asyncio.create_task(people.keep_tidy(console.stopping))]
    with contextlib.suppress(OSError):
        write_console_info(settings.var_dir, ConsoleInfo(url=url, pid=os.getpid()))
    log.info("console at %s", url)
    try:
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({tasks[0], stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        return 0 if stop.is_set() else 1
    finally:
        console.stopping.set()
        server.should_exit = True
        await asyncio.gather(*tasks, return_exceptions=True)
        await people.close()
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
        with contextlib.suppress(Exception):
            await nc.drain()
        views.close()
        sock.close()
        if endpoint is not None:
            endpoint.stop()


async def views_lag(nc: Client, wait_s: float = 0.5) -> int | None:
    """How many events the views lag the stream, as the projecting replica says (None: none said).

    Every projector replica answers its status; only the one projecting has a ``views`` lag.
    """
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    try:
        await nc.publish(subjects.status(PROJECTOR), b"", reply=inbox)
        loop = asyncio.get_running_loop()
        end = loop.time() + wait_s
        while (left := end - loop.time()) > 0:
            try:
                msg = await sub.next_msg(timeout=left)
            except (TimeoutError, NatsError):
                return None
            with contextlib.suppress(ValueError, TypeError, KeyError, AttributeError):
                return int(json.loads(msg.data)["consumers"]["views"]["pending"])
        return None
    finally:
        with contextlib.suppress(NatsError):
            await sub.unsubscribe()


async def _open_views(settings: Settings, attempts: int = 20) -> Views:
    """The views; opening them races the projector's first start (both create the tables),
    and the loser is told so: it tries again shortly.

    Raises:
        ViewsError: still not open after ``attempts`` tries.
    """
    for attempt in range(attempts):
        try:
            return await asyncio.to_thread(open_views, settings.views_url, var_dir=settings.var_dir)
        except ViewsError:
            if attempt == attempts - 1:
                raise
            await asyncio.sleep(0.25)
    raise AssertionError("unreachable")


def _bare(settings: Settings) -> str:
    """The broker's URLs (every node of a cluster) without this process's own user in them
    (people connect as themselves)."""
    return ",".join(u.strip() for u in settings.nats_url.split(",") if u.strip())


def main() -> None:
    """``python -m lockgate.console``: settings from the environment, until SIGTERM."""
    console_settings = ConsoleSettings()
    run_process(CONSOLE, lambda settings, stop: serve(settings, console_settings, stop))
