"""Redeliveries a process took down with it, counted on local disk across its deaths.

A message whose handler kills its process (a segfault, the kernel's OOM killer, an
``os._exit`` deep in a library) is never seen failing: the process that would count the
failure is gone, and the server's delivery count cannot tell such a delivery from a timer
the handler asked for. On a consumer with timers that count is large (the gate's is
thousands), so the server's bound alone would take the process down thousands of times.

So a process writes down, before it runs a handler on a *redelivered* message, that the
message is in flight, and strikes it out once the handler returned (first deliveries,
the hot path, write nothing). A journal still holding a message when its process is gone
means the message went down with it: the next process of the same durable on this host
adopts the journal and counts one crash for each message in it. A message counted
``crashes`` times in a row is given up on the record before its handler runs again; any
handling that returns in between starts the count anew.

Each process keeps its own journal, locked (``flock``) for as long as it lives: a journal
whose lock can be taken belongs to a process that died. A graceful stop removes it. The
counts are per host: replicas on other hosts count their own.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path


class CrashJournal:
    """One process's journal of the redeliveries in flight for one durable, and the counts."""

    def __init__(self, folder: Path, durable: str, *, pid: int | None = None) -> None:
        self._folder = folder
        self._durable = durable
        self._pid = os.getpid() if pid is None else pid
        # The pid names the process for an operator; the token keeps two instances of one
        # durable in one process (an embedding program, a test) apart.
        self._own = folder / f"{durable}.{self._pid}.{uuid.uuid4().hex[:8]}.journal"
        self._counts = folder / f"{durable}.counts"
        self._fd: int | None = None
        self._in_flight: set[str] = set()
        self._counted: set[str] = set()

    @property
    def path(self) -> Path:
        """This process's own journal."""
        return self._own

    def open(self) -> dict[str, int]:
        """Adopt the journals of dead processes (one crash per message in each); start this one's.

        Returns:
            The crash counts as they stand after adopting.
        """
        self._folder.mkdir(parents=True, exist_ok=True)
        with self._locked():
            counts = self._read_counts()
            for journal in sorted(self._folder.glob(f"{self._durable}.*.journal")):
                for key in self._adopt(journal):
                    counts[key] = counts.get(key, 0) + 1
            self._write_counts(counts)
        fd = os.open(self._own, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a new file: nobody else holds it
        except OSError:
            os.close(fd)
            raise
        self._fd = fd
        return counts

    def begin(self, key: str) -> int:
        """``key``'s handler is about to run: write it down; return its crashes in a row so far."""
        with self._locked():
            taken = self._read_counts().get(key, 0)
        if taken:
            self._counted.add(key)
        self._in_flight.add(key)
        self._write_own()
        return taken

    def end(self, key: str) -> None:
        """``key``'s handler returned (however it ended): strike it out; its count starts anew."""
        self._in_flight.discard(key)
        self._write_own()
        if key in self._counted:
            self._counted.discard(key)
            with self._locked():
                counts = self._read_counts()
                if counts.pop(key, None) is not None:
                    self._write_counts(counts)

    def close(self) -> None:
        """A graceful stop: what was in flight did not die with the process."""
        if self._fd is None:
            return
        with contextlib.suppress(FileNotFoundError):
            self._own.unlink()
        os.close(self._fd)
        self._fd = None
        self._in_flight.clear()

    # -- files -------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """The durable's counts, one process at a time."""
        fd = os.open(self._folder / f"{self._durable}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _adopt(self, journal: Path) -> list[str]:
        """The keys of a dead process's journal (removed); nothing when its process lives."""
        try:
            fd = os.open(journal, os.O_RDWR)
        except FileNotFoundError:
            return []
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return []  # alive
            with os.fdopen(os.dup(fd)) as text:
                keys = [line.strip() for line in text if line.strip()]
            journal.unlink()
            return keys
        finally:
            os.close(fd)

    def _write_own(self) -> None:
        if self._fd is None:
            return
        # No fsync: a process's death keeps what it wrote (the page cache is the kernel's).
        data = "".join(f"{key}\n" for key in sorted(self._in_flight)).encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)

    def _read_counts(self) -> dict[str, int]:
        try:
            raw = json.loads(self._counts.read_text())
        except (FileNotFoundError, ValueError):
            return {}
        return {str(k): int(v) for k, v in raw.items()} if isinstance(raw, dict) else {}

    def _write_counts(self, counts: dict[str, int]) -> None:
        temporary = self._counts.with_suffix(".tmp")
        temporary.write_text(json.dumps(counts))
        temporary.replace(self._counts)
