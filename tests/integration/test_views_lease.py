"""One projector at a time per views store: the lease excludes, on a real PostgreSQL and on SQLite's file.

Two holders race for one store's lease: at no moment do both hold it, and the one standing by
takes it only once the holder has released it or died (its session or descriptor gone).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from lockgate.operations.postgres import PostgresServer
from lockgate.views.lease import ADVISORY_KEY, Lease, lease_for
from tests.conftest import require_postgres

#: Turns each holder takes in the race, each one contested by the other.
TURNS = 20

#: A process that takes the lease, says whether it holds it, and keeps it until it is killed.
HOLDER = """
import sys
from pathlib import Path
from lockgate.views.lease import lease_for
lease = lease_for(sys.argv[1], Path(sys.argv[2]))
print("held" if lease.try_acquire() else "refused", flush=True)
sys.stdin.read()
"""


@pytest.fixture(scope="module")
def pg() -> Iterator[PostgresServer]:
    require_postgres()
    with PostgresServer() as server:
        yield server


@pytest.fixture(params=["postgres", "sqlite"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A views store's URL: a PostgreSQL database, or a SQLite file (its lease a file beside it)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'views.sqlite'}"
    server: PostgresServer = request.getfixturevalue("pg")
    return server.url


def holders_on_the_server(url: str) -> int:
    """Sessions PostgreSQL itself says hold the lease's advisory lock."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND ((classid::bigint << 32) | objid::bigint) = %s", (ADVISORY_KEY,)).fetchone()
    assert row is not None
    return int(row[0])


def test_one_holds_and_the_other_takes_it_only_after_the_release(url: str, tmp_path: Path) -> None:
    first, second = lease_for(url, tmp_path), lease_for(url, tmp_path)
    try:
        assert first.try_acquire()
        assert [second.try_acquire() for _ in range(3)] == [False, False, False]
        assert first.try_acquire()  # the holder asking again still holds it
        if url.startswith("postgresql://"):
            assert holders_on_the_server(url) == 1
        first.release()
        assert second.try_acquire()
        assert not first.try_acquire()
    finally:
        first.release()
        second.release()


def test_two_holders_racing_never_hold_it_at_once_and_each_gets_turns(url: str, tmp_path: Path) -> None:
    leases = [lease_for(url, tmp_path), lease_for(url, tmp_path)]
    guard = threading.Condition()
    holding: set[int] = set()
    overlaps: list[set[int]] = []
    turns, attempts, refused, done = [0, 0], [0, 0], [0, 0], [False, False]
    deadline = time.monotonic() + 60

    def race(i: int, lease: Lease) -> None:
        other = 1 - i
        while turns[i] < TURNS and time.monotonic() < deadline:
            held = lease.try_acquire()
            with guard:
                attempts[i] += 1
                guard.notify_all()
                if not held:
                    refused[i] += 1
                    continue
                holding.add(i)
                if len(holding) > 1:
                    overlaps.append(set(holding))
                turns[i] += 1
                # Hold it until the other has asked at least once meanwhile, so every turn is contested.
                seen = attempts[other]
                while attempts[other] == seen and not done[other] and guard.wait(timeout=10):
                    pass
                holding.discard(i)
            lease.release()
        with guard:
            done[i] = True
            guard.notify_all()

    threads = [threading.Thread(target=race, args=(i, lease)) for i, lease in enumerate(leases)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    assert overlaps == []
    assert turns == [TURNS, TURNS]
    # Every turn of the first to finish was asked for by the other meanwhile, and turned away.
    assert sum(refused) >= TURNS


def test_a_standby_takes_the_lease_only_when_its_holder_dies(url: str, tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, url, str(tmp_path)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    standby = lease_for(url, tmp_path)
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        assert [standby.try_acquire() for _ in range(3)] == [False, False, False]
        holder.send_signal(signal.SIGKILL)  # no release: the database or the OS must drop it
        holder.wait(timeout=30)
        deadline = time.monotonic() + 30
        while not standby.try_acquire():
            assert time.monotonic() < deadline, "the dead holder's lease was never given up"
            time.sleep(0.1)
        if url.startswith("postgresql://"):
            assert holders_on_the_server(url) == 1
    finally:
        standby.release()
        if holder.poll() is None:
            holder.kill()
            holder.wait(timeout=30)
