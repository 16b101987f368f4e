"""Run one service process: logging, signals, the FastStream app from its factory."""

from __future__ import annotations

import asyncio
import cProfile
import logging
from collections.abc import Callable

from faststream import FastStream

from lockgate.runtime.settings import Settings


def run_service(create_app: Callable[[Settings], FastStream], name: str) -> None:
    """Build settings from the environment, then run the app until SIGINT/SIGTERM."""
    settings = Settings()
    logging.basicConfig(
        level=settings.log_level,
        format=f"%(asctime)s {name} %(levelname)s %(name)s: %(message)s",
    )
    app = create_app(settings)
    if settings.profile_dir is None:
        asyncio.run(app.run())
        return
    # A profile of the whole process, written when it stops (for `make bench` work).
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        asyncio.run(app.run())
    finally:
        profiler.disable()
        settings.profile_dir.mkdir(parents=True, exist_ok=True)
        profiler.dump_stats(settings.profile_dir / f"{name}.prof")
