"""Processes a test starts and reads, or finds by what their command line names (``/proc``, Linux)."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Self


def pids_naming(path: Path) -> list[int]:
    """Every process with ``path``, or a file under it, among its arguments."""
    exact, under = str(path).encode(), str(path).encode() + b"/"
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # gone meanwhile, or not ours to read
        if any(a == exact or a.startswith(under) for a in argv):
            found.append(int(entry.name))
    return found


class Printing:
    """A child process and every line it printed so far (stdout and stderr together)."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self.reader = asyncio.create_task(self._read())

    @classmethod
    async def start(cls, *argv: str, env: Mapping[str, str], cwd: Path | None = None) -> Self:
        """Start ``argv``; read what it prints from now on."""
        proc = await asyncio.create_subprocess_exec(
            *argv, env=dict(env), cwd=cwd, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT)
        return cls(proc)

    async def _read(self) -> None:
        if self.proc.stdout is None:  # pragma: no cover - PIPE was asked for
            return
        async for raw in self.proc.stdout:
            self.lines.append(raw.decode(errors="replace").rstrip("\n"))

    async def wait_for_line(self, wanted: Callable[[str], bool], timeout_s: float, *,
                            alive: bool = True) -> str:
        """The first line ``wanted`` accepts; with ``alive``, the process must not end first.

        Raises:
            AssertionError: no such line within ``timeout_s`` (or the process ended first).
        """
        deadline = asyncio.get_running_loop().time() + timeout_s
        while asyncio.get_running_loop().time() < deadline:
            for line in self.lines:
                if wanted(line):
                    return line
            if alive and self.proc.returncode is not None:
                raise AssertionError(f"it exited {self.proc.returncode} first: {self.lines[-30:]}")
            await asyncio.sleep(0.05)
        raise AssertionError(f"no such line within {timeout_s:g}s: {self.lines[-30:]}")

    async def stop(self, sig: signal.Signals = signal.SIGINT, timeout_s: float = 60.0) -> int:
        """Send ``sig`` (SIGINT, as Ctrl-C would) and wait; SIGKILL only if it hangs. Its exit code."""
        if self.proc.returncode is None:
            self.proc.send_signal(sig)
            try:
                await asyncio.wait_for(self.proc.wait(), timeout_s)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        await self.reader
        return self.proc.returncode if self.proc.returncode is not None else -1
