"""``var/prometheus/targets.json``: every process's metrics endpoint, for Prometheus's
file-based discovery (``deploy/prometheus/prometheus.yml``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

from lockgate.operations.status import Status
from lockgate.operations.supervisor.children import _Child
from lockgate.operations.supervisor.report import _say

#: Where the supervisor lists every process's metrics endpoint, under ``var/``.
TARGETS_FILE = Path("prometheus") / "targets.json"


class Targets:
    """Every process's metrics endpoint, as Prometheus's file-based discovery reads them.

    One target group per process, labelled with its status name (as ``instance`` too,
    so a child that comes back on another port keeps its series). Written whole to a
    temporary file and renamed, so Prometheus never reads half a file.
    """

    def __init__(self, var_dir: Path) -> None:
        self.path = var_dir / TARGETS_FILE
        self._urls: dict[str, str] = {}

    def learn_each(self, kids: Sequence[_Child], answers: dict[str, list[Status]]) -> None:
        """:meth:`learn` for every child, each by its label."""
        self.learn({kid.label: kid.answer(answers) for kid in kids})

    def learn(self, answers: dict[str, Status | None]) -> None:
        """Take each answering process's metrics URL; rewrite the file if one changed."""
        changed = False
        for name, answer in answers.items():
            url = answer.get("metrics") if answer is not None else None
            if isinstance(url, str) and url and self._urls.get(name) != url:
                self._urls[name] = url
                changed = True
        if changed:
            self._write(self._urls)

    def clear(self) -> None:
        """Nothing runs any more: no targets."""
        self._urls = {}
        self._write({})

    def _write(self, urls: dict[str, str]) -> None:
        groups = []
        for name, url in sorted(urls.items()):
            parts = urlsplit(url)
            labels = {"instance": name, "process": name}
            if parts.path and parts.path != "/metrics":
                labels["__metrics_path__"] = parts.path
            groups.append({"targets": [parts.netloc], "labels": labels})
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            temporary = self.path.with_suffix(".tmp")
            temporary.write_text(json.dumps(groups, indent=1) + "\n")
            os.replace(temporary, self.path)
        except OSError as exc:
            _say(f"lockgate: could not write {self.path}: {exc}", error=True)
