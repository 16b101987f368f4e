"""The real executor, except that a gate trigger of one intent takes the whole process down.

``LOCKGATE_DOOMED_INTENT`` names the intent; before each death a line goes to
``LOCKGATE_CRASH_LOG`` (``<pid> <intent id> <delivery>``), so a test counts the deaths
across restarts. Whatever the process could count in memory dies with it: only the
server's delivery count can end this.
"""

import os
import signal
from pathlib import Path

from lockgate.eventstore.base import RecordedEvent
from lockgate.executor.app import create_app
from lockgate.executor.handlers import ExecutorHandlers
from lockgate.runtime.entry import run_service

DOOMED = os.environ["LOCKGATE_DOOMED_INTENT"]
DEATHS = Path(os.environ["LOCKGATE_CRASH_LOG"])
_ready = ExecutorHandlers.ready


async def ready(self: ExecutorHandlers, recorded: RecordedEvent, deliveries: int = 1, *,
                timer: str = "") -> None:
    """The gate, unless the trigger is the doomed intent's: then SIGKILL, every time."""
    if recorded.intent_id == DOOMED:
        with open(DEATHS, "a") as log:
            log.write(f"{os.getpid()} {recorded.intent_id} {deliveries}\n")
            log.flush()
            os.fsync(log.fileno())
        os.kill(os.getpid(), signal.SIGKILL)
    await _ready(self, recorded, deliveries, timer=timer)


if __name__ == "__main__":
    ExecutorHandlers.ready = ready  # type: ignore[method-assign]
    run_service(create_app, "executor")
