"""Run one Lockgate process: logging, signals, the app, a watchdog, and how it stops.

Every process stops within seconds of SIGTERM or SIGINT whatever it is doing (waiting
for a broker, reconnecting, shutting down), and one that cannot run as configured says
so in one line on stderr and exits with ``CONFIG_ERROR_EXIT``.
"""

from __future__ import annotations

import asyncio
import contextlib
import cProfile
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Protocol, TypeVar

import nats
from nats.aio.client import Client
from nats.errors import Error as NatsError
from pydantic import ValidationError

from lockgate.core.errors import LockgateError
from lockgate.runtime import loop
from lockgate.runtime.credentials import CredentialsError
from lockgate.runtime.settings import Settings
from lockgate.runtime.watchdog import Watchdog

T = TypeVar("T")

#: The exit status of a process that cannot start as configured (a credentials file
#: missing, a setting malformed): sysexits' EX_CONFIG. Restarting it changes nothing.
CONFIG_ERROR_EXIT = 78

#: After SIGTERM or SIGINT a process's own shutdown (settling what it holds, draining its
#: connection) has this long; then it is cancelled, and ``EXIT_AFTER_S`` after the signal
#: the process exits whatever still holds it. Inside a supervisor's ten seconds between
#: SIGTERM and SIGKILL.
STOP_GRACE_S = 4.0
EXIT_AFTER_S = 7.0

#: A broker connection's failures are logged one line each, the same one at most this often.
CONNECT_LOG_EVERY_S = 30.0
#: Nothing is logged of a first connection's failures this early: a broker refusing the
#: user resets the connection too, and the refusal is what is said.
CONNECT_QUIET_S = 2.0

log = logging.getLogger(__name__)


class Stopped(LockgateError):
    """A signal came before the process was connected: nothing to shut down but itself."""

    def __init__(self) -> None:
        super().__init__("stopped before connecting", code="process.stopped")


class ConfigurationError(LockgateError):
    """This process cannot run as configured; the message says what to change."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="process.misconfigured")


def _refused(exc: BaseException) -> bool:
    """True when ``exc`` is the broker refusing the connection's user (nats-py raises it
    as a plain ``Error`` from the handshake, or ``AuthorizationError`` later)."""
    return isinstance(exc, NatsError) and "authorization" in str(exc).lower()


def configuration_problem(exc: BaseException) -> str | None:
    """One line saying what is wrong with the configuration, when ``exc`` is about it; else None."""
    if isinstance(exc, BaseExceptionGroup):  # a task group's failure carries the configuration's
        return next((line for e in exc.exceptions if (line := configuration_problem(e))), None)
    if isinstance(exc, ConfigurationError):
        return str(exc)
    if isinstance(exc, CredentialsError):
        return (f"{exc}: set LOCKGATE_CREDENTIALS_FILE to this process's own credentials file "
                "(`lockgate run` writes one per process under <var>/credentials/)")
    # Only a settings model's: a message's own validation failing is no configuration.
    if isinstance(exc, ValidationError) and exc.title.endswith("Settings"):
        wrong = "; ".join(
            f"{'.'.join(str(p) for p in error['loc']) or 'settings'}: {error['msg']}"
            for error in exc.errors()[:3])
        return f"malformed settings ({exc.title}): {wrong}"
    if _refused(exc):
        return refused_line(None)
    return None


def refused_line(url: str | None, user: str | None = None) -> str:
    """What to say when the broker refused this process's user."""
    who = f"user {user!r}" if user else "no user"
    where = f"the broker at {url}" if url else "the broker"
    return (f"{where} refused the connection ({who}: authorization violation): set "
            "LOCKGATE_CREDENTIALS_FILE to this process's own credentials file")


@contextlib.contextmanager
def exit_if_misconfigured(name: str) -> Iterator[None]:
    """Turn a configuration error raised inside into one line on stderr and ``CONFIG_ERROR_EXIT``.

    Raises:
        SystemExit: with ``CONFIG_ERROR_EXIT``, for a configuration error; other errors pass.
    """
    try:
        yield
    except BaseException as exc:
        line = configuration_problem(exc)
        if line is None:
            raise
        print(f"lockgate {name}: {line}", file=sys.stderr, flush=True)
        raise SystemExit(CONFIG_ERROR_EXIT) from None


def _exit_now(name: str) -> None:
    """End the process from the timer thread: the signal came ``EXIT_AFTER_S`` ago."""
    log.error("%s: still not stopped %.0f s after the signal; exiting", name, EXIT_AFTER_S)
    logging.shutdown()
    os._exit(1)


def quiet_errors(name: str) -> Callable[[Exception], Awaitable[None]]:
    """A NATS ``error_cb`` that logs one line per failure (the same one at most every
    ``CONNECT_LOG_EVERY_S``) instead of nats-py's traceback on every attempt."""
    said: dict[str, float] = {}

    async def on_error(exc: Exception) -> None:
        line = f"{type(exc).__name__}: {exc}"
        now = time.monotonic()
        if now - said.get(line, -CONNECT_LOG_EVERY_S) >= CONNECT_LOG_EVERY_S:
            said[line] = now
            log.warning("%s: broker connection: %s", name, line)

    return on_error


