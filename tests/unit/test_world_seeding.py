"""Replicas of an adapter open a fresh world at once: every one starts, and the
repository world's checkout is whole (two seeds at once tore it apart: one removed the
workspace while the other wrote it, and that replica died at start)."""

from __future__ import annotations

import multiprocessing
import multiprocessing.synchronize
from pathlib import Path

from lockgate.worlds.repo.world import World as RepoWorld


def _open(directory: str, start: multiprocessing.synchronize.Event) -> None:
    start.wait()
    RepoWorld.open_or_seed(directory)


def test_replicas_starting_together_seed_once(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    start = ctx.Event()
    procs = [ctx.Process(target=_open, args=(str(tmp_path / "repo"), start)) for _ in range(6)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(30)
    assert [p.exitcode for p in procs] == [0] * 6
    world = RepoWorld(tmp_path / "repo")
    tree = sorted(p.relative_to(world.workspace).as_posix() for p in world.workspace.rglob("*") if p.is_file())
    assert "docs/guide.md" in tree and world.head()
