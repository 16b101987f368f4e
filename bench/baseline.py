"""Another build of Lockgate measured beside this one in the same run (``--baseline REV``).

A change to the hot path is judged by the throughput and the CPU it costs, and on a shared
machine two runs minutes apart do not measure the same machine (``bench.rounds``). So the
baseline build runs in the same run as this one: its source is materialized from git
(``git archive REV``, extracted into a temporary directory, which goes at the end, on an
error and on Ctrl-C alike, and leaves nothing in the repository), and its system is started
by its own code (``bench.baseline_host`` calls that build's ``lockgate.testing.system``)
on a nats-server of its own, with this virtual environment's packages but only that tree's
``lockgate`` (``bench.baseline_site``: the editable install would otherwise lend it this
checkout's modules). A dependency that build declares and this environment lacks or holds at
a version it excludes (one this build dropped, say) is installed beside the tree
(``missing_requirements``, ``pip install --target``) and goes with it. Every baseline process records what it imports ``lockgate`` from;
``BaselineSystem.isolated`` checks them all.

Both systems stay up side by side; their closed loops take turns with the raw chains in the
same rounds, so the machine's drift falls on both builds alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io
import json
import math
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement

from bench import baseline_site
from bench.path import PathCost
from bench.rounds import Slices
from bench.stats import Phase

#: The system name of the baseline's phases, and the prefix of its processes' names.
SYSTEM = "baseline"
HOST_SCRIPT = Path(__file__).with_name("baseline_host.py")
SITE_SCRIPT = Path(baseline_site.__file__)
REPO = Path(__file__).resolve().parents[1]
#: Runs a file as ``__main__`` with the rest of the command line as its ``argv``. The file is
#: run by path because ``bench`` on the baseline's path would be the baseline's own.
RUN_FILE = "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"


class BaselineError(RuntimeError):
    """The baseline build could not be materialized, started or isolated."""

    code = "bench.baseline"


@dataclass(frozen=True)
class Tree:
    """A baseline build's source, materialized, and how to run Python on it alone."""

    rev: str
    commit: str
    root: Path
    #: The directory whose ``sitecustomize.py`` isolates every interpreter started with ``env()``.
    site: Path
    #: Where each of those interpreters records what it imports ``lockgate`` from.
    proof: Path
    #: The dependencies of that build this environment lacks, installed for it alone
    #: (``None``: it lacks none).
    deps: Path | None = None

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment of an interpreter that imports ``lockgate`` from this tree alone
        (inherited by every process it starts)."""
        env = dict(os.environ if base is None else base)
        path = str(self.site) if self.deps is None else os.pathsep.join((str(self.site), str(self.deps)))
        env.update({"PYTHONPATH": path, baseline_site.TREE_VAR: str(self.root),
                    baseline_site.PROOF_VAR: str(self.proof)})
        return env

    def proofs(self) -> list[dict[str, Any]]:
        """The proof lines recorded so far, one per interpreter."""
        if not self.proof.exists():
            return []
        return [json.loads(line) for line in self.proof.read_text().splitlines() if line.strip()]


def resolve(rev: str, repo: Path = REPO) -> str:
    """The commit ``rev`` names.

    Raises:
        BaselineError: ``rev`` names no commit here.
    """
    found = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
                           capture_output=True, text=True, check=False)
    if found.returncode != 0:
        raise BaselineError(f"--baseline {rev}: no such commit in {repo.name}")
    return found.stdout.strip()


@contextlib.contextmanager
def materialized(rev: str, repo: Path = REPO) -> Iterator[Tree]:
    """``rev``'s source in a temporary directory, removed when the block ends however it ends.

    Raises:
        BaselineError: ``rev`` names no commit, or its archive could not be made.
    """
    commit = resolve(rev, repo)
    top = Path(tempfile.mkdtemp(prefix="lockgate-baseline-"))
    try:
        tree, site = top / "tree", top / "site"
        archive = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", commit],
                                 capture_output=True, check=False)
        if archive.returncode != 0:
            raise BaselineError(f"git archive {commit}: {archive.stderr.decode(errors='replace')}")
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(tree, filter="data")
        site.mkdir()
        shutil.copyfile(SITE_SCRIPT, site / "sitecustomize.py")
        yield Tree(rev, commit, tree, site, top / "imports.jsonl", _installed(tree, top / "deps"))
    finally:
        shutil.rmtree(top, ignore_errors=True)


def missing_requirements(declared: Iterable[str]) -> list[str]:
    """The requirements in ``declared`` this environment does not satisfy (markers honoured;
    a requirement's extras are taken as installed when its own distribution is)."""
    missing = []
    for line in declared:
        requirement = Requirement(line)
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        try:
            installed = metadata.version(requirement.name)
        except metadata.PackageNotFoundError:
            missing.append(line)
            continue
        if not requirement.specifier.contains(installed, prereleases=True):
            missing.append(line)
    return missing


def _installed(tree: Path, target: Path) -> Path | None:
    """Install what ``tree``'s build declares and this environment lacks into ``target``.

    Raises:
        BaselineError: pip could not install them.
    """
    declared = tree / "pyproject.toml"
    if not declared.is_file():
        return None
    pyproject = tomllib.loads(declared.read_text(encoding="utf-8"))
    missing = missing_requirements(pyproject.get("project", {}).get("dependencies", []))
    if not missing:
        return None
    print(f"[bench] the baseline needs {', '.join(missing)}: installing it beside its tree", flush=True)
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                           "--target", str(target), *missing], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BaselineError(f"pip install {' '.join(missing)}: {done.stderr.strip()[-2000:]}")
    return target


