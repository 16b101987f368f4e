"""A conformance suite for MCP servers: does an effect happen once, and can a client tell?

``run_suite(target, probe, timeout_s=...)`` connects to a server (a stdio command or a
streamable-HTTP URL) with the official client SDK and reports, per property, whether the
server documents it, whether the suite observed it hold or saw it violated, or could not
tell — with the evidence.
"""

from lockgate.mcpcheck.probe import P_PROBE, PROBES, Q_PROBE, Probe, load_probe
from lockgate.mcpcheck.report import (
    CLAIMS,
    OUTCOMES,
    Finding,
    Property,
    Report,
    Verdict,
    render_json,
    render_table,
)

# The suite speaks MCP through the official SDK (the ``mcp`` extra): loaded when first
# used, so that the CLI, which registers this suite's command, runs without it.
_SUITE = ("HttpTarget", "StdioTarget", "Target", "describe", "run_suite")


def __getattr__(name: str) -> object:
    if name in _SUITE:
        from lockgate.mcpcheck import suite

        return getattr(suite, name)
    raise AttributeError(name)


__all__ = [
    "CLAIMS",
    "OUTCOMES",
    "PROBES",
    "P_PROBE",
    "Q_PROBE",
    "Finding",
    "HttpTarget",
    "Probe",
    "Property",
    "Report",
    "StdioTarget",
    "Target",
    "Verdict",
    "describe",
    "load_probe",
    "render_json",
    "render_table",
    "run_suite",
]
