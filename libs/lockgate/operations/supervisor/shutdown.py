"""Stopping the run: the signals that stop it, and stopping every child's process group
(SIGTERM, then SIGKILL after a grace).
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable, Sequence
from pathlib import Path

from lockgate.operations.supervisor.children import _Child, _signal_group
from lockgate.operations.supervisor.report import _say

#: How long children get between SIGTERM and SIGKILL.
STOP_TIMEOUT_S = 10.0


def _handle_signals(loop: asyncio.AbstractEventLoop, stop: Callable[[], None]) -> list[int]:
    handled: list[int] = []
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        try:
            loop.add_signal_handler(sig, stop)
        except (ValueError, RuntimeError, NotImplementedError):
            # Not the main thread (or no Unix signals): the caller owns shutdown.
            continue
        handled.append(sig)
    return handled


def _live_groups(pgids: set[int]) -> set[int]:
    """The groups among ``pgids`` with a member that is not a zombie.

    ``killpg(g, 0)`` succeeds on zombies too, and orphaned zombies stay until init
    reaps them (which some container inits never do), so Linux reads ``/proc``.
    """
    alive = set()
    for pgid in pgids:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            continue
        except PermissionError:
            pass
        alive.add(pgid)
    proc = Path("/proc")
    if not alive or not proc.is_dir():
        return alive
    running: set[int] = set()
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: fields follow the last ')'.
        fields = stat[stat.rindex(")") + 2 :].split()
        state, pgrp = fields[0], int(fields[2])
        if pgrp in alive and state not in ("Z", "X"):
            running.add(pgrp)
    return running


async def _stop_children(
    kids: Sequence[_Child], tasks: Sequence[asyncio.Task[None]], timeout_s: float
) -> None:
    """Cancel the restart loops, SIGTERM every group, SIGKILL what is left after ``timeout_s``."""
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    groups = {pgid: kid for kid in kids for pgid in kid.groups}
    for pgid in groups:
        _signal_group(pgid, signal.SIGTERM)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while _live_groups(set(groups)) and loop.time() < deadline:
        await asyncio.sleep(0.05)
    for pgid in _live_groups(set(groups)):
        _say(f"lockgate: {groups[pgid].name} did not stop within {timeout_s:g}s; killing it")
        _signal_group(pgid, signal.SIGKILL)
    for kid in kids:
        if kid.proc is not None:
            await kid.proc.wait()
