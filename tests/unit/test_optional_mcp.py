"""Lockgate's core runs without the MCP SDK (the ``mcp`` extra): an agent framework whose own
dependencies pin another MCP release can sit beside it. What needs the SDK says so."""

from __future__ import annotations

import subprocess
import sys

from lockgate.runtime.entry import CONFIG_ERROR_EXIT

#: Makes ``import mcp`` (and the SDK's ``mcp_types``) fail in a child interpreter.
BLOCK = """
import sys
class _NoMcp:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("mcp", "mcp_types"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, _NoMcp())
"""


def run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", BLOCK + code], capture_output=True, text=True,
                          timeout=60)


def test_the_core_imports_and_the_cli_parses_without_the_mcp_sdk() -> None:
    done = run("""
import importlib
for name in ("lockgate.client", "lockgate.integrations", "lockgate.adapters.sdk",
             "lockgate.intake.app", "lockgate.executor.app", "lockgate.testing.system",
             "lockgate.worlds.casenotes.adapter", "lockgate.operations.supervisor", "lockgate.mcp.service"):
    importlib.import_module(name)
from lockgate.cli.app import parser
parser().parse_args(["status"])
print("fine")
""")
    assert done.returncode == 0 and "fine" in done.stdout, done.stderr[-2000:]


def test_the_mcp_adapter_without_the_sdk_says_so_and_is_not_restarted() -> None:
    done = run("""
import runpy
sys.argv = ["lockgate.mcp"]
runpy.run_module("lockgate.mcp", run_name="__main__")
""")
    assert done.returncode == CONFIG_ERROR_EXIT, (done.returncode, done.stderr[-2000:])
    assert "lockgate[mcp]" in done.stderr and "Traceback" not in done.stderr


def test_the_conformance_command_without_the_sdk_says_so() -> None:
    done = run("""
from lockgate.cli.app import main
sys.exit(main(["mcp", "conformance", "--stdio", "true", "--probe", "p"]))
""")
    assert done.returncode == 2 and "lockgate[mcp]" in done.stderr, done.stderr[-2000:]
