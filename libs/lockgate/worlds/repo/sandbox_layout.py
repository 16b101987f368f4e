"""What a sandbox holds: bubblewrap's mounts, the interpreter, and the test runner's packages.

Each run lays out an empty root with only what a command needs, read-only but for three
bounded tmpfs; as root, every source is first given a staging place the stager binds it
onto. The guard (``sandbox_guard``) then checks from inside that this is all there is.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import re
import sys
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from lockgate.worlds.repo.sandbox_settings import (
    SITE,
    SOURCE,
    UNAVAILABLE,
    WORK,
    SandboxSettings,
    SandboxUnavailable,
)

_TOP_LEVEL = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")


@dataclass(frozen=True)
class Layout:
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


def layout(settings: SandboxSettings, checkout: Path, stage: Path | None) -> Layout:
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
    return Layout(args=args, binds=binds, visible=tuple(visible), readonly=tuple(readonly))


def make_readable(checkout: Path) -> None:
    """Let the sandbox's unprivileged host user read the checkout, whatever the umask made it."""
    for folder, _dirs, files in os.walk(checkout):
        os.chmod(folder, 0o755)
        for name in files:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                os.chmod(path, os.stat(path).st_mode | 0o444)
