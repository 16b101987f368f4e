"""Each suite's Cedar schema fragment, generated from its declaration table.

The demo bundle holds one per suite (``deploy/policies/assistant/agentdojo-<suite>.cedarschema``):
the suite's actions, each on the ``Account`` the assistant policies declare. A test checks
each committed file against what ``fragment`` generates; after a declaration changes, or
for a new suite, ``python -m lockgate.evaluation.agentdojo.policies`` writes them again.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from agentdojo.task_suite.load_suites import get_suite

from lockgate.adapters.scaffold import schema_fragment
from lockgate.evaluation.agentdojo.deployment import DEMO_BUNDLE
from lockgate.evaluation.agentdojo.suites import BENCHMARK_VERSION, SUITES
from lockgate.evaluation.agentdojo.tools import Environments, capabilities


def fragment(suite: str, version: str = BENCHMARK_VERSION) -> str:
    """The schema fragment of ``suite``'s capabilities (``Account`` is the bundle's)."""
    declaration = SUITES[suite]
    functions = capabilities(declaration, get_suite(version, suite).tools, Environments())
    return schema_fragment(functions, f"AgentDojo's {suite} suite ({version})",
                           declared=(declaration.resource,))


def fragment_path(suite: str, bundle: Path = DEMO_BUNDLE) -> Path:
    """Where the bundle keeps ``suite``'s fragment."""
    return bundle / "assistant" / f"agentdojo-{suite}.cedarschema"


def main(argv: Sequence[str] | None = None) -> int:
    """Write the fragment of each suite named (default: every one) into the demo bundle."""
    for suite in list(argv if argv is not None else sys.argv[1:]) or sorted(SUITES):
        path = fragment_path(suite)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(fragment(suite))
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
