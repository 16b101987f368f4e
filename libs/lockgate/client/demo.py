"""The foundation's behaviour table, as data: ``lockgate demo`` walks it, the end-to-end tests assert it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Scenario:
    """One candidate and what must follow from it."""

    name: str
    arguments: str
    status: str
    code: str
    field: str | None = None
    tool: str = "case.add_note"
    actor: str = "user-42"
    tenant: str = "tenant-a"
    case: str = "case-123"
    invocations: int = 0
    """Adapter executions this candidate causes."""
    ledger: int = 0
    """Writes this candidate adds to the case world's ledger."""
    repeat: bool = False
    """Propose the same call id twice."""
    reason: str | None = None
    """The precise internal reason code recorded in the event store."""


NOTE = '{"note": "Customer called back; confirmed the delivery address."}'
LONG_NOTE = '{"note": "' + "é" * 251 + '"}'  # 502 UTF-8 bytes
ONE_MIB = '{"note": "' + "x" * (1024 * 1024) + '"}'

SCENARIOS: tuple[Scenario, ...] = (
    Scenario("valid note", NOTE, "executed", "operation.executed", invocations=1, ledger=1),
    Scenario("tool not offered", '{"scope": "all"}', "rejected", "proposal.invalid",
             tool="case.export_all_notes", reason="tool.unknown"),
    Scenario("duplicate key", '{"note":"a","note":"b"}', "rejected", "proposal.invalid",
             reason="tool.arguments.duplicate"),
    Scenario("empty object", "{}", "rejected", "argument.note.missing", "note",
             reason="tool.arguments.missing-required"),
    Scenario("wrong-case key", '{"Note":"x"}', "rejected", "argument.note.missing", "note",
             reason="tool.arguments.missing-required"),
    Scenario("model names the case", '{"note":"x","caseId":"case-999"}', "rejected",
             "proposal.invalid", reason="tool.arguments.unexpected"),
    Scenario("blank note", '{"note":"   "}', "rejected", "argument.note.empty", "note",
             reason="argument.note.empty"),
    Scenario("note over 500 bytes", LONG_NOTE, "rejected", "argument.note.too-long", "note",
             reason="argument.note.too-long"),
    Scenario("not JSON", "{note: hello", "rejected", "proposal.invalid",
             reason="tool.arguments.malformed"),
    Scenario("1 MiB of arguments", ONE_MIB, "rejected", "proposal.invalid",
             reason="tool.arguments.too-large"),
    Scenario("closed case", NOTE, "unavailable", "operation.unavailable", case="case-closed",
             reason="case.closed"),
    Scenario("writes suspended", NOTE, "unavailable", "operation.unavailable",
             case="case-frozen", reason="case.writes-suspended"),
    Scenario("no such case", NOTE, "unavailable", "operation.unavailable", case="case-404",
             reason="case.not-found"),
    Scenario("actor may not add notes", NOTE, "unavailable", "operation.unavailable",
             actor="user-13", reason="case.note.not-authorized"),
    Scenario("another tenant's case", NOTE, "unavailable", "operation.unavailable",
             case="case-999", reason="case.tenant-mismatch"),
    Scenario("contended case", NOTE, "unavailable", "operation.unavailable",
             case="case-contended", invocations=1, reason="case.version-conflict"),
    Scenario("same call id twice", NOTE, "executed", "operation.executed", invocations=1,
             ledger=1, repeat=True),
)
