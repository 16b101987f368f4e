"""Run one service process: logging, signals, the FastStream app from its factory, a watchdog."""

from __future__ import annotations

import asyncio
import cProfile
import logging
import signal
from collections.abc import Awaitable, Callable

from faststream import FastStream
from faststream.nats import NatsBroker

from lockgate.runtime import loop
from lockgate.runtime.settings import Settings
from lockgate.runtime.watchdog import Watchdog

#: The exit status of a process that cannot start as configured (a credentials file
#: missing, a setting malformed): sysexits' EX_CONFIG. Restarting it changes nothing.
CONFIG_ERROR_EXIT = 78


def run_service(create_app: Callable[[Settings], FastStream], name: str) -> None:
    """Build settings from the environment, then run the app until SIGINT/SIGTERM."""
    settings = Settings()
    logging.basicConfig(
        level=settings.log_level,
        format=f"%(asctime)s {name} %(levelname)s %(name)s: %(message)s",
    )
    app = create_app(settings)
    guard(app)
    if settings.profile_dir is None:
        loop.run(app.run())
        return
    # A profile of the whole process, written when it stops (for `make bench` work).
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        loop.run(app.run())
    finally:
        profiler.disable()
        settings.profile_dir.mkdir(parents=True, exist_ok=True)
        profiler.dump_stats(settings.profile_dir / f"{name}.prof")


def run_process(name: str, serve: Callable[[Settings, asyncio.Event], Awaitable[int]]) -> None:
    """Run a process that is not a FastStream app (the read side) until SIGINT/SIGTERM.

    Settings from the environment, logging, the signals setting ``stop``; the process
    exits with what ``serve(settings, stop)`` returns (non-zero: the supervisor restarts it).
    """
    settings = Settings()
    logging.basicConfig(level=settings.log_level,
                        format=f"%(asctime)s {name} %(levelname)s %(name)s: %(message)s")

    async def run() -> int:
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
        return await serve(settings, stop)

    raise SystemExit(loop.run(run()))


def guard(app: FastStream) -> Watchdog:
    """Exit the process when the app's broker connection closes for good or its loop stalls.

    Only for a process of its own (the supervisor restarts it): the watchdog ends the
    whole process, so apps run inside another program (tests) are not guarded.

    Raises:
        TypeError: the app's broker is not a NATS broker.
    """
    broker = app.broker
    if not isinstance(broker, NatsBroker):
        raise TypeError(f"not a NATS broker: {broker!r}")

    def closed() -> bool:
        try:
            return bool(broker.connection.is_closed)
        except Exception:  # noqa: BLE001 - no connection yet, or FastStream let go of it
            return False

    watchdog = Watchdog(closed)

    @app.after_startup
    async def watch() -> None:
        watchdog.start(asyncio.get_running_loop())

    @app.on_shutdown
    async def unwatch() -> None:
        watchdog.stop()

    return watchdog
