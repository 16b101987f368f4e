"""The children: one process each, in a process group of its own, started again when it
exits.

A child that exits is started again after a delay that doubles from ``BACKOFF_MIN_S`` up to
``BACKOFF_MAX_S`` (back to the first after it ran ``STABLE_AFTER_S``); one that exits with
``CONFIG_ERROR_EXIT`` cannot run as configured and is not started again. Its output is
appended to ``<var_dir>/log/<label>.log``, and the kernel stops it if the supervisor dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO
from urllib.parse import urlsplit

from lockgate.operations.roles import CONSOLE
from lockgate.operations.status import Status, answer_of
from lockgate.operations.supervisor.report import _say
from lockgate.runtime.entry import CONFIG_ERROR_EXIT
from lockgate.runtime.metrics import CHILD_RESTARTS, CHILD_UP

#: First delay before restarting a child that exited; it doubles up to the maximum.
BACKOFF_MIN_S = 0.5
BACKOFF_MAX_S = 10.0
#: A child that ran this long before exiting starts again from the first delay.
STABLE_AFTER_S = 30.0
#: The setting that names the console's port (``lockgate.client.tokens.ConsoleSettings``).
CONSOLE_PORT_ENV = "LOCKGATE_CONSOLE_PORT"


@dataclass
class _Child:
    name: str
    module: str
    #: Which replica of ``name`` this is (1-based) and how many run.
    replica: int = 1
    replicas: int = 1
    proc: asyncio.subprocess.Process | None = None
    restarts: int = 0
    #: Process groups that may still hold a process of this child's (leader pid = pgid).
    groups: set[int] = field(default_factory=set)
    #: Its own credentials file (None: it inherits the environment's connection settings).
    credentials: Path | None = None
    #: When the current process started, and when it last answered that it is well.
    started_at: float = 0.0
    well_at: float | None = None
    #: Why it was last found unwell (said once per episode).
    unwell: str | None = None
    #: The metrics port it is handed (0: one it chooses).
    metrics_port: int = 0
    #: Why it cannot run as configured (it exited with ``CONFIG_ERROR_EXIT``): it is not
    #: started again.
    failed: str | None = None
    #: Environment it keeps from one start to the next, learned from its answers: the port
    #: the console chose, so that a console started again serves where the run said it does.
    pinned: dict[str, str] = field(default_factory=dict)

    def pin(self, answer: Status | None) -> None:
        """Keep the port the console serves on (``url`` in its answer) for its next starts."""
        url = answer.get("url") if answer is not None else None
        if self.name != CONSOLE or not isinstance(url, str) or CONSOLE_PORT_ENV in self.pinned:
            return
        port = urlsplit(url).port
        if port:
            self.pinned[CONSOLE_PORT_ENV] = str(port)

    @property
    def label(self) -> str:
        """How logs, messages and the targets file name it: ``intake``, or ``intake-2`` of two."""
        return self.name if self.replicas == 1 else f"{self.name}-{self.replica}"

    def answer(self, answers: dict[str, list[Status]]) -> Status | None:
        """Its own status answer among every replica's (matched by process id)."""
        pid = self.proc.pid if self.proc is not None else None
        return answer_of(answers.get(self.name, []), pid, only=self.replicas == 1)


def _child_env(url: str, var_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["LOCKGATE_NATS_URL"] = url
    env["LOCKGATE_VAR_DIR"] = str(var_dir)
    # Logs are files: without this a crash loses the last lines still in the buffer.
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


@functools.cache
def parent_death_signal() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the kernel SIGTERM the child if the supervisor dies.

    Covers the case no signal handler can: the supervisor itself being SIGKILLed.
    Linux only; resolved before fork so the child only makes one system call.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1
    sigterm = int(signal.SIGTERM)

    def preexec() -> None:
        prctl(pr_set_pdeathsig, sigterm)

    return preexec


def _open_log(path: Path, module: str) -> BinaryIO:
    log = open(path, "ab")  # noqa: SIM115 - closed by the caller once the child holds it
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    log.write(f"--- {stamp} lockgate: starting python -m {module}\n".encode())
    log.flush()
    return log


async def _spawn(kid: _Child, env: dict[str, str], log_dir: Path) -> asyncio.subprocess.Process:
    # Its own port (or 0: its own choice), whatever the supervisor's environment says.
    env = {**env, **kid.pinned, "LOCKGATE_METRICS_PORT": str(kid.metrics_port)}
    if kid.credentials is not None:
        env = {**env, "LOCKGATE_CREDENTIALS_FILE": str(kid.credentials)}
    log = await asyncio.to_thread(_open_log, log_dir / f"{kid.label}.log", kid.module)
    with log:
        return await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            kid.module,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=env,
            process_group=0,
            preexec_fn=parent_death_signal(),
        )


async def _keep_running(
    kid: _Child, env: dict[str, str], log_dir: Path, cannot_run: Callable[[_Child], None],
) -> None:
    """Start ``kid`` and start it again whenever it exits; ends by cancellation, or when it
    exits with ``CONFIG_ERROR_EXIT`` (``cannot_run`` is told, once)."""
    loop = asyncio.get_running_loop()
    delay_s = BACKOFF_MIN_S
    while True:
        started = loop.time()
        try:
            proc = await _spawn(kid, env, log_dir)
        except OSError as exc:
            outcome = f"could not start ({exc})"
        else:
            kid.proc = proc
            kid.started_at, kid.well_at, kid.unwell = loop.time(), None, None
            kid.groups.add(proc.pid)
            code = await proc.wait()
            # Whatever the dead child started would otherwise outlive it, orphaned.
            _signal_group(proc.pid, signal.SIGKILL)
            kid.groups.discard(proc.pid)
            if code == CONFIG_ERROR_EXIT:
                kid.failed = await asyncio.to_thread(last_line, log_dir / f"{kid.label}.log")
                CHILD_UP.labels(kid.label).set(0)
                cannot_run(kid)
                return
            outcome = f"exited with {code}"
        if loop.time() - started >= STABLE_AFTER_S:
            delay_s = BACKOFF_MIN_S
        kid.restarts += 1
        CHILD_RESTARTS.labels(kid.label).inc()
        CHILD_UP.labels(kid.label).set(0)
        _say(f"lockgate: {kid.label} {outcome}, restarting (restart #{kid.restarts})")
        await asyncio.sleep(delay_s)
        delay_s = min(delay_s * 2, BACKOFF_MAX_S)


def last_line(log: Path, tail_bytes: int = 4096) -> str:
    """The last line a child wrote to its log (its one-line reason, when it gave one)."""
    try:
        with open(log, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - tail_bytes))
            tail = f.read().decode(errors="replace")
    except OSError:
        return "it gave no reason"
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    said = [line for line in lines if not line.startswith("--- ")]
    # The reason, without the logging prefix (time, process, level, logger) before it.
    return _LOG_PREFIX.sub("", said[-1])[:400] if said else "it gave no reason"


_LOG_PREFIX = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ \S+ [A-Z]+ \S+: ")


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
