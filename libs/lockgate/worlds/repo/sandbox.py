"""The sandbox a local command runs in, made by bubblewrap (``bwrap``) and checked from inside.

Policy decides whether a command may run at all; this is the second gate, which holds
whatever policy let through. A command runs:

- in a private mount namespace whose root is an empty tmpfs holding only: ``/usr`` and
  the top-level links into it, read-only; the interpreter's installation, read-only, with
  its own ``site-packages`` covered by an empty read-only tmpfs; the test runner's
  packages (``runner_packages`` and what they require), each bound read-only under
  ``/sandbox/site``; the throw-away checkout, read-only at ``/sandbox/src``; a fresh
  ``/proc`` for its own PID namespace with ``/proc/sys`` read-only, a minimal ``/dev``,
  and three size-bounded tmpfs, ``/sandbox/work`` (the checkout's writable copy, where the command
  runs), ``/tmp`` and ``/dev/shm``. Nothing else of the host: not the deployment's tree, its ``var/``
  directory or credentials, not the home directory, not the host's ``/tmp``;
- in its own user, PID, network, IPC, UTS and cgroup namespaces; the network namespace
  holds only a loopback interface of its own, so nothing it opens reaches any outside
  address, the host's loopback included;
- as uid/gid 65534 with no capabilities, ``no_new_privs`` set and further user namespaces
  disabled. When the adapter runs as root the command is also a host user without
  privileges (``host_uid``, 65534 by default): the sources are bound read-only into a
  private staging mount namespace and bubblewrap runs as that user, so a file the
  command can see is checked against an unprivileged user twice;
- with limits (``setrlimit``): CPU seconds, address space, processes, open files, file
  size, no core files; and bounded tmpfs sizes, so it cannot fill a disk;
- with an environment made from nothing (``BASE_ENV``, the runner's names, and what the
  caller adds), standard input closed;
- for at most ``timeout_s`` (then its whole process group, and so its PID namespace, is
  killed), its output (stdout and stderr together) kept up to ``output_max_bytes``.

A guard runs first *inside* the sandbox and checks all of this before it hands over
(``exec``) to the command: the namespaces differ from the adapter's, the network holds
nothing but ``lo``, ``/proc`` shows only the sandbox's processes, the user is who it must
be with no capabilities and cannot make a user namespace, ``/proc/sys`` and every
read-only root refuse a write, none of the paths that must stay hidden exists, the
environment and the limits are exactly those asked for. It reports what it found on a
pipe it closes before the command starts (the command cannot forge the report); the
report is the sandbox's decision the receipt records.

It fails closed: when bubblewrap is missing, a namespace cannot be made, or the guard
finds anything not as it must be, nothing runs and ``SandboxUnavailable`` says why.
There is no fallback to running it without.

Not isolated: the kernel is the host's (a kernel bug is a way out, as for any
namespace sandbox); the files bound read-only can be read (the interpreter, the runner's
packages, ``/usr``); memory is bounded per process (address space), so all of a
command's processes together may use ``processes`` × ``memory_bytes`` plus the tmpfs
sizes; CPU time is bounded per process and wall time for the whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lockgate.worlds.repo.sandbox_guard import GUARD as _GUARD
from lockgate.worlds.repo.sandbox_guard import STAGER as _STAGER
from lockgate.worlds.repo.sandbox_layout import Layout, interpreter_of, make_readable, runner_files

# Looked up here on every run, so what a run laid out can be recorded by replacing it.
from lockgate.worlds.repo.sandbox_layout import layout as _layout
from lockgate.worlds.repo.sandbox_settings import (
    BASE_ENV,
    LIMIT_NAMES,
    NETWORK_SHARED,
    NOT_CONTAINED,
    REASONS,
    SANDBOX_UID,
    SITE,
    SOURCE,
    UNAVAILABLE,
    WORK,
    SandboxSettings,
    SandboxUnavailable,
    limits_of,
)

__all__ = [
    "BASE_ENV",
    "NETWORK_SHARED",
    "NOT_CONTAINED",
    "REASONS",
    "SANDBOX_UID",
    "SITE",
    "SOURCE",
    "UNAVAILABLE",
    "WORK",
    "SandboxOutcome",
    "SandboxSettings",
    "SandboxUnavailable",
    "interpreter_of",
    "limits_of",
    "run_sandboxed",
    "runner_files",
]

_CHUNK = 65536


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
    checks: dict[str, Any] = field(default_factory=dict)
    limits: dict[str, int] = field(default_factory=dict)
    visible: tuple[str, ...] = ()
    host_user: str = ""

    def decision(self) -> dict[str, Any]:
        """The sandbox's decision, as the record keeps it."""
        return {
            "established": True,
            "checked_inside": True,
            "network": "none",
            "netns": self.netns,
            "interfaces": self.interfaces,
            "filesystem": "private",
            "visible": ",".join(self.visible),
            "pid_namespace": "own",
            "processes_visible": self.checks.get("processes_visible"),
            "user": self.checks.get("user"),
            "host_user": self.host_user,
            "capabilities": self.checks.get("capabilities"),
            "user_namespaces": self.checks.get("user_namespaces"),
            "environment": "scrubbed",
            **self.limits,
            "timeout_s": self.timeout_s,
            "timed_out": self.timed_out,
            "exit_code": self.exit_code,
            "duration_ms": self.duration_ms,
            "output_bytes": self.output_bytes,
            "output_truncated": self.output_truncated,
        }


