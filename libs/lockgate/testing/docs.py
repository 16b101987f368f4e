"""The documentation's runnable code blocks: found by their marker, run as written.

A fenced block in ``README.md`` or under ``docs/`` claims to run when the line right
before it is ``<!-- runs: system -->``: a Python block, run as a script as written against
a running system (found the way ``make run`` leaves it: ``var/run.json``). The marker is an
HTML comment, so the rendered page shows only the code. ``tests/e2e/test_docs_blocks.py``
runs every block that claims to run; ``tests/unit/test_docs.py`` checks the markers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
#: What a block may claim: ``system``, it runs against a running Lockgate.
KINDS = ("system",)

_MARKER = re.compile(r"^<!-- runs: (?P<kind>[a-z]+) -->[ \t]*$")
_FENCE = re.compile(r"^(?P<fence>```+|~~~+)(?P<info>[^\n]*)$")


@dataclass(frozen=True)
class Block:
    """One fenced block that claims to run: where it is, what it needs, its code."""

    path: Path
    line: int
    kind: str
    language: str
    code: str

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


class MarkerError(ValueError):
    """A marker that no fenced block follows, or that claims something unknown."""


def pages(root: Path = REPO) -> list[Path]:
    """The README and every page of the documentation site."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def blocks(path: Path) -> list[Block]:
    """Every block of ``path`` that claims to run.

    Raises:
        MarkerError: a marker not followed at once by a fenced block, or of an unknown kind.
    """
    lines = path.read_text().splitlines()
    found: list[Block] = []
    for i, line in enumerate(lines):
        marker = _MARKER.match(line)
        if marker is None:
            if line.startswith("<!-- runs"):
                raise MarkerError(f"{path}:{i + 1}: write the marker as `<!-- runs: KIND -->`")
            continue
        kind = marker["kind"]
        if kind not in KINDS:
            raise MarkerError(f"{path}:{i + 1}: unknown kind {kind!r} (one of {', '.join(KINDS)})")
        opening = _FENCE.match(lines[i + 1]) if i + 1 < len(lines) else None
        if opening is None:
            raise MarkerError(f"{path}:{i + 1}: no fenced block right after the marker")
        fence, language = opening["fence"], opening["info"].strip().split(" ")[0]
        end = next((j for j in range(i + 2, len(lines)) if lines[j].startswith(fence)
                    and not lines[j][len(fence):].strip()), None)
        if end is None:
            raise MarkerError(f"{path}:{i + 1}: the block is never closed")
        if language != "python":
            raise MarkerError(f"{path}:{i + 1}: only python blocks run (this one is {language!r})")
        found.append(Block(path, i + 2, kind, language, "\n".join(lines[i + 2:end]) + "\n"))
    return found


def every_block(root: Path = REPO) -> list[Block]:
    """Every block that claims to run, in every page."""
    return [b for page in pages(root) for b in blocks(page)]
