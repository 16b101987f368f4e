"""What the figures were measured on."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

from lockgate.operations.natsserver import server_binary


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (or the platform's guess)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def nproc() -> int:
    """CPUs this process may run on (what ``nproc`` prints)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def nats_server_version() -> str:
    """``nats-server --version`` of the binary the system runs."""
    try:
        out = subprocess.run([str(server_binary()), "--version"], capture_output=True, text=True,
                             timeout=10, check=False)
        return (out.stdout or out.stderr).strip() or "unknown"
    except Exception as exc:  # noqa: BLE001 - reported, not fatal
        return f"unknown ({exc})"


def checkout() -> str:
    """The commit the services run from, and whether the working tree differs from it."""
    repo = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain"],
                               capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{head}{' + uncommitted changes' if dirty.strip() else ''}"


def describe() -> dict[str, str]:
    """The machine, as printed above the figures."""
    return {
        "nproc": str(nproc()),
        "cpu": cpu_model(),
        "python": platform.python_version() + f" ({platform.python_implementation()})",
        "nats-server": nats_server_version(),
        "os": f"{platform.system()} {platform.release()}",
        "load average": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "lockgate": checkout(),
    }