@dataclass(frozen=True)
class _Tools:
    """The programs a run needs, found before anything is made, and the namespaces to differ from."""

    bwrap: str
    #: Set exactly when the adapter is root: it makes the staging mount namespace.
    unshare: str | None
    as_root: bool
    parent: dict[str, str]


@dataclass(frozen=True)
class _Finished:
    """How the command's process ended: the output kept, how much there was, its exit."""

    output: bytes
    output_bytes: int
    returncode: int | None
    timed_out: bool


async def run_sandboxed(
    argv: Sequence[str], cwd: Path, settings: SandboxSettings,
    env: Mapping[str, str] | None = None,
) -> SandboxOutcome:
    """Run ``argv`` on a private copy of ``cwd`` inside the sandbox; wait at most ``settings.timeout_s``.

    Args:
        argv: the command; ``argv[0]`` is found on ``BASE_ENV``'s ``PATH`` inside unless
            absolute (``python`` is the sandbox's interpreter).
        cwd: the checkout it runs on; bound read-only, copied to ``/work`` inside, where it
            runs. Nothing it writes comes back.
        settings: the tools, the limits and what must stay hidden.
        env: names added to ``BASE_ENV`` (nothing else of the adapter's environment passes).

    Returns:
        The outcome, with the sandbox's decision (``decision()``).

    Raises:
        SandboxUnavailable: the sandbox could not be made, or the guard found it not as it
            must be; the command did not run.
    """
    if not argv:
        raise ValueError("no command")
    tools = _find_tools(settings)
    exe, _prefix = interpreter_of(settings)
    command = [exe if argv[0] == "python" else argv[0], *argv[1:]]
    environment = {**BASE_ENV, "PYTHONPATH": SITE, **(env or {})}
    stage = Path(tempfile.mkdtemp(prefix="lockgate-stage-")) if tools.as_root else None
    status_r, status_w = os.pipe()
    handed = False  # the write end goes to _start, which closes it, started or not
    started = time.monotonic()
    try:
        layout = _lay_out(settings, cwd, stage)
        guard = [exe, "-I", "-S", "-c", _GUARD, str(status_w),
                 json.dumps(_guard_spec(tools, settings, layout, environment)), *command]
        wrap = _command_line(tools, settings, layout, environment, guard)
        handed = True
        proc = await _start(wrap, status_w, tools.bwrap)
        finished = await _wait(proc, settings)
        duration_ms = int((time.monotonic() - started) * 1000)
        report = _status(status_r)
    finally:
        if not handed:
            os.close(status_w)
        os.close(status_r)
        if stage is not None:
            shutil.rmtree(stage, ignore_errors=True)
    facts = _facts_if_contained(report, finished)
    return SandboxOutcome(
        netns=str(facts.get("net_namespace", "")), interfaces=str(facts.get("network", "")),
        exit_code=None if finished.timed_out else finished.returncode, timed_out=finished.timed_out,
        duration_ms=duration_ms, output=finished.output.decode(errors="replace"),
        output_bytes=finished.output_bytes, output_truncated=finished.output_bytes > len(finished.output),
        timeout_s=settings.timeout_s, checks=facts,
        limits={LIMIT_NAMES[k]: v for k, v in limits_of(settings).items()}
        | {"workspace_bytes": settings.workspace_bytes},
        visible=layout.visible, host_user=str(settings.host_uid if tools.as_root else os.geteuid()),
    )


def _find_tools(settings: SandboxSettings) -> _Tools:
    """Find bubblewrap (and, as root, ``unshare``) before anything is made; fail closed without."""
    bwrap = shutil.which(settings.bwrap)
    if bwrap is None:
        raise SandboxUnavailable(UNAVAILABLE, f"no {settings.bwrap!r} (bubblewrap) to make the sandbox with")
    parent = _namespaces()
    as_root = os.geteuid() == 0
    unshare = shutil.which(settings.unshare) if as_root else None
    if as_root and unshare is None:
        raise SandboxUnavailable(UNAVAILABLE, f"no {settings.unshare!r} to stage the sandbox with as root")
    return _Tools(bwrap=bwrap, unshare=unshare, as_root=as_root, parent=parent)


