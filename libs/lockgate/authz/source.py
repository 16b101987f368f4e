"""A bundle that can be replaced while services run: reloaded when its files change."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from lockgate.authz.config import CONFIG_FILE
from lockgate.authz.engine import BundleError, PolicyBundle

log = logging.getLogger("lockgate.authz")

Fingerprint = tuple[tuple[str, int, int], ...]


def fingerprint(directory: Path) -> Fingerprint:
    """What identifies the bundle's files as they are now (path, size, mtime)."""
    files = [*directory.rglob("*.cedar"), *directory.rglob("*.cedarschema"), directory / CONFIG_FILE]
    out = []
    for path in sorted(files):
        try:
            stat = path.stat()
        except FileNotFoundError:
            continue
        out.append((str(path), stat.st_size, stat.st_mtime_ns))
    return tuple(out)


class BundleSource:
    """The current bundle of a directory, checked for changes at most every ``check_every_s``.

    A new revision replaces the old one only if it loads and validates; a broken edit
    is logged and the running bundle stays. Decisions record the revision they used,
    so decisions made earlier keep theirs.
    """

    def __init__(
        self, directory: Path, *, check_every_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.directory = directory
        self._check_every_s = check_every_s
        self._clock = clock
        self._fingerprint = fingerprint(directory)
        self._bundle = PolicyBundle.load(directory)
        self._checked = clock()

    def current(self, *, look: bool = False) -> PolicyBundle:
        """The bundle to decide with now (``look``: look at the files now, whenever they were
        looked at last: after this process changed them)."""
        now = self._clock()
        if not look and now - self._checked < self._check_every_s:
            return self._bundle
        self._checked = now
        seen = fingerprint(self.directory)
        if seen != self._fingerprint:
            self._fingerprint = seen
            try:
                bundle = PolicyBundle.load(self.directory)
            except BundleError as exc:
                log.error("policy bundle in %s not replaced: %s", self.directory, exc)
            else:
                log.info("policy bundle %s replaces %s", bundle.revision, self._bundle.revision)
                self._bundle = bundle
        return self._bundle
