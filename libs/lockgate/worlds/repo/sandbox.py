"""The sandbox a local command runs in: no network, a scrubbed environment, a timeout, bounded output.

Policy decides whether a command may run at all; this is the second gate, which holds
whatever policy let through. A command runs:

- in new user, network and PID namespaces (``unshare --user --map-root-user --net
  --pid --fork --kill-child``): its network namespace holds only a loopback interface,
  down, so nothing it opens reaches any address, loopback included; when it ends, or
  is killed, every process it started ends with it;
- behind a guard that runs first *inside* the namespaces and checks them before it
  hands over (``exec``) to the command: the network namespace must differ from the
  adapter's and hold nothing but ``lo``. It reports what it found on a pipe it closes
  before the command starts, so the command cannot forge the report;
- with an environment made from nothing (``BASE_ENV`` plus what the caller names),
  in the directory it is given, standard input closed;
- for at most ``timeout_s``: then its whole process group is killed;
- with its output (stdout and stderr together) kept up to ``output_max_bytes``; the
  rest is read and dropped, so a chatty command cannot block or flood the adapter.

It fails closed: when the namespaces cannot be made (no ``unshare``, no user
namespaces, a guard that finds the network shared) nothing runs, and
``SandboxUnavailable`` says why. There is no fallback to running it without.

Not isolated: the filesystem (the command runs as the adapter's user and can read what
it can; run it on a throw-away copy, as the adapter does), CPU and memory (only time is
bounded).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lockgate.core.errors import LockgateError

UNAVAILABLE = "sandbox.unavailable"
NETWORK_SHARED = "sandbox.network-shared"
#: Every reason code this module produces.
REASONS: tuple[str, ...] = (UNAVAILABLE, NETWORK_SHARED)

#: The whole environment a command starts with (the caller may add names of its own).
BASE_ENV: dict[str, str] = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONHASHSEED": "0",
}
UNSHARE_FLAGS: tuple[str, ...] = (
    "--user", "--map-root-user", "--net", "--pid", "--fork", "--kill-child",
)
_CHUNK = 65536

# Runs inside the namespaces, before the command: argv = status fd, the adapter's
# network namespace, the command. Only the standard library, no site packages.
_GUARD = """
import os, socket, sys
fd, parent, argv = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
ns = os.readlink("/proc/self/ns/net")
names = sorted(name for _, name in socket.if_nameindex())
verdict = "ok" if ns != parent and names == ["lo"] else "shared"
os.write(fd, " ".join([verdict, ns, ",".join(names)]).encode())
os.close(fd)
if verdict != "ok":
    os._exit(97)
try:
    os.execvp(argv[0], argv)
except OSError as exc:
    sys.stderr.write("sandbox: cannot run %s: %s\\n" % (argv[0], exc.strerror))
    os._exit(127)
"""


class SandboxUnavailable(LockgateError):
    """The sandbox could not be made (or was not what it must be): nothing ran."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail, code=reason)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class SandboxSettings:
    """How commands are confined: the ``unshare`` binary, the time and output limits."""

    unshare: str = "unshare"
    timeout_s: float = 10.0
    output_max_bytes: int = 8192


@dataclass(frozen=True)
class SandboxOutcome:
    """How one command ran in the sandbox: the sandbox's own decision and the command's exit."""

    netns: str
    interfaces: str
    exit_code: int | None
    timed_out: bool
    duration_ms: int
    output: str
    output_bytes: int
    output_truncated: bool
    timeout_s: float

    def decision(self) -> dict[str, Any]:
        """The sandbox's decision, as the record keeps it."""
        return {
            "established": True,
            "network": "none",
            "netns": self.netns,
            "interfaces": self.interfaces,
            "environment": "scrubbed",
            "timeout_s": self.timeout_s,
            "timed_out": self.timed_out,
            "exit_code": self.exit_code,
            "duration_ms": self.duration_ms,
            "output_bytes": self.output_bytes,
            "output_truncated": self.output_truncated,
        }


