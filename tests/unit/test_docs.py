"""The documentation site builds without a warning, and its runnable blocks are well marked
(``tests/e2e/test_docs_blocks.py`` runs them)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lockgate.testing.docs import REPO, MarkerError, blocks, every_block


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    """Every page in the navigation, every link and anchor resolves (mkdocs --strict)."""
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q",
                           "-f", str(REPO / "mkdocs.yml"), "-d", str(tmp_path / "site")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "site" / "index.html").is_file()


def test_the_readme_and_every_framework_page_have_a_block_that_runs() -> None:
    assert any(b.path.name == "README.md" for b in every_block())
    for page in sorted((REPO / "docs" / "frameworks").glob("*.md")):
        if page.name != "index.md":
            assert blocks(page), f"{page.name} has no block marked to run"


def test_a_marker_must_sit_on_a_python_block(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    for text in ("<!-- runs: system -->\n\nsome prose\n", "<!-- runs: system -->\n```sh\nls\n```\n",
                 "<!-- runs: shell -->\n```python\npass\n```\n", "<!-- runs:system -->\n```python\n```\n",
                 "<!-- runs: system -->\n```python\npass\n"):
        page.write_text(text)
        with pytest.raises(MarkerError):
            blocks(page)
    page.write_text("text\n<!-- runs: system -->\n```python\nprint(1)\n```\nmore\n")
    (found,) = blocks(page)
    assert (found.line, found.kind, found.code) == (3, "system", "print(1)\n")