async def connect(
    settings: Settings, *, name: str, stop: asyncio.Event | None = None, **extra: Any
) -> Client:
    """Connect as this process's user, waiting for the broker until connected or ``stop`` is set.

    Each failure is one log line. A broker that answers but refuses the user is a
    configuration error: waiting would not change it.

    Raises:
        ConfigurationError: the broker refused the credentials, or there are none to read.
        Stopped: ``stop`` was set first (``until_signalled`` takes it for a clean stop).
    """
    options: dict[str, Any] = {**settings.connect_options(), "name": name, **extra}
    errors = quiet_errors(name)
    running = asyncio.get_running_loop()
    refused = running.create_future()
    quiet_until = running.time() + CONNECT_QUIET_S

    async def on_error(exc: Exception) -> None:
        if _refused(exc) and not refused.done():
            refused.set_result(None)  # said once, as the error it raises
            return
        if running.time() >= quiet_until:
            await errors(exc)

    options["error_cb"] = on_error
    connecting = asyncio.ensure_future(nats.connect(**options))
    stopping = asyncio.ensure_future(stop.wait() if stop is not None else asyncio.Event().wait())
    either: set[asyncio.Future[Any]] = {connecting, refused, stopping}
    try:
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
        if not connecting.done():
            connecting.cancel()
            with contextlib.suppress(BaseException):
                await connecting
    if not connecting.cancelled():
        refused.cancel()
        return connecting.result()
    if not refused.done():
        raise Stopped()
    user = options.get("user")
    raise ConfigurationError(refused_line(settings.nats_url, user if isinstance(user, str) else None))


async def until_signalled(main: Callable[[asyncio.Event], Awaitable[T]], *, name: str) -> T | None:
    """Run ``main(stop)``; SIGINT or SIGTERM sets ``stop``, and ``main`` has ``STOP_GRACE_S`` to return.

    After that (or at a second signal) it is cancelled. Whatever still holds the process
    then (a finalizer blocked on a dead connection, a task of a client library that does
    not end when the loop cancels it at its close) ends with it ``EXIT_AFTER_S`` after
    the signal. Returns what ``main`` returned, or ``None`` when it was cancelled.
    """
    running = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals = 0

    def on_signal() -> None:
        nonlocal signals
        signals += 1
        stop.set()
        if signals == 1:
            # A thread: it ends the process even where the loop itself no longer turns.
            deadline = threading.Timer(EXIT_AFTER_S, _exit_now, (name,))
            deadline.daemon = True  # a process that stops in time does not wait for it
            deadline.start()
        else:
            task.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM):
        running.add_signal_handler(sig, on_signal)
    task = asyncio.ensure_future(main(stop))
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            done, _ = await asyncio.wait({task}, timeout=STOP_GRACE_S)
            if not done:
                log.warning("%s: not stopped %.0f s after the signal; cancelling", name, STOP_GRACE_S)
                task.cancel()
                await asyncio.wait({task})
        if task.cancelled() or isinstance(task.exception(), Stopped):
            return None
        return task.result()
    finally:
        stopping.cancel()
        for sig in (signal.SIGINT, signal.SIGTERM):
            running.remove_signal_handler(sig)


class Host(Protocol):
    """A service process the entry runs (``lockgate.runtime.host.ServiceHost``)."""

    def check(self) -> None:
        """Raise when it cannot run as built (before anything connects)."""

    def closed(self) -> bool:
        """True once its broker connection closed for good."""

    async def serve(self, stop: asyncio.Event, watchdog: Watchdog | None = None) -> None:
        """Run until ``stop`` is set, watched by ``watchdog`` from ready to stop."""


def run_service(create_app: Callable[[Settings], Host], name: str) -> None:
    """Build settings from the environment, then run the service until SIGINT/SIGTERM.

    A signal stops it within seconds whatever it is doing (``until_signalled``). A
    configuration it cannot run with (settings, credentials, the broker refusing its
    user) is one line on stderr and ``CONFIG_ERROR_EXIT``. While it runs, a watchdog ends
    the process when its connection closes for good or its loop stalls.
    """
    with exit_if_misconfigured(name):
        _run_service(create_app, name)


def _run_service(create_app: Callable[[Settings], Host], name: str) -> None:
    settings = Settings()
    logging.basicConfig(
        level=settings.log_level,
        format=f"%(asctime)s {name} %(levelname)s %(name)s: %(message)s",
    )
    host = create_app(settings)
    host.check()
    # Only for a process of its own (the supervisor restarts it): the watchdog ends the
    # whole process, so hosts run inside another program (tests) are not watched.
    watchdog = Watchdog(host.closed)

    async def run() -> None:
        await until_signalled(lambda stop: host.serve(stop, watchdog), name=name)

    if settings.profile_dir is None:
        loop.run(run())
        return
    # A profile of the whole process, written when it stops (for `make bench` work).
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        loop.run(run())
    finally:
        profiler.disable()
        settings.profile_dir.mkdir(parents=True, exist_ok=True)
        profiler.dump_stats(settings.profile_dir / f"{name}.prof")


def run_process(name: str, serve: Callable[[Settings, asyncio.Event], Awaitable[int]]) -> None:
    """Run a process that is not a service host (the read side) until SIGINT/SIGTERM.

    Settings from the environment, logging, the signals setting ``stop`` (``until_signalled``);
    the process exits with what ``serve(settings, stop)`` returns (non-zero: the supervisor
    restarts it), 0 when it had to be cancelled after a signal, ``CONFIG_ERROR_EXIT`` with
    one line on stderr when it cannot run as configured.
    """
    with exit_if_misconfigured(name):
        settings = Settings()
        logging.basicConfig(level=settings.log_level,
                            format=f"%(asctime)s {name} %(levelname)s %(name)s: %(message)s")

        async def run() -> int:
            return await until_signalled(lambda stop: serve(settings, stop), name=name) or 0

        code = loop.run(run())
    raise SystemExit(code)
