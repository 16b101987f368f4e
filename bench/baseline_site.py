"""A baseline build's interpreters import ``lockgate`` from that build's tree alone.

``lockgate`` is a namespace package: its portions are every ``lockgate`` directory on
``sys.path``, and the editable install's ``.pth`` file puts this checkout's ``libs`` and
``services`` there in every interpreter of the virtual environment. A process of the
baseline would then mix both builds' modules (the one found first wins, a module only
one build has is found anyway). ``bench.baseline`` copies this file as the
``sitecustomize.py`` of a directory it puts first on ``PYTHONPATH``: the site module
imports it once its ``.pth`` files are read, in the baseline's host process and in every
process that one starts (the environment is inherited), so each drops the other roots
before anything imports ``lockgate``.

Each process appends one line to the proof file: its pid, its command line, the
portions of ``lockgate`` it sees and the file ``lockgate.runtime`` would be loaded from.
The benchmark checks every baseline process's line; a process that cannot be isolated
exits before it runs a line of the baseline's code. Standard library only: this runs
before the environment's packages may be imported.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

#: The baseline tree's root (the environment variable the benchmark sets).
TREE_VAR = "LOCKGATE_BENCH_BASELINE_TREE"
#: Where each isolated process appends its line of proof.
PROOF_VAR = "LOCKGATE_BENCH_BASELINE_PROOF"
#: The tree's source roots, in the order the editable install lists them.
ROOTS = ("libs", "services")


def under(path: str | os.PathLike[str], tree: Path) -> bool:
    """Whether ``path`` lies inside ``tree``."""
    return Path(path).resolve().is_relative_to(tree.resolve())


def isolate(tree: Path) -> None:
    """Put ``tree``'s roots first on ``sys.path`` and drop every other root holding ``lockgate``.

    Modules of ``lockgate`` imported already are forgotten, so the next import reads the tree's.
    """
    others = [entry for entry in sys.path
              if (Path(entry or ".") / "lockgate").is_dir() and not under(entry or ".", tree)]
    roots = [str(tree / root) for root in ROOTS]
    sys.path[:] = roots + [entry for entry in sys.path if entry not in others and entry not in roots]
    for name in [n for n in sys.modules if n == "lockgate" or n.startswith("lockgate.")]:
        del sys.modules[name]
    importlib.invalidate_caches()


def proof(tree: Path) -> dict[str, object]:
    """What this interpreter imports ``lockgate`` from (``lockgate.runtime`` is located, not run)."""
    import lockgate  # a namespace package: importing it runs no code of either build

    spec = importlib.util.find_spec("lockgate.runtime")
    portions = [str(p) for p in lockgate.__path__]
    runtime = spec.origin if spec is not None else None
    isolated = all(under(p, tree) for p in portions) and (runtime is None or under(runtime, tree))
    return {"pid": os.getpid(), "argv": sys.orig_argv, "portions": portions, "runtime": runtime,
            "isolated": isolated}


def _as_sitecustomize() -> None:
    tree = Path(os.environ[TREE_VAR])
    isolate(tree)
    line = proof(tree)
    if os.environ.get(PROOF_VAR):
        with open(os.environ[PROOF_VAR], "a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")
    if not line["isolated"]:
        sys.stderr.write(f"baseline: lockgate is not isolated to {tree}: {line}\n")
        raise SystemExit(70)  # EX_SOFTWARE: this process would measure the wrong build


if __name__ == "sitecustomize" and os.environ.get(TREE_VAR):
    _as_sitecustomize()
