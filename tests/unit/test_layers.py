"""The layering as import-linter checks it (``.importlinter``): it holds, and it bites.

Each check runs ``lint-imports`` in a fresh interpreter over a pair of source roots: this
checkout's ``libs/`` and ``services/``, or a copy of them under ``tmp_path`` with one import
changed. ``lockgate`` is a namespace package whose portions are whichever roots are on the path,
so the child drops the installed ones before it puts the roots to check first.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from importlinter.api import read_configuration

#: The checkout this file belongs to.
REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / ".importlinter"
ROOTS = (REPO / "libs", REPO / "services")

# Runs in the child: argv is the two roots, then the configuration file.
_LINT = """
import sys
from pathlib import Path
import lockgate
installed = {str(Path(portion).parent) for portion in lockgate.__path__}
del sys.modules["lockgate"]
sys.path[:] = sys.argv[1:3] + [entry for entry in sys.path if entry not in installed]
from importlinter.cli import lint_imports_command
sys.argv = ["lint-imports", "--no-cache", "--no-logo", sys.argv[3]]
lint_imports_command()
"""


def _lint(roots: tuple[Path, Path]) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` with this checkout's configuration over ``roots``, its report unwrapped."""
    # rich wraps the report at the terminal's width; an import line must stay on one line.
    env = {**os.environ, "COLUMNS": "500"}
    return subprocess.run(
        [sys.executable, "-c", _LINT, *map(str, roots), str(CONFIG)],
        capture_output=True, text=True, env=env, cwd=roots[0].parent, timeout=120, check=False)


def _contracts() -> dict[str, dict[str, object]]:
    """The configured contracts' options, by id."""
    return {str(options["id"]): options
            for options in read_configuration(str(CONFIG))["contracts_options"]}


def _copy(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of both source roots' ``lockgate`` portions under ``tmp_path``."""
    roots = (tmp_path / "libs", tmp_path / "services")
    for source, copy in zip(ROOTS, roots, strict=True):
        shutil.copytree(source / "lockgate", copy / "lockgate",
                        ignore=shutil.ignore_patterns("__pycache__"))
    return roots


def _source(roots: tuple[Path, Path], module: str) -> Path:
    """The file that defines ``module`` under ``roots`` (a module or a package's ``__init__``)."""
    relative = Path(*module.split("."))
    for root in roots:
        for candidate in (root / relative.with_suffix(".py"), root / relative / "__init__.py"):
            if candidate.is_file():
                return candidate
    raise FileNotFoundError(module)


def _layer_modules() -> set[str]:
    """Every module the layers contract places, relative to its container."""
    layers = _contracts()["layers"]["layers"]
    assert isinstance(layers, list)
    return {name.strip().strip("()") for layer in layers for name in re.split(r"[|:]", layer)}


def test_every_contract_is_kept_today() -> None:
    result = _lint(ROOTS)

    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Contracts: {len(_contracts())} kept, 0 broken." in result.stdout


@pytest.mark.parametrize(("module", "statement", "contract", "reported"), [
    # The core reaching the supervisor: the floor importing the roof.
    ("lockgate.core.errors", "import lockgate.operations.supervisor", "layers",
     "lockgate.core.errors -> lockgate.operations.supervisor"),
    # One service importing another: siblings in an independent layer.
    ("lockgate.intake.domain", "import lockgate.policy.domain", "layers",
     "lockgate.intake.domain -> lockgate.policy.domain"),
    # The event store (below the domain) reaching up into the intent it stores.
    ("lockgate.eventstore.base", "import lockgate.intent.state", "layers",
     "lockgate.eventstore.base -> lockgate.intent.state"),
    # The kit reaching up into the operations that deploy it.
    ("lockgate.runtime.consumer", "import lockgate.operations.roles", "layers",
     "lockgate.runtime.consumer -> lockgate.operations.roles"),
    # The views reaching into a demo world.
    ("lockgate.views.rows", "import lockgate.worlds.storage", "worlds-apart",
     "lockgate.views.rows -> lockgate.worlds.storage"),
    # The core speaking to the broker.
    ("lockgate.core.ids", "import nats", "domain-no-broker", "lockgate.core.ids -> nats"),
])
def test_a_new_back_arrow_breaks_its_contract(
        tmp_path: Path, module: str, statement: str, contract: str, reported: str) -> None:
    roots = _copy(tmp_path)
    source = _source(roots, module)
    source.write_text(source.read_text() + f"\n{statement}\n")

    result = _lint(roots)

    assert result.returncode == 1, result.stdout + result.stderr
    assert f"{_contracts()[contract]['name']} BROKEN" in result.stdout
    assert reported in result.stdout


def test_an_ignored_import_the_code_no_longer_makes_fails(tmp_path: Path) -> None:
    roots = _copy(tmp_path)
    # Every contract's list, in the file's order (the layers contract's may be empty).
    ignored: list[str] = []
    for options in _contracts().values():
        listed = options.get("ignore_imports") or []
        assert isinstance(listed, list)
        ignored += listed
    # The first listed import written out by its full name, so one rewrite removes it.
    for line in ignored:
        importer, imported = (side.strip() for side in line.split("->"))
        source = _source(roots, importer)
        written = re.compile(rf"\b{re.escape(imported)}\b(?![.\w])")
        if written.search(source.read_text()):
            break
    else:
        pytest.fail("no ignored import names its module in full")
    source.write_text(written.sub("lockgate.core", source.read_text()))

    result = _lint(roots)

    assert result.returncode == 1, result.stdout + result.stderr
    assert f"No matches for ignored import {importer} -> {imported}." in result.stdout
