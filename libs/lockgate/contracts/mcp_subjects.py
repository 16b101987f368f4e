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

from lockgate.contracts.subjects import ROOT, Family, Param
from lockgate.core.ids import is_subject_token

RECORD_KINDS = ("identity", "snapshot", "mapping", "review")
#: What an operator may ask; ``map`` writes (a mapping, or its disabling), the rest read.
OP_VERBS = ("servers", "snapshot", "diff", "quarantine", "map")

_SERVER = Param("server", "server")
#: A server's record of one kind (``mapping`` has a family of its own: it names a capability).
RECORD = Family((ROOT, "mcp", "rec", _SERVER,
                 Param("kind", "record kind", choices=tuple(k for k in RECORD_KINDS if k != "mapping"))))
#: The reviewed mapping of one product capability.
MAPPING = Family((ROOT, "mcp", "rec", _SERVER, "mapping", Param("capability", "capability", "capability")))
#: An operator asks the MCP adapter.
OP = Family((ROOT, "mcp", "op", Param("verb", "mcp verb", choices=OP_VERBS), Param("principal", "principal")))

RECORDS_ALL = RECORD.tail()
OPS_ALL = OP.pattern()


def record(server: str, kind: str, capability: str = "") -> str:
    """``lg.mcp.rec.<server>.<kind>[.<capability>]`` (a capability only for ``mapping``)."""
    if kind not in RECORD_KINDS:
        raise ValueError(f"record kind {kind!r} is not one of {RECORD_KINDS}")
    if kind == "mapping":
        return MAPPING.subject(server=server, capability=capability)
    if capability:
        raise ValueError(f"a {kind} record names no capability")
    return RECORD.subject(server=server, kind=kind)


def op(verb: str, principal: str) -> str:
    """``lg.mcp.op.<verb>.<principal>``: an operator asks the MCP adapter."""
    return OP.subject(verb=verb, principal=principal)


class OpSubject(NamedTuple):
    """The verb an operator's request names, and who sent it."""

    verb: str
    principal: str


def parse_op(subject: str) -> OpSubject | None:
    """The verb and principal of an operator's request subject (``None``: not one)."""
    values = OP.match(subject)
    if values is None or values["verb"] not in OP_VERBS or not is_subject_token(values["principal"]):
        return None
    return OpSubject(values["verb"], values["principal"])