@dataclass
class BaselineSystem:
    """The baseline build's system, run by its own code in a host process this one commands."""

    tree: Tree
    #: The baseline system's own directory (store, logs, world).
    root: Path
    monitor_port: int
    url: str = ""
    #: Its processes by name, the broker included.
    pids: dict[str, int] = field(default_factory=dict)
    credentials: dict[str, dict[str, str]] = field(default_factory=dict)
    #: The file of the ``lockgate.testing.system`` that started it (the baseline's own).
    system_module: str = ""
    proc: asyncio.subprocess.Process | None = None

    async def start(self, bundle_yaml: str, timeout_s: float = 120.0) -> None:
        """Start the host and, through it, the system on ``bundle_yaml``; wait until it is up.

        Raises:
            BaselineError: the host did not start the system, or not in time.
        """
        (self.root / "log").mkdir(parents=True, exist_ok=True)
        bundle = self.root / "bundle.yaml"
        bundle.write_text(bundle_yaml)
        with open(self.root / "log" / "baseline-host.log", "ab") as log:  # the host keeps its copy
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-c", RUN_FILE, str(HOST_SCRIPT), str(self.root), str(bundle),
                str(self.monitor_port), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=log, cwd=self.tree.root, env=self.tree.env())
        up = await self._answer(timeout_s)
        self.url, self.system_module = str(up["url"]), str(up["system_module"])
        self.pids, self.credentials = dict(up["pids"]), dict(up["credentials"])

    async def command(self, do: str, timeout_s: float = 60.0, **fields: str) -> dict[str, Any]:
        """Have the host carry out ``do`` (``reseed``, ``ledger``, ``kill``, ``restart``); its answer.

        Raises:
            BaselineError: the host failed or is gone.
        """
        if self.proc is None or self.proc.stdin is None:
            raise BaselineError("the baseline system is not running")
        self.proc.stdin.write((json.dumps({"do": do, **fields}) + "\n").encode())
        await self.proc.stdin.drain()
        answer = await self._answer(timeout_s)
        if "pids" in answer:
            self.pids = dict(answer["pids"])
        return answer

    async def _answer(self, timeout_s: float) -> dict[str, Any]:
        if self.proc is None or self.proc.stdout is None:
            raise BaselineError("the baseline system is not running")
        try:
            line = await asyncio.wait_for(self.proc.stdout.readline(), timeout_s)
        except TimeoutError:
            raise BaselineError(f"the baseline host did not answer within {timeout_s:g}s: "
                                f"see {self.root / 'log'}") from None
        if not line:
            raise BaselineError(f"the baseline host exited: see {self.root / 'log'}")
        answer: dict[str, Any] = json.loads(line)
        if not answer.get("ok"):
            raise BaselineError(f"the baseline host failed: {answer.get('error')}")
        return answer

    def named_pids(self) -> dict[str, int]:
        """Its processes as the CPU meters name them (``baseline <name>``)."""
        return {f"{SYSTEM} {name}": pid for name, pid in self.pids.items()}

    def isolated(self) -> int:
        """How many of its interpreters are proven to import ``lockgate`` from the baseline's tree
        alone: the host and every Python process of the system.

        Raises:
            BaselineError: one of them has no proof line, or imports from elsewhere.
        """
        proofs = {int(p["pid"]): p for p in self.tree.proofs()}
        wanted = {name: pid for name, pid in self.pids.items() if name != "nats-server"}
        if self.proc is not None:
            wanted["host"] = self.proc.pid
        missing = sorted(name for name, pid in wanted.items() if pid not in proofs)
        mixed = sorted(name for name, pid in wanted.items() if pid in proofs and not proofs[pid]["isolated"])
        if missing or mixed:
            raise BaselineError(f"baseline processes not proven isolated: no proof {missing}, "
                                f"importing from elsewhere {mixed}")
        return len(wanted)

    async def stop(self) -> None:
        """Stop the system and the host (killed if it does not go within a minute)."""
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        if proc.returncode is None and proc.stdin is not None:
            with contextlib.suppress(ConnectionError):
                proc.stdin.write(b'{"do": "stop"}\n')
                proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 60)
        except TimeoutError:
            proc.kill()
            await proc.wait()


