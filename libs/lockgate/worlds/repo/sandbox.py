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
import functools
import importlib.metadata
import json
import os
import re
import shutil
import signal
import sys
import sysconfig
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lockgate.core.errors import LockgateError

UNAVAILABLE = "sandbox.unavailable"
NETWORK_SHARED = "sandbox.network-shared"
NOT_CONTAINED = "sandbox.not-contained"
#: Every reason code this module produces.
REASONS: tuple[str, ...] = (UNAVAILABLE, NETWORK_SHARED, NOT_CONTAINED)

#: The whole environment a command starts with (the caller may add names of its own).
BASE_ENV: dict[str, str] = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONHASHSEED": "0",
    "PYTHONNOUSERSITE": "1",
    "HOME": "/tmp",
    "TMPDIR": "/tmp",
}
#: Where things are inside the sandbox.
SITE = "/sandbox/site"
SOURCE = "/sandbox/src"
WORK = "/sandbox/work"
SANDBOX_UID = 65534
_CHUNK = 65536
_TOP_LEVEL = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")

# Runs inside the sandbox, as the sandbox's user, before the command: argv = status fd,
# the checks as JSON, the command. Only the standard library, no site packages.
_GUARD = r"""
import ctypes, errno, json, os, resource, shutil, socket, sys
fd, spec, argv = int(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3:]
failed, facts = [], {}

def check(name, ok, fact):
    facts[name] = fact
    if not ok:
        failed.append(name)

def refuses_write(path):
    try:
        probe = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600) if os.path.isdir(os.path.dirname(path)) else None
    except OSError as exc:
        return exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOENT)
    if probe is None:
        return True
    os.close(probe)
    os.unlink(path)
    return False

def opens_for_write(path):
    try:
        os.close(os.open(path, os.O_WRONLY))
    except OSError:
        return False
    return True

try:
    shutil.copytree(spec["source"], spec["work"], symlinks=True, dirs_exist_ok=True)
    copied = True
except OSError as exc:
    copied = False
    facts["copy_error"] = "%s: %s" % (type(exc).__name__, exc.strerror or exc)
check("workspace", copied, spec["work"])

ns = {kind: os.readlink("/proc/self/ns/" + kind) for kind in ("net", "pid", "mnt", "user", "ipc", "uts")}
for kind, own in ns.items():
    check(kind + "_namespace", own != spec["parent"].get(kind), own)
names = sorted(name for _, name in socket.if_nameindex())
check("network", ns["net"] != spec["parent"]["net"] and names == ["lo"], ",".join(names))
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
check("processes_visible", len(pids) <= 3, len(pids))
status = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\t" in line)
caps = {k: int(status[k], 16) for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")}
check("user", os.getuid() == os.geteuid() == spec["uid"] and os.getgid() == spec["uid"] and os.getuid() != 0,
      os.getuid())
check("capabilities", not any(caps.values()) and status.get("NoNewPrivs", "").strip() == "1",
      "none" if not any(caps.values()) else repr(caps))
try:
    libc = ctypes.CDLL(None, use_errno=True)
    made = libc.unshare(0x10000000) == 0  # CLONE_NEWUSER
except (OSError, AttributeError):
    made = True
check("user_namespaces", not made, "made" if made else "disabled")
check("proc_sys", not any(opens_for_write(p) for p in spec["sysctls"]), "read-only")
check("hidden", not [p for p in spec["hidden"] if os.path.lexists(p)],
      [p for p in spec["hidden"] if os.path.lexists(p)])
probe = ".lockgate-probe-%d" % os.getpid()
check("read_only", all(refuses_write(os.path.join(root, probe)) for root in spec["readonly"]),
      len(spec["readonly"]))
# bubblewrap names the directory it started in (PWD); nothing else may be there.
seen = sorted(name for name in os.environ if name != "PWD")
check("environment", seen == sorted(spec["env"]), seen)
limits = spec["limits"]
for name, value in limits.items():
    which = getattr(resource, name)
    try:
        resource.setrlimit(which, (value, value))
    except (OSError, ValueError) as exc:
        facts["limit_error_" + name] = str(exc)
    check(name, resource.getrlimit(which) == (value, value), value)
verdict = "ok" if not failed else "refused"
os.write(fd, json.dumps({"verdict": verdict, "failed": failed, "facts": facts}).encode())
os.close(fd)
if verdict != "ok":
    os._exit(97)
os.chdir(spec["cwd"])
os.environ["PWD"] = spec["cwd"]
try:
    os.execvp(argv[0], argv)
except OSError as exc:
    sys.stderr.write("sandbox: cannot run %s: %s\n" % (argv[0], exc.strerror))
    os._exit(127)
"""

