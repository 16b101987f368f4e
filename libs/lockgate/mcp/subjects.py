"""Subjects of the MCP adapter's records and of the operators' requests to it, built in one place.

Records (stream ``LG_MCP``, append-only; the latest per subject is read by direct get):

- ``lg.mcp.rec.<server>.identity``: the server identity seen at each connect that changed it;
- ``lg.mcp.rec.<server>.snapshot``: every discovery snapshot that differs from the last one;
- ``lg.mcp.rec.<server>.mapping.<capability>``: the reviewed mapping of a product capability
  (enabled, or disabled by an operator or by drift);
- ``lg.mcp.rec.<server>.review``: who reviewed, mapped or disabled what, when (the audit).

Operators ask the adapter ``lg.mcp.op.<verb>.<principal>``: the subject ends in the
authenticated operator's name, which the broker lets only that operator publish, so the
recorded reviewer is who they are, never a name in the payload.
"""

from __future__ import annotations

from typing import NamedTuple

from lockgate.core.ids import is_capability_name, is_subject_token

RECORDS_ALL = "lg.mcp.rec.>"
OPS_ALL = "lg.mcp.op.*.*"
RECORD_KINDS = ("identity", "snapshot", "mapping", "review")
#: What an operator may ask; ``map`` writes (a mapping, or its disabling), the rest read.
OP_VERBS = ("servers", "snapshot", "diff", "quarantine", "map")


def _token(value: str, what: str) -> str:
    if not is_subject_token(value):
        raise ValueError(f"{what} {value[:80]!r} is not a subject token")
    return value


def record(server: str, kind: str, capability: str = "") -> str:
    """``lg.mcp.rec.<server>.<kind>[.<capability>]`` (a capability only for ``mapping``)."""
    if kind not in RECORD_KINDS:
        raise ValueError(f"record kind {kind!r} is not one of {RECORD_KINDS}")
    subject = f"lg.mcp.rec.{_token(server, 'server')}.{kind}"
    if kind == "mapping":
        if not is_capability_name(capability):
            raise ValueError(f"{capability[:80]!r} is not a capability name")
        return f"{subject}.{capability}"
    if capability:
        raise ValueError(f"a {kind} record names no capability")
    return subject


def op(verb: str, principal: str) -> str:
    """``lg.mcp.op.<verb>.<principal>``: an operator asks the MCP adapter."""
    if verb not in OP_VERBS:
        raise ValueError(f"mcp verb {verb!r} is not one of {OP_VERBS}")
    return f"lg.mcp.op.{verb}.{_token(principal, 'principal')}"


class OpSubject(NamedTuple):
    """The verb an operator's request names, and who sent it."""

    verb: str
    principal: str


def parse_op(subject: str) -> OpSubject | None:
    """The verb and principal of an operator's request subject (``None``: not one)."""
    parts = subject.split(".")
    if len(parts) != 5 or parts[:3] != ["lg", "mcp", "op"]:
        return None
    if parts[3] not in OP_VERBS or not is_subject_token(parts[4]):
        return None
    return OpSubject(parts[3], parts[4])
