"""Every block of the README and the documentation site that claims to run does, as written,
against a running system found the way ``make run`` leaves it (``var/run.json``).

The framework pages' blocks are run by each framework's own test, in the environment
that framework is installed in (``tests/e2e/test_integration_<framework>.py``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lockgate.operations.deployment import write_run_info
from lockgate.runtime.credentials import RunInfo
from lockgate.testing.docs import REPO, Block, every_block
from lockgate.testing.system import System

FRAMEWORKS = REPO / "docs" / "frameworks"
BLOCKS = [b for b in every_block() if b.kind == "system" and b.path.parent != FRAMEWORKS]


def test_each_framework_page_is_run_by_its_own_test() -> None:
    for page in sorted(FRAMEWORKS.glob("*.md")):
        if page.name == "index.md":
            continue
        test = REPO / "tests" / "e2e" / f"test_integration_{page.stem}.py"
        assert test.is_file() and f"{page.stem}.md" in test.read_text(), (
            f"{test.name} must run the first block of {page.name}")


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.name)
def test_a_block_runs_as_written(block: Block, system: System, tmp_path: Path) -> None:
    write_run_info(system.root, RunInfo(url=system.url, pid=os.getpid(),
                                        credentials_dir=str(system.root / "credentials")))
    script = tmp_path / "block.py"
    script.write_text(block.code)
    env = {**os.environ, "LOCKGATE_VAR_DIR": str(system.root)}
    env.pop("LOCKGATE_NATS_URL", None)
    try:
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                              timeout=120, cwd=tmp_path, env=env)
    finally:
        (system.root / "run.json").unlink(missing_ok=True)
    assert done.returncode == 0, f"{block.name}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