# Runs as root outside the sandbox, in a private mount namespace of its own: binds each
# source read-only onto its staging place, drops to the host user, and becomes bubblewrap.
_STAGER = r"""
import ctypes, json, os, sys
spec, argv = json.loads(sys.argv[1]), sys.argv[2:]
libc = ctypes.CDLL(None, use_errno=True)
MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC = 1, 32, 4096, 16384
for source, target in spec["binds"]:
    for flags in (MS_BIND | MS_REC, MS_BIND | MS_REMOUNT | MS_RDONLY):
        if libc.mount(source.encode(), target.encode(), None, flags, None) != 0:
            err = ctypes.get_errno()
            sys.stderr.write("sandbox: cannot stage %s: %s\n" % (source, os.strerror(err)))
            os._exit(96)
os.setgroups([])
os.setresgid(spec["uid"], spec["uid"], spec["uid"])
os.setresuid(spec["uid"], spec["uid"], spec["uid"])
os.execv(argv[0], argv)
"""


class SandboxUnavailable(LockgateError):
    """The sandbox could not be made (or was not what it must be): nothing ran."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail, code=reason)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class SandboxSettings:
    """How commands are confined: the tools, the limits, the runner's packages and what stays hidden."""

    bwrap: str = "bwrap"
    #: Makes the staging mount namespace when the adapter runs as root.
    unshare: str = "unshare"
    timeout_s: float = 10.0
    output_max_bytes: int = 8192
    #: CPU seconds per process (``RLIMIT_CPU``).
    cpu_s: int = 10
    #: Address space per process (``RLIMIT_AS``).
    memory_bytes: int = 1 << 30
    #: Processes of the sandbox's user (``RLIMIT_NPROC``).
    processes: int = 64
    #: Open files per process (``RLIMIT_NOFILE``).
    open_files: int = 256
    #: The largest file it may write (``RLIMIT_FSIZE``), and each tmpfs's size.
    workspace_bytes: int = 64 << 20
    #: The host user the command runs as when the adapter is root.
    host_uid: int = SANDBOX_UID
    #: The test runner's distributions, bound read-only (with what they require).
    runner_packages: tuple[str, ...] = ("pytest",)
    #: Host paths that must not exist inside (checked from inside).
    hidden: tuple[str, ...] = ()
    #: The interpreter that runs Python inside (default: this process's base interpreter).
    interpreter: str | None = None


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
class _Layout:
    """What the sandbox holds: bubblewrap's arguments, the binds to stage, the guard's checks."""

    args: list[str]
    binds: list[tuple[str, str]]
    visible: tuple[str, ...]
    readonly: tuple[str, ...]


def interpreter_of(settings: SandboxSettings) -> tuple[str, str]:
    """The interpreter that runs inside, and the installation it needs (both real paths)."""
    if settings.interpreter:
        exe = os.path.realpath(settings.interpreter)
        return exe, os.path.dirname(os.path.dirname(exe))
    exe = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    return exe, os.path.realpath(sys.base_prefix)


_REQUIREMENT = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def runner_files(packages: Sequence[str]) -> dict[str, str]:
    """The top-level files and folders of ``packages`` and what they require: name → host path.

    Resolved once per package set in a process (the installation does not change under it).

    Raises:
        SandboxUnavailable: a package (or a requirement without a marker) is not installed.
    """
    return dict(_runner_files(tuple(packages)))


