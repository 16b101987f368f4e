"""Processes a test finds by what their command line names (``/proc``, Linux)."""

from __future__ import annotations

from pathlib import Path


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
