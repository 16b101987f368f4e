"""Run one service process: logging, signals, the FastStream app from its factory."""

from __future__ import annotations

import asyncio
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
    asyncio.run(app.run())
