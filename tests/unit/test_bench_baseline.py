"""``python -m bench --baseline REV``: the option, the materialized tree's lifetime, the isolation
of the baseline's interpreters, and the figures it adds. Nothing timed.

The trees here are tiny git repositories made under ``tmp_path``, with a ``lockgate`` of
their own whose modules say where they were loaded from.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from bench import baseline
from bench.cli import parse_args
from bench.path import PathCost
from bench.rounds import Slices
from bench.stats import Phase

#: A fake build's module that says which file was imported.
SAYS_WHERE = "print(__file__)\n"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository whose one commit holds a fake ``lockgate`` in ``libs`` and ``services``."""
    repo = tmp_path / "repo"
    for root, module in (("libs", "core"), ("services", "executor")):
        package = repo / root / "lockgate" / module  # no __init__.py in lockgate: a namespace
        package.mkdir(parents=True)
        (package / "__init__.py").write_text(SAYS_WHERE)
    _git(tmp_path, "init", "-q", str(repo))
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=bench", "-c", "user.email=bench@example.invalid", "commit", "-qm", "fake")
    return repo


def _baseline_dirs() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("lockgate-baseline-*")}


def test_baseline_option_is_parsed_and_absent_by_default() -> None:
    _, args = parse_args(["--quick", "--baseline", "04aa6cd"])
    assert args.baseline == "04aa6cd"
    _, args = parse_args([])
    assert args.baseline is None


def test_baseline_with_a_cluster_profile_is_refused() -> None:
    with pytest.raises(SystemExit):
        parse_args(["--baseline", "04aa6cd", "--profile", "cluster"])


def test_tree_holds_the_revision_and_is_gone_after_the_block(repo: Path) -> None:
    head = _git(repo, "rev-parse", "HEAD")
    with baseline.materialized("HEAD", repo) as tree:
        assert tree.commit == head
        assert (tree.root / "libs" / "lockgate" / "core" / "__init__.py").read_text() == SAYS_WHERE
        assert (tree.site / "sitecustomize.py").read_text() == baseline.SITE_SCRIPT.read_text()
        top = tree.root.parent
    assert not top.exists()
    # Nothing was left in the repository either: no worktree, no change.
    assert _git(repo, "worktree", "list").count("\n") == 0
    assert _git(repo, "status", "--porcelain") == ""


def test_tree_is_gone_after_a_failure_inside_the_block(repo: Path) -> None:
    with pytest.raises(KeyboardInterrupt), baseline.materialized("HEAD", repo) as tree:
        top = tree.root.parent
        raise KeyboardInterrupt
    assert not top.exists()


def test_an_unknown_revision_is_refused_and_leaves_nothing(repo: Path) -> None:
    before = _baseline_dirs()
    with pytest.raises(baseline.BaselineError), baseline.materialized("no-such-rev", repo):
        pass
    assert _baseline_dirs() == before


def _python(tree: baseline.Tree, code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          cwd=tree.root, timeout=60, check=False)


def test_an_isolated_child_imports_the_trees_lockgate_not_this_checkouts(repo: Path) -> None:
    with baseline.materialized("HEAD", repo) as tree:
        child = _python(tree, "import lockgate.core", tree.env())
        # A module only this checkout has is not found: no portion of it is on the path.
        leak = _python(tree, "import lockgate.testing.system", tree.env())
        proofs = tree.proofs()
    assert child.returncode == 0, child.stderr
    assert Path(child.stdout.strip()) == tree.root / "libs" / "lockgate" / "core" / "__init__.py"
    assert "No module named 'lockgate.testing'" in leak.stderr
    assert len(proofs) == 2
    assert all(p["isolated"] for p in proofs)
    assert all(Path(portion).is_relative_to(tree.root) for p in proofs for portion in p["portions"])


def test_without_the_launcher_the_checkouts_lockgate_is_imported(repo: Path) -> None:
    # The counterfactual: the virtual environment alone lends the child this checkout's modules.
    with baseline.materialized("HEAD", repo) as tree:
        child = _python(tree, "import lockgate.testing.system as s; print(s.__file__)", dict(os.environ))
    assert child.returncode == 0, child.stderr
    assert not Path(child.stdout.strip()).is_relative_to(tree.root)


def test_the_processes_an_isolated_child_starts_are_isolated_too(repo: Path) -> None:
    # The baseline's own System starts its services as `python -m ...` with the environment it has.
    grandchild = ("import subprocess, sys; "
                  "subprocess.run([sys.executable, '-c', 'import lockgate.executor'], check=True)")
    with baseline.materialized("HEAD", repo) as tree:
        child = _python(tree, grandchild, tree.env())
        proofs = tree.proofs()
    assert child.returncode == 0, child.stderr
    assert Path(child.stdout.strip()) == tree.root / "services" / "lockgate" / "executor" / "__init__.py"
    assert len({p["pid"] for p in proofs}) == 2
    assert all(p["isolated"] for p in proofs)