#: How ``bench.path`` names a connection without a name: the benchmark's own (the raw chains'
#: workers and drivers, idle during a Lockgate phase) on this build's broker only.
UNNAMED = "unnamed"


def lockgate_only(path: PathCost) -> PathCost:
    """``path`` without the benchmark's own connections, so that both builds' paths count alike."""
    return dataclasses.replace(path, sent={k: v for k, v in path.sent.items() if k != UNNAMED},
                               received={k: v for k, v in path.received.items() if k != UNNAMED})


def _num(x: float | None, digits: int) -> float | None:
    return None if x is None or math.isnan(x) else round(x, digits)


def cpu_ms(phase: Phase, *, baseline: bool) -> float | None:
    """CPU ms per candidate of one build's own processes and broker (no driver, no raw chain)."""
    own = [spent for name, spent in phase.cpu_s.items()
           if name.startswith(f"{SYSTEM} ") == baseline and "worker" not in name and "driver" not in name]
    return round(1000 * sum(own) / phase.ok, 2) if own and phase.ok else None


@dataclass(frozen=True)
class Side:
    """One build's phases in the run."""

    open: Phase
    closed: Phase
    path: PathCost | None
    system: str

    def figures(self, slices: Slices, *, baseline: bool) -> dict[str, object]:
        """Its throughput, CPU, latency, path and ratios to the raw chains."""
        return {
            "per_s": _num(slices.median(self.system), 1),
            "cpu_ms_per_candidate": cpu_ms(self.closed, baseline=baseline),
            "p50_ms": _num(self.open.latency_ms(0.5), 2),
            "p99_ms": _num(self.open.latency_ms(0.99), 2),
            **(lockgate_only(self.path).figures() if self.path is not None else {}),
            "lockgate_ratio": _num(slices.ratio(self.system, "raw chain"), 4),
            "split_ratio": _num(slices.ratio(self.system, "raw split"), 4),
        }


def figures(tree: Tree, base: Side, current: Side, slices: Slices, isolated: int) -> dict[str, object]:
    """The ``baseline`` entry of the final JSON line: both builds' figures and their ratios."""
    b, c = base.figures(slices, baseline=True), current.figures(slices, baseline=False)
    b_cpu, c_cpu = b["cpu_ms_per_candidate"], c["cpu_ms_per_candidate"]
    return {
        "rev": tree.rev,
        "commit": tree.commit[:12],
        **b,
        "ratio_rounds": [_num(r, 4) for r in slices.ratios(current.system, base.system)],
        "current": c,
        "current_over_baseline_per_s": _num(slices.ratio(current.system, base.system), 4),
        "current_over_baseline_cpu": round(c_cpu / b_cpu, 4)
        if isinstance(c_cpu, float) and isinstance(b_cpu, float) and b_cpu else None,
        "isolated_processes": isolated,
    }


ROWS = (("candidates/s (median slice)", "per_s"), ("CPU ms per candidate", "cpu_ms_per_candidate"),
        ("p50 ms (open loop)", "p50_ms"), ("p99 ms (open loop)", "p99_ms"),
        ("messages per candidate", "messages_per_candidate"),
        ("deliveries per candidate", "deliveries_per_candidate"),
        ("to the raw chain", "lockgate_ratio"), ("to the raw split", "split_ratio"))


def table(entry: Mapping[str, Any]) -> str:
    """The two builds side by side, and this one's over the baseline's."""
    current: Mapping[str, Any] = entry["current"]
    lines = [f"this build beside the baseline {entry['rev']} ({entry['commit']}), in the same run "
             f"({entry['isolated_processes']} baseline processes import only its tree)",
             f"{'':<28}{'baseline':>10}{'current':>10}{'current/baseline':>18}"]
    for label, key in ROWS:
        b, c = entry.get(key), current.get(key)
        ratio = f"{c / b:.3f}" if isinstance(b, int | float) and isinstance(c, int | float) and b else "-"
        lines.append(f"{label:<28}{_cell(b):>10}{_cell(c):>10}{ratio:>18}")
    lines.append(f"current/baseline throughput, median of the rounds' ratios: "
                 f"{entry['current_over_baseline_per_s']} (rounds {entry['ratio_rounds']})")
    return "\n".join(lines)


def _cell(value: object) -> str:
    return "-" if value is None else f"{value:g}" if isinstance(value, float) else str(value)
