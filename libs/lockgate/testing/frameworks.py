"""What the agent framework integrations' end-to-end tests share: the system as a child
process finds it, a reviewer's decision through the CLI, and a page's quickstart run as
written.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from lockgate.operations.deployment import write_run_info
from lockgate.runtime.credentials import RunInfo
from lockgate.testing.docs import blocks
from lockgate.testing.system import System

#: Environment variables a child must not inherit: model providers' keys (no live model).
MODEL_KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GOOGLE_API_KEY", "GEMINI_API_KEY")


def child_env(system: System, *, found_by_run_json: bool = False, **extra: str) -> dict[str, str]:
    """A child process's environment: this system, no other Lockgate settings, no model key.

    ``found_by_run_json``: leave the broker's URL to ``run.json`` (``written_run_json``), as
    ``make run`` leaves it for a newcomer's script.
    """
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("LOCKGATE_") and k not in MODEL_KEYS}
    env["LOCKGATE_VAR_DIR"] = str(system.root)
    if not found_by_run_json:
        env["LOCKGATE_NATS_URL"] = system.url
    env.update(extra)
    return env


def lockgate_command() -> list[str]:
    """The ``lockgate`` script installed next to this interpreter."""
    script = Path(sys.executable).parent / "lockgate"
    return [str(script)] if script.exists() else [sys.executable, "-m", "lockgate.cli"]


async def review(system: System, verb: str, candidate_id: str, *extra: str,
                 tenant: str = "tenant-a", reviewer: str = "alice", within_s: float = 30.0) -> str:
    """``lockgate review <verb> <candidate> --tenant <tenant> --as <reviewer>``; its output.

    Asked again until it succeeds (the review is requested just after the answer that says
    the call waits), for up to ``within_s``.
    """
    command = [*lockgate_command(), "review", verb, candidate_id, "--tenant", tenant,
               "--as", reviewer, *extra]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while True:
        proc = await asyncio.to_thread(subprocess.run, command, env=child_env(system),
                                       capture_output=True, text=True, timeout=60)
        if proc.returncode == 0:
            return proc.stdout
        if loop.time() > deadline:
            raise AssertionError(f"{' '.join(command[1:])} failed: {proc.stderr}")
        await asyncio.sleep(0.2)


@contextlib.contextmanager
def written_run_json(system: System) -> Iterator[Path]:
    """``run.json`` as ``make run`` writes it (where the system is, where its users are)."""
    write_run_info(system.root, RunInfo(url=system.url, pid=os.getpid(),
                                        credentials_dir=str(system.root / "credentials")))
    try:
        yield system.root / "run.json"
    finally:
        (system.root / "run.json").unlink(missing_ok=True)


def quickstart(page: Path) -> str:
    """The first block of ``page``, which must be marked to run (``<!-- runs: system -->``)."""
    lines = page.read_text().splitlines()
    first = lines.index("```python") + 1 if "```python" in lines else -1
    found = blocks(page)
    assert found and found[0].line == first, f"the first python block of {page} must be marked to run"
    return found[0].code


def run_quickstart(system: System, page: Path, workdir: Path, *, env: dict[str, str] | None = None,
                   args: Sequence[str] = (), timeout_s: float = 120.0) -> subprocess.CompletedProcess[str]:
    """Run ``page``'s quickstart as written, as a newcomer would beside ``make run``."""
    script = workdir / "quickstart.py"
    script.write_text(quickstart(page))
    with written_run_json(system):
        return subprocess.run([sys.executable, str(script), *args],
                              env=env or child_env(system, found_by_run_json=True), cwd=workdir,
                              capture_output=True, text=True, timeout=timeout_s)