def test_a_baseline_process_without_proof_fails_the_check(repo: Path, tmp_path: Path) -> None:
    with baseline.materialized("HEAD", repo) as tree:
        _python(tree, "pass", tree.env())
        system = baseline.BaselineSystem(tree, tmp_path / "run", monitor_port=0,
                                         pids={"intake": 2**22 + 1, "nats-server": 1})
        with pytest.raises(baseline.BaselineError, match="intake"):
            system.isolated()


def _phase(system: str, mode: str, ok: int, cpu_s: dict[str, float], latency_s: float) -> Phase:
    phase = Phase(system, mode, offered=ok, cpu_s=cpu_s)
    phase.outcomes["ok"] = ok
    phase.latencies_s = [latency_s] * ok
    return phase


def test_figures_give_both_builds_and_the_current_over_the_baseline(repo: Path) -> None:
    slices = Slices({"raw chain": [400.0, 400.0, 400.0], "raw split": [300.0, 300.0, 300.0],
                     "lockgate": [120.0, 150.0, 100.0], "baseline": [100.0, 100.0, 100.0]})
    # CPU of the other build's processes and of the drivers is not either build's cost.
    current = baseline.Side(
        _phase("lockgate", "open", 10, {}, 0.02),
        _phase("lockgate", "closed", 100, {"intake": 0.5, "nats-server": 0.5, "bench drivers": 9.0,
                                           "baseline intake": 9.0}, 0.2),
        # The raw chains' idle workers share this build's broker alone: no build's cost.
        PathCost(10, sent={"intake": 10.0, "executor": 12.0, "unnamed": 0.4},
                 received={"intake": 14.0, "unnamed": 0.8}, deliveries={"intake": 1.0}), "lockgate")
    base = baseline.Side(
        _phase("baseline", "open", 10, {}, 0.04),
        _phase("baseline", "closed", 100, {"baseline intake": 1.5, "baseline nats-server": 0.5,
                                           "intake": 9.0}, 0.2), None, "baseline")
    with baseline.materialized("HEAD", repo) as tree:
        entry = baseline.figures(tree, base, current, slices, isolated=14)
    assert entry["rev"] == "HEAD"
    assert entry["per_s"] == 100.0
    assert entry["cpu_ms_per_candidate"] == 20.0
    assert entry["p50_ms"] == 40.0
    assert entry["lockgate_ratio"] == 0.25
    assert entry["split_ratio"] == 0.3333
    assert entry["current"] == {"per_s": 120.0, "cpu_ms_per_candidate": 10.0, "p50_ms": 20.0,
                                "p99_ms": 20.0, "messages_per_candidate": 22.0,
                                "deliveries_per_candidate": 1.0, "stored_per_candidate": 0.0,
                                "lockgate_ratio": 0.3, "split_ratio": 0.4}
    assert entry["ratio_rounds"] == [1.2, 1.5, 1.0]
    assert entry["current_over_baseline_per_s"] == 1.2
    assert entry["current_over_baseline_cpu"] == 0.5
    assert entry["isolated_processes"] == 14
    assert "current/baseline" in baseline.table(entry)


async def test_a_baseline_that_cannot_start_its_system_stops_the_run(repo: Path, tmp_path: Path) -> None:
    # The fake build has no lockgate.testing.system: its host cannot start a system, and says so.
    with baseline.materialized("HEAD", repo) as tree:
        system = baseline.BaselineSystem(tree, tmp_path / "run", monitor_port=0)
        try:
            with pytest.raises(baseline.BaselineError, match="exited"):
                await system.start("limits: []\n")
        finally:
            await system.stop()
        proofs = tree.proofs()
    assert "No module named 'lockgate.testing'" in (tmp_path / "run" / "log" / "baseline-host.log").read_text()
    assert [p["isolated"] for p in proofs] == [True]


def test_only_the_requirements_this_environment_does_not_satisfy_are_installed_for_a_baseline() -> None:
    declared = [
        "msgspec>=0.18",                         # installed, at a version it admits
        "msgspec<0.1",                           # installed, at a version it excludes
        "no-such-distribution-here>=1",          # not installed at all
        'pytest>=7; python_version < "3"',       # not for this interpreter
    ]

    assert baseline.missing_requirements(declared) == ["msgspec<0.1", "no-such-distribution-here>=1"]