def _lay_out(settings: SandboxSettings, cwd: Path, stage: Path | None) -> Layout:
    """Lay the sandbox out; when staging, first let the unprivileged host user read it all."""
    if stage is not None:
        stage.chmod(0o755)
        make_readable(cwd)
    try:
        return _layout(settings, cwd, stage)
    except OSError as exc:
        raise SandboxUnavailable(UNAVAILABLE, f"cannot lay the sandbox out: {exc}") from exc


def _guard_spec(
    tools: _Tools, settings: SandboxSettings, layout: Layout, environment: Mapping[str, str],
) -> dict[str, Any]:
    """What the guard checks inside before it hands over: namespaces, user, paths, environment, limits."""
    return {
        "parent": tools.parent, "uid": SANDBOX_UID, "source": SOURCE, "work": WORK, "cwd": WORK,
        "hidden": sorted(set(settings.hidden)), "readonly": list(layout.readonly),
        "sysctls": ["/proc/sys/kernel/core_pattern", "/proc/sys/vm/overcommit_memory"],
        "env": sorted(environment), "limits": limits_of(settings),
    }


def _command_line(
    tools: _Tools, settings: SandboxSettings, layout: Layout, environment: Mapping[str, str],
    guard: Sequence[str],
) -> list[str]:
    """Bubblewrap's whole command line, running ``guard``; as root, inside the staging namespace."""
    uid = str(SANDBOX_UID)
    wrap = [
        tools.bwrap, "--unshare-all", "--unshare-user", "--uid", uid, "--gid", uid,
        "--disable-userns", "--cap-drop", "ALL", "--die-with-parent", "--new-session",
        "--hostname", "sandbox", *layout.args, "--clearenv",
        *[arg for name, value in sorted(environment.items()) for arg in ("--setenv", name, value)],
        "--chdir", "/", "--", *guard,
    ]
    if not tools.as_root:
        return wrap
    stager = {"binds": layout.binds, "uid": settings.host_uid}
    return [tools.unshare or settings.unshare, "--mount", "--propagation", "private", "--", sys.executable,
            "-I", "-S", "-c", _STAGER, json.dumps(stager), *wrap]


async def _start(wrap: Sequence[str], status_w: int, bwrap: str) -> asyncio.subprocess.Process:
    """Start ``wrap`` in a session of its own, handing it the status pipe's write end (closed here)."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *wrap, cwd="/", env={"PATH": BASE_ENV["PATH"]}, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            start_new_session=True, pass_fds=(status_w,),
        )
    except OSError as exc:
        raise SandboxUnavailable(UNAVAILABLE, f"cannot start {bwrap}: {exc}") from exc
    finally:
        os.close(status_w)
    return proc


async def _wait(proc: asyncio.subprocess.Process, settings: SandboxSettings) -> _Finished:
    """Wait for ``proc`` and read its output (bounded); past the timeout, kill its whole group."""
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
            # Cancelled mid-wait: nothing of the command outlives it (bubblewrap's
            # PID namespace ends with its first process).
            reading.cancel()
            _kill_group(proc.pid)
    return _Finished(output=kept, output_bytes=total, returncode=proc.returncode, timed_out=timed_out)


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


def _namespaces() -> dict[str, str]:
    try:
        return {kind: os.readlink(f"/proc/self/ns/{kind}") for kind in ("net", "pid", "mnt", "user", "ipc", "uts")}
    except OSError as exc:
        raise SandboxUnavailable(UNAVAILABLE, f"cannot tell this process's namespaces: {exc}") from exc


def _facts_if_contained(report: dict[str, Any], finished: _Finished) -> dict[str, Any]:
    """The guard's facts when it found the sandbox as it must be; otherwise why not, raised."""
    if not report:
        raise SandboxUnavailable(UNAVAILABLE, _why_not(finished.output, finished.returncode, finished.timed_out))
    facts: dict[str, Any] = report.get("facts", {})
    failed = list(report.get("failed", ()))
    if report.get("verdict") == "ok":
        return facts
    if failed == ["workspace"]:
        raise SandboxUnavailable(UNAVAILABLE, f"the checkout could not be copied into the workspace "
                                              f"({facts.get('copy_error', '')})")
    reason = NETWORK_SHARED if "network" in failed or "net_namespace" in failed else NOT_CONTAINED
    raise SandboxUnavailable(reason, "the sandbox is not what it must be: " + ", ".join(
        f"{name}={facts.get(name)!r}" for name in failed))


def _status(fd: int) -> dict[str, Any]:
    """What the guard reported (empty when it never ran); every writer is gone by now."""
    os.set_blocking(fd, False)
    try:
        raw = os.read(fd, 1 << 16)
    except BlockingIOError:
        return {}
    try:
        report = json.loads(raw)
    except ValueError:
        return {}
    return report if isinstance(report, dict) else {}


def _why_not(output: bytes, returncode: int | None, timed_out: bool) -> str:
    if timed_out:
        return "the sandbox was not established before the timeout"
    said = output.decode(errors="replace").strip().splitlines()
    return f"the sandbox could not be made (exit {returncode}: {said[-1] if said else 'no output'})"
