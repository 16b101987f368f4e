"""The repository world's demo seed: its actors, and three revisions of a small workspace.

``World.seed`` writes them; the world's module docstring says what each is for.
"""

from __future__ import annotations

#: Actor, tenant, member of the repository.
DEMO_ACTORS = [("user-42", "tenant-a", 1), ("user-13", "tenant-a", 0), ("user-77", "tenant-b", 1)]


_TESTS = '''\
"""The workspace's own checks, run by its test runner from the workspace root."""
from pathlib import Path


def test_every_report_has_a_title():
    for path in sorted(Path("reports").glob("*.md")):
        assert path.read_text().startswith("# "), path


def test_the_guide_names_the_test_command():
    assert "python -m pytest" in Path("docs/guide.md").read_text()
'''

_R1_FILES = {
    "README.md": "# Demo repository\n\nA small workspace for the repository world.\n",
    "docs/report.md": "# Quarterly report (draft)\n\nTo be written.\n",
    "tests/test_docs.py": _TESTS,
}
_R2_FILES = {
    **_R1_FILES,
    "docs/report.md": (
        "# Quarterly report\n\n## Summary\nRevenue grew 4% over the quarter; churn was flat.\n"
        "Two incidents affected customers (see reports/q3-incident.md).\n\n## Risks\n"
        "Queue capacity in the eu region is close to its limit.\n"
    ),
    "docs/guide.md": (
        "# Contributor guide\n\nRun the checks with `python -m pytest -q tests`.\n"
        "Reports go under reports/; confidential ones under reports/confidential/.\n"
    ),
    "reports/q3-incident.md": (
        "# Q3 incident: queue stall\n\n## Timeline\n- 09:12 consumers stopped acknowledging\n"
        "- 09:40 the broker was restarted\n\n## Impact\nNotes written between 09:12 and 09:40 "
        "were delayed, none were lost.\n"
    ),
    "reports/confidential/salaries.md": (
        "# Compensation review (confidential)\n\n## Proposal\nRaise the engineering band by 3%.\n"
        "Individual figures are in the HR system, not here.\n"
    ),
}
_R3_FILES = {
    **_R2_FILES,
    "reports/q3-incident.md": _R2_FILES["reports/q3-incident.md"] + (
        "\n## Follow-ups\n- alert on acknowledgement lag\n- rehearse the broker restart\n"
    ),
}
_SYMLINKS = {
    "docs/latest.md": "../reports/q3-incident.md",
    "shared": "reports",
    "docs/passwd": "/etc/passwd",
    "docs/outside.md": "../../outside.md",
    "etc": "/etc",
}


#: Oldest first: id, message, files (path -> text), symlinks (path -> target).
DEMO_REVISIONS: list[tuple[str, str, dict[str, str], dict[str, str]]] = [
    ("r1", "initial layout", _R1_FILES, {}),
    ("r2", "reports, guide and links", _R2_FILES, _SYMLINKS),
    ("r3", "q3 incident follow-ups", _R3_FILES, _SYMLINKS),
]