async def _read_bounded(stream: asyncio.StreamReader, limit: int) -> tuple[bytes, int]:
    """Read ``stream`` to its end; keep the first ``limit`` bytes, count them all."""
    kept = bytearray()
    total = 0
    while chunk := await stream.read(_CHUNK):
        total += len(chunk)
        if len(kept) < limit:
            kept.extend(chunk[: limit - len(kept)])
    return bytes(kept), total


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def run_sandboxed(
    argv: Sequence[str], cwd: Path, settings: SandboxSettings,
    env: Mapping[str, str] | None = None,
) -> SandboxOutcome:
    """Run ``argv`` in ``cwd`` inside the sandbox; wait for it, at most ``settings.timeout_s``.

    Args:
        argv: the command (``argv[0]`` found on ``BASE_ENV``'s ``PATH`` unless absolute).
        cwd: where it runs (a throw-away directory: the command may write there).
        settings: the ``unshare`` binary and the limits.
        env: names added to ``BASE_ENV`` (nothing else of the adapter's environment passes).

    Returns:
        The outcome, with the sandbox's decision (``decision()``).

    Raises:
        SandboxUnavailable: the namespaces could not be made, or the guard found the
            network shared; the command did not run.
    """
    if not argv:
        raise ValueError("no command")
    unshare = shutil.which(settings.unshare)
    if unshare is None:
        raise SandboxUnavailable(UNAVAILABLE, f"no {settings.unshare!r} to make namespaces with")
    try:
        parent_ns = os.readlink("/proc/self/ns/net")
    except OSError as exc:
        raise SandboxUnavailable(UNAVAILABLE, f"cannot tell this process's network namespace: {exc}") from exc
    status_r, status_w = os.pipe()
    started = time.monotonic()
    try:
        try:
            proc = await asyncio.create_subprocess_exec(
                unshare, *UNSHARE_FLAGS, "--", sys.executable, "-I", "-S", "-c", _GUARD,
                str(status_w), parent_ns, *argv,
                cwd=cwd, env={**BASE_ENV, **(env or {})}, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
                start_new_session=True, pass_fds=(status_w,),
            )
        except OSError as exc:
            raise SandboxUnavailable(UNAVAILABLE, f"cannot start {unshare}: {exc}") from exc
        finally:
            os.close(status_w)
        if proc.stdout is None:  # pragma: no cover - PIPE was asked for
            raise RuntimeError("no output pipe")
        reading = asyncio.ensure_future(_read_bounded(proc.stdout, settings.output_max_bytes))
        timed_out = False
        try:
            async with asyncio.timeout(settings.timeout_s):
                await proc.wait()
                kept, total = await reading
        except TimeoutError:
            timed_out = True
            _kill_group(proc.pid)
            await proc.wait()
            try:
                async with asyncio.timeout(2.0):
                    kept, total = await reading
            except TimeoutError:  # something outside the group holds the pipe open
                reading.cancel()
                kept, total = b"", 0
        finally:
            if proc.returncode is None:
                # Cancelled mid-wait: nothing of the command outlives it. (Once it exited
                # and was reaped its group id may be reused: the PID namespace ended
                # everything it started already.)
                reading.cancel()
                _kill_group(proc.pid)
        duration_ms = int((time.monotonic() - started) * 1000)
        status = _status(status_r)
    finally:
        os.close(status_r)
    if not status:
        raise SandboxUnavailable(UNAVAILABLE, _why_not(kept, proc.returncode, timed_out))
    verdict, netns, interfaces = (status.split(" ") + ["", ""])[:3]
    if verdict != "ok":
        raise SandboxUnavailable(
            NETWORK_SHARED, f"the command's network namespace {netns} is not isolated ({interfaces})")
    return SandboxOutcome(
        netns=netns, interfaces=interfaces,
        exit_code=None if timed_out else proc.returncode, timed_out=timed_out,
        duration_ms=duration_ms, output=kept.decode(errors="replace"), output_bytes=total,
        output_truncated=total > len(kept), timeout_s=settings.timeout_s,
    )


def _status(fd: int) -> str:
    """What the guard reported (empty when it never ran); every writer is gone by now."""
    os.set_blocking(fd, False)
    try:
        return os.read(fd, 4096).decode(errors="replace").strip()
    except BlockingIOError:
        return ""


def _why_not(output: bytes, returncode: int | None, timed_out: bool) -> str:
    if timed_out:
        return "the sandbox was not established before the timeout"
    said = output.decode(errors="replace").strip().splitlines()
    return f"the namespaces could not be made (exit {returncode}: {said[-1] if said else 'no output'})"
