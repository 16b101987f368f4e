"""How a sandbox is configured, and how it refuses: settings, limits, reason codes, fixed places.

Shared by the sandbox's layout and its run (``lockgate.worlds.repo.sandbox``), which
re-exports every public name here.
"""

from __future__ import annotations

from dataclasses import dataclass

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


#: The record's name for each limit (``SandboxOutcome.limits``).
LIMIT_NAMES = {"RLIMIT_CPU": "cpu_s", "RLIMIT_AS": "memory_bytes", "RLIMIT_NPROC": "processes",
               "RLIMIT_NOFILE": "open_files", "RLIMIT_FSIZE": "file_bytes", "RLIMIT_CORE": "core_bytes"}
