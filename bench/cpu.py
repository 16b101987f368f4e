"""CPU time of each process taking part, read from /proc, to show where a phase's time went."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far (0 when it cannot be read)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


class CpuMeter:
    """Snapshot CPU seconds of named processes before and after a phase."""

    def __init__(self, pids: Mapping[str, int]) -> None:
        self.pids = dict(pids)
        self._start = {name: cpu_seconds(pid) for name, pid in self.pids.items()}

    def spent(self) -> dict[str, float]:
        """CPU seconds each process spent since the meter was made."""
        return {name: cpu_seconds(pid) - self._start[name] for name, pid in self.pids.items()}
