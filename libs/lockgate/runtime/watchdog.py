"""End a service process that can no longer work, so that its supervisor starts a fresh one.

Two ways a process can be alive and useless, both seen in practice:

- **Its connection closed for good.** nats-py treats any ``-ERR`` from the server other
  than a stale connection or a permissions violation as fatal and closes the client
  instead of reconnecting (``Client._process_err``); "maximum control line exceeded",
  sent for a subject longer than the server's ``max_control_line``, is one. A pull loop
  that then suppresses the ``ConnectionClosedError`` raised at once, without ever awaiting,
  spins (FastStream's did, ``PullStreamSubscriber._consume_pull``, when services ran on
  it): the event loop never runs another callback, so the process burns a core and even
  SIGTERM, which asyncio delivers as a loop callback, is never handled.
- **Its event loop stalled** for any other reason (a busy loop, a blocking call).

A thread sees both where the loop cannot: it checks the connection and a heartbeat the
loop renews, and exits the process when either is gone. Exiting loses nothing:
unacknowledged messages are redelivered to the next process.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable

log = logging.getLogger("lockgate.watchdog")

#: Exit status of a process the watchdog ended (EX_SOFTWARE): restart it.
EXIT_STUCK = 70
#: A loop that has not run its heartbeat for this long is stalled. Generous: loading a
#: large policy bundle blocks the loop for a second or two, legitimately.
STALL_S = 30.0
#: How often the thread looks.
CHECK_S = 0.5


class Watchdog:
    """Watches one event loop and one connection from a thread of its own."""

    def __init__(
        self,
        closed: Callable[[], bool],
        *,
        stall_s: float = STALL_S,
        check_s: float = CHECK_S,
        exit_process: Callable[[int], None] = os._exit,
    ) -> None:
        self._closed = closed
        self._stall_s = stall_s
        self._check_s = check_s
        self._exit = exit_process
        self._beat_at = time.monotonic()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start watching ``loop`` (call from the loop's thread)."""
        self._loop = loop
        self._beat_at = time.monotonic()
        loop.call_soon(self._beat)
        self._thread = threading.Thread(target=self._watch, name="lockgate-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop watching: the process is shutting down on purpose."""
        self._stopping.set()

    def _beat(self) -> None:
        self._beat_at = time.monotonic()
        if not self._stopping.is_set() and self._loop is not None:
            self._loop.call_later(self._check_s, self._beat)

    def _watch(self) -> None:
        while not self._stopping.wait(self._check_s):
            why = None
            if self._closed():
                why = "the broker connection is closed for good"
            elif time.monotonic() - self._beat_at > self._stall_s:
                why = f"the event loop has not run for {time.monotonic() - self._beat_at:.0f}s"
            if why is not None and not self._stopping.is_set():
                log.critical("%s: exiting with status %d so that a fresh process takes over",
                             why, EXIT_STUCK)
                for handler in logging.getLogger().handlers:
                    handler.flush()
                self._exit(EXIT_STUCK)
                return