@functools.lru_cache(maxsize=8)
def _runner_files(packages: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    found: dict[str, str] = {}
    seen: set[str] = set()
    todo = [(name, False) for name in packages]
    while todo:
        name, optional = todo.pop()
        key = name.lower().replace("_", "-")
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError as exc:
            if optional:
                continue
            raise SandboxUnavailable(UNAVAILABLE, f"the test runner's package {name!r} is not installed") from exc
        for requirement in dist.requires or ():
            if "extra ==" in requirement:
                continue
            if match := _REQUIREMENT.match(requirement):
                todo.append((match.group(1), ";" in requirement))
        for file in dist.files or ():
            top = file.parts[0]
            if top in ("..", "__pycache__") or top.endswith(".pth"):
                continue
            found.setdefault(top, os.path.realpath(str(dist.locate_file(top))))
    return tuple(sorted(found.items()))


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _layout(settings: SandboxSettings, checkout: Path, stage: Path | None) -> _Layout:
    """Bubblewrap's arguments for one run; with ``stage``, sources come from staging places."""
    exe, prefix = interpreter_of(settings)
    binds: list[tuple[str, str]] = []

    def source(host: str) -> str:
        if stage is None:
            return host
        place = stage / str(len(binds))
        if os.path.isdir(host):
            place.mkdir()
        else:
            place.touch()
        binds.append((host, str(place)))
        return str(place)

    args = ["--ro-bind", source("/usr"), "/usr"]
    visible = ["/usr"]
    readonly = ["/usr"]
    for top in _TOP_LEVEL:
        host = "/" + top
        if os.path.islink(host):
            args += ["--symlink", os.readlink(host), host]
        elif os.path.isdir(host):
            args += ["--ro-bind", source(host), host]
            visible.append(host)
            readonly.append(host)
    if os.path.exists("/etc/ld.so.cache"):
        args += ["--ro-bind", source("/etc/ld.so.cache"), "/etc/ld.so.cache"]
        visible.append("/etc/ld.so.cache")
    if not _under(prefix, "/usr"):
        args += ["--ro-bind", source(prefix), prefix]
        visible.append(prefix)
        readonly.append(prefix)
    if not _under(exe, prefix) and not _under(exe, "/usr"):
        args += ["--ro-bind", source(exe), exe]
        visible.append(exe)
    # The installation's own site-packages stay out: only the runner's packages are in.
    paths = sysconfig.get_paths(vars={"base": prefix, "platbase": prefix})
    for key in ("purelib", "platlib"):
        lib = os.path.realpath(paths[key])
        if os.path.isdir(lib) and (_under(lib, prefix) or _under(lib, "/usr")) and lib not in args:
            args += ["--tmpfs", lib, "--remount-ro", lib]
    args += ["--dir", SITE]
    for name, host in sorted(runner_files(settings.runner_packages).items()):
        args += ["--ro-bind", source(host), f"{SITE}/{name}"]
    readonly.append(SITE)
    visible.append(SITE)
    args += ["--ro-bind", source(str(checkout)), SOURCE]
    visible.append(SOURCE)
    readonly.append(SOURCE)
    size = str(settings.workspace_bytes)
    # The root and /dev are bubblewrap's own tmpfs: read-only once laid out, so the only
    # places a command writes are the three bounded ones.
    args += ["--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys", "--dev", "/dev",
             "--size", size, "--tmpfs", "/dev/shm", "--size", size, "--tmpfs", WORK,
             "--size", size, "--tmpfs", "/tmp", "--remount-ro", "/dev", "--remount-ro", "/"]
    visible += [WORK, "/tmp", "/dev/shm"]
    readonly += ["/", "/dev"]
    return _Layout(args=args, binds=binds, visible=tuple(visible), readonly=tuple(readonly))


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


def _readable(checkout: Path) -> None:
    """Let the sandbox's unprivileged host user read the checkout, whatever the umask made it."""
    for folder, _dirs, files in os.walk(checkout):
        os.chmod(folder, 0o755)
        for name in files:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                os.chmod(path, os.stat(path).st_mode | 0o444)


def _namespaces() -> dict[str, str]:
    try:
        return {kind: os.readlink(f"/proc/self/ns/{kind}") for kind in ("net", "pid", "mnt", "user", "ipc", "uts")}
    except OSError as exc:
        raise SandboxUnavailable(UNAVAILABLE, f"cannot tell this process's namespaces: {exc}") from exc


def limits_of(settings: SandboxSettings) -> dict[str, int]:
    """The ``setrlimit`` values the guard sets, by ``resource`` name."""
    return {
        "RLIMIT_CPU": settings.cpu_s,
        "RLIMIT_AS": settings.memory_bytes,
        "RLIMIT_NPROC": settings.processes,
        "RLIMIT_NOFILE": settings.open_files,
        "RLIMIT_FSIZE": settings.workspace_bytes,
        "RLIMIT_CORE": 0,
    }


_LIMIT_NAMES = {"RLIMIT_CPU": "cpu_s", "RLIMIT_AS": "memory_bytes", "RLIMIT_NPROC": "processes",
                "RLIMIT_NOFILE": "open_files", "RLIMIT_FSIZE": "file_bytes", "RLIMIT_CORE": "core_bytes"}


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
        limits={_LIMIT_NAMES[k]: v for k, v in limits_of(settings).items()}
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


def _lay_out(settings: SandboxSettings, cwd: Path, stage: Path | None) -> _Layout:
    """Lay the sandbox out; when staging, first let the unprivileged host user read it all."""
    if stage is not None:
        stage.chmod(0o755)
        _readable(cwd)
    try:
        return _layout(settings, cwd, stage)
    except OSError as exc:
        raise SandboxUnavailable(UNAVAILABLE, f"cannot lay the sandbox out: {exc}") from exc


def _guard_spec(
    tools: _Tools, settings: SandboxSettings, layout: _Layout, environment: Mapping[str, str],
) -> dict[str, Any]:
    """What the guard checks inside before it hands over: namespaces, user, paths, environment, limits."""
    return {
        "parent": tools.parent, "uid": SANDBOX_UID, "source": SOURCE, "work": WORK, "cwd": WORK,
        "hidden": sorted(set(settings.hidden)), "readonly": list(layout.readonly),
        "sysctls": ["/proc/sys/kernel/core_pattern", "/proc/sys/vm/overcommit_memory"],
        "env": sorted(environment), "limits": limits_of(settings),
    }


def _command_line(
    tools: _Tools, settings: SandboxSettings, layout: _Layout, environment: Mapping[str, str],
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
