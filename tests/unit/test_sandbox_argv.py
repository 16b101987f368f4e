"""The exact command line ``run_sandboxed`` starts bubblewrap with, as root and not.

The process start is replaced by one that records what it was asked to run and then fails,
so nothing runs and no bubblewrap is needed: what is checked is the argv itself (every
namespace, capability, environment and guard argument, in order), the spec the guard is
handed, and the way the process is started. A change to any of it is a change to what the
sandbox holds, and must show up here.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from lockgate.worlds.repo import sandbox
from lockgate.worlds.repo.sandbox import (
    BASE_ENV,
    SITE,
    SOURCE,
    WORK,
    SandboxSettings,
    SandboxUnavailable,
    run_sandboxed,
)

SETTINGS = SandboxSettings(bwrap="sh", unshare="true", hidden=("/var/b", "/var/a", "/var/b"), host_uid=4321)
ARGV = ["python", "-m", "pytest", "-q"]
ENV = {"PYTEST_ADDOPTS": "-x"}


@dataclass
class Started:
    """What the process start was asked for, and the layout the run laid out."""

    argv: list[str] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)
    layouts: list[Any] = field(default_factory=list)


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> Started:
    """Record the process start instead of making it (it fails, so nothing runs)."""
    seen = Started()

    async def start(*argv: str, **options: Any) -> None:
        seen.argv, seen.options = list(argv), options
        raise OSError("recorded, not started")

    layout = sandbox._layout

    def recording_layout(*args: Any) -> Any:
        made = layout(*args)
        seen.layouts.append(made)
        return made

    monkeypatch.setattr(sandbox.asyncio, "create_subprocess_exec", start)
    monkeypatch.setattr(sandbox, "_layout", recording_layout)
    return seen


def _bubblewrap_argv(seen: Started, status_fd: str) -> list[str]:
    """The argv bubblewrap must be given for ``ARGV`` under ``SETTINGS``, written out by hand."""
    exe, _prefix = sandbox.interpreter_of(SETTINGS)
    (layout,) = seen.layouts
    environment = {**BASE_ENV, "PYTHONPATH": SITE, **ENV}
    spec = {
        "parent": sandbox._namespaces(), "uid": 65534, "source": SOURCE, "work": WORK, "cwd": WORK,
        "hidden": ["/var/a", "/var/b"], "readonly": list(layout.readonly),
        "sysctls": ["/proc/sys/kernel/core_pattern", "/proc/sys/vm/overcommit_memory"],
        "env": sorted(environment),
        "limits": {"RLIMIT_CPU": 10, "RLIMIT_AS": 1 << 30, "RLIMIT_NPROC": 64, "RLIMIT_NOFILE": 256,
                   "RLIMIT_FSIZE": 64 << 20, "RLIMIT_CORE": 0},
    }
    setenv = [arg for name, value in sorted(environment.items()) for arg in ("--setenv", name, value)]
    return [
        shutil.which("sh"), "--unshare-all", "--unshare-user", "--uid", "65534", "--gid", "65534",
        "--disable-userns", "--cap-drop", "ALL", "--die-with-parent", "--new-session",
        "--hostname", "sandbox", *layout.args, "--clearenv", *setenv,
        "--chdir", "/", "--", exe, "-I", "-S", "-c", sandbox._GUARD, status_fd, json.dumps(spec),
        exe, "-m", "pytest", "-q",
    ]


def _status_fd(seen: Started) -> str:
    (fd,) = seen.options["pass_fds"]
    return str(fd)


def _check_start_options(seen: Started) -> None:
    assert seen.options == {
        "cwd": "/", "env": {"PATH": BASE_ENV["PATH"]}, "stdin": sandbox.asyncio.subprocess.DEVNULL,
        "stdout": sandbox.asyncio.subprocess.PIPE, "stderr": sandbox.asyncio.subprocess.STDOUT,
        "start_new_session": True, "pass_fds": seen.options["pass_fds"],
    }


async def test_not_as_root_bubblewrap_is_started_directly(
    started: Started, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 1000)
    with pytest.raises(SandboxUnavailable, match="cannot start"):
        await run_sandboxed(ARGV, tmp_path, SETTINGS, env=ENV)

    assert started.argv == _bubblewrap_argv(started, _status_fd(started))
    assert started.layouts[0].binds == []
    _check_start_options(started)


async def test_as_root_bubblewrap_is_started_inside_a_private_staging_namespace(
    started: Started, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 0)
    stage = tmp_path / "stage"

    def mkdtemp(prefix: str) -> str:
        stage.mkdir()
        return str(stage)

    monkeypatch.setattr(sandbox.tempfile, "mkdtemp", mkdtemp)
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    with pytest.raises(SandboxUnavailable, match="cannot start"):
        await run_sandboxed(ARGV, checkout, SETTINGS, env=ENV)

    (layout,) = started.layouts
    stager = {"binds": [list(bind) for bind in layout.binds], "uid": 4321}
    assert layout.binds and all(place.startswith(str(stage) + "/") for _host, place in layout.binds)
    assert started.argv == [
        shutil.which("true"), "--mount", "--propagation", "private", "--",
        sandbox.sys.executable, "-I", "-S", "-c", sandbox._STAGER, json.dumps(stager),
        *_bubblewrap_argv(started, _status_fd(started)),
    ]
    _check_start_options(started)
    assert not stage.exists(), "the staging folder outlives the run"


async def test_the_status_pipe_is_closed_when_the_start_fails(
    started: Started, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 1000)
    with pytest.raises(SandboxUnavailable):
        await run_sandboxed(ARGV, tmp_path, SETTINGS, env=ENV)

    with pytest.raises(OSError):
        os.fstat(int(_status_fd(started)))


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


async def test_a_layout_that_fails_leaves_no_pipe_open(
    started: Started, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Both ends of the status pipe are closed when the sandbox cannot even be laid out."""
    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 1000)

    def failing_layout(*args: Any) -> Any:
        raise OSError("no room to lay it out")

    monkeypatch.setattr(sandbox, "_layout", failing_layout)
    before = _open_fds()
    with pytest.raises(SandboxUnavailable, match="no room to lay it out"):
        await run_sandboxed(ARGV, tmp_path, SETTINGS, env=ENV)
    assert _open_fds() == before
    assert started.argv == []  # nothing was started
