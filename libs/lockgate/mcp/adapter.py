"""A mapped MCP tool served as a product capability through the adapter SDK.

``normalize`` applies the mapping's defaults, context arguments and fixed arguments around
the model's (validated against the product's schema) and names the exact resource, with
the mapping revision and tool digest it was normalized under, so the record of every
intent shows which it used. ``execute`` crosses the send boundary, then calls the remote
tool once, with Lockgate's intent key in the mapped idempotency or reference argument.
After the boundary anything but a JSON-RPC refusal is an unknown outcome (never
"failed"): the SDK reports nothing, and the reconciler asks ``query``, which calls the
mapped query tool by the intent key (without one, an operator settles it). Results are
labelled untrusted and bounded by the contract.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import msgspec
from jsonschema import Draft202012Validator

from lockgate.adapters.sdk import Adapter, Completed, NotSent, Rejected, SendBoundary
from lockgate.contracts.messages import (
    ExecutionOrder,
    Facts,
    FactsRequest,
    NormalizeRequest,
    NormalizeResult,
    QueryRequest,
    QueryResult,
)
from lockgate.contracts.vocabulary import QueryFinding
from lockgate.core.canonical import digest
from lockgate.mcp.mapping import (
    MappingRecord,
    ToolRecord,
    contract_of,
    idempotency_honoured,
    restricted_contract,
)
from lockgate.mcp.remote import CallResult, Connection, RemoteError, RemoteUnavailable, untrusted

log = logging.getLogger(__name__)

#: Reason codes this adapter records (``lockgate.contracts.reasons``).
REASONS: tuple[str, ...] = (
    "mcp.arguments-invalid",
    "mcp.mapping-disabled",
    "mcp.server-unavailable",
    "mcp.remote-refused",
)


def found_in(structured: object, found_field: str) -> QueryFinding:
    """What a query tool's structured answer says: found, absent, or no evidence (unknown).

    Only a well-formed answer proves absence: an object whose ``found_field`` is present
    and false, or (no field named) an empty object. Anything else is no evidence.
    """
    if not isinstance(structured, dict):
        return QueryFinding.UNKNOWN
    if found_field:
        if found_field not in structured or not isinstance(structured[found_field], bool):
            return QueryFinding.UNKNOWN
        return QueryFinding.FOUND if structured[found_field] else QueryFinding.ABSENT
    return QueryFinding.FOUND if structured else QueryFinding.ABSENT


class MappedAdapter(Adapter):
    """Serves one current mapping; ``connection()`` gives the server's open session."""

    def __init__(self, record: MappingRecord, tool: ToolRecord, *,
                 connection: Callable[[], Connection | None], call_timeout_s: float) -> None:
        self.record = record
        self.tool = tool
        self.contract = contract_of(record, tool)
        self._connection = connection
        self._timeout_s = call_timeout_s
        self._validator = Draft202012Validator(record.mapping.arguments)
        self._idempotent, _ = idempotency_honoured(record.mapping, tool.annotations)
        self._source = f"mcp:{record.server}/{record.tool}"

    async def normalize(self, req: NormalizeRequest) -> NormalizeResult:
        """Defaults, then the model's arguments, the run's context and the fixed arguments."""
        m = self.record.mapping
        problem = next(iter(self._validator.iter_errors(req.arguments)), None)
        if problem is not None:
            field = str(problem.path[0]) if problem.path else None
            return NormalizeResult(reason="mcp.arguments-invalid", field=field)
        remote: dict[str, Any] = {**m.defaults, **req.arguments}
        for argument, key in m.context.items():
            value = req.context.get(key)
            if not value:
                return NormalizeResult(reason="run.context.missing")
            remote[argument] = value
        remote.update(m.fixed)  # whatever the model said, these hold
        resource_id = req.context.get(m.resource_from, "") if m.resource_from else self.record.server
        if not resource_id:
            return NormalizeResult(reason="run.context.missing")
        return NormalizeResult(
            arguments=remote,
            resource={
                "type": m.resource_type, "id": resource_id, "tenant": req.tenant,
                "mcp_server": self.record.server, "mcp_tool": self.record.tool,
                "mcp_mapping": self.record.revision, "mcp_tool_digest": self.record.tool_digest,
                "mcp_identity": self.record.identity_digest,
                "mcp_snapshot": str(self.record.snapshot_seq),
            },
            destination=self._source,
        )

    async def facts(self, req: FactsRequest) -> Facts:
        """What policy judges by: the run's tenant, the server, the governed effect class."""
        return Facts(facts={"tenant": req.resource.get("tenant", ""), "server": self.record.server,
                            "effect": str(self.contract.effect_class)},
                     revision=self.record.revision)

    def _session(self) -> Connection:
        conn = self._connection()
        if conn is None:
            raise RemoteUnavailable(self.record.server)
        return conn

    def _remote_arguments(self, order: ExecutionOrder) -> dict[str, Any]:
        m = self.record.mapping
        arguments = dict(order.arguments)
        if self._idempotent:
            arguments[m.idempotency_key] = order.intent_key
        if m.query is not None:
            arguments[m.query.reference] = order.intent_key
        return arguments

    async def execute(self, order: ExecutionOrder, boundary: SendBoundary) -> Completed:
        """Call the remote tool once, after the boundary; an unclear end is an unknown outcome."""
        if order.resource.get("mcp_mapping") != self.record.revision:
            # Normalized under another mapping: the gate must judge it again.
            raise NotSent("mcp.mapping-disabled", "the order was normalized under another mapping")
        try:
            conn = self._session()
        except RemoteUnavailable as exc:
            raise NotSent("mcp.server-unavailable", str(exc)) from None
        arguments = self._remote_arguments(order)
        if not self._idempotent and self.record.mapping.query is not None:
            # The server cannot tell a repeat from a new call: look first (a read, before
            # the boundary), so a later attempt of the same intent never acts twice.
            found = await self._find(conn, order.intent_key)
            if found.finding is QueryFinding.FOUND:
                return Completed(receipt=found.receipt, result=self._labelled({"already_done": True}))
            if found.finding is not QueryFinding.ABSENT:
                raise NotSent("mcp.server-unavailable", "the query before sending gave no answer")
        await boundary.cross()
        if boundary.not_after is not None and datetime.now(UTC) > boundary.not_after:
            # Held up between crossing and calling (a frozen process) past the attempt's
            # deadline: the outcome is being recorded unknown and may be retried once found
            # absent, and an MCP server cannot refuse a late call, so it is not made.
            raise RuntimeError("held up past the attempt's deadline before calling; not called")
        try:
            result = await conn.call_tool(self.record.tool, arguments, self._timeout_s)
        except RemoteError as exc:
            raise Rejected("mcp.remote-refused", untrusted(self.record.server, str(exc))) from None
        if result.is_error:
            # The server says it failed, but what it did is its own word: unknown, reconciled.
            raise RuntimeError(f"tool error {untrusted(self.record.server, result.text)}")
        return Completed(receipt=self._receipt(order.intent_key, self.record.tool, result),
                         result=self._labelled(result.structured))

    def _labelled(self, data: object) -> dict[str, Any]:
        return {"untrusted": True, "source": self._source, "data": data}

    def _receipt(self, key: str, tool: str, result: CallResult) -> dict[str, str]:
        body = msgspec.json.encode(result.structured) if result.structured is not None else b""
        receipt = {"server": self.record.server, "tool": tool, "reference": key,
                   "result_digest": digest(body.decode() if body else "")}
        if isinstance(result.structured, dict):
            for name in ("id", "item_id", "draft_id", "publication_id"):
                value = result.structured.get(name)
                if isinstance(value, str | int):
                    receipt["remote_id"] = str(value)[:128]
                    break
        return receipt

    async def _find(self, conn: Connection, key: str) -> QueryResult:
        query = self.record.mapping.query
        if query is None:
            return QueryResult(finding=QueryFinding.UNKNOWN)
        try:
            result = await conn.call_tool(query.tool, {query.argument: key}, self._timeout_s)
        except Exception as exc:  # no answer is no evidence
            log.warning("query %s on %s failed: %s", query.tool, self.record.server, type(exc).__name__)
            return QueryResult(finding=QueryFinding.UNKNOWN)
        if result.is_error:
            return QueryResult(finding=QueryFinding.UNKNOWN)
        finding = found_in(result.structured, query.found)
        receipt = self._receipt(key, query.tool, result) if finding is QueryFinding.FOUND else {}
        return QueryResult(finding=finding, receipt=receipt)

    async def query(self, req: QueryRequest) -> QueryResult:
        """Find the effect by its client reference (the intent key) with the mapped query tool."""
        conn = self._connection()
        if conn is None:
            return QueryResult(finding=QueryFinding.UNKNOWN)
        return await self._find(conn, req.intent_key)


class RestrictedAdapter(MappedAdapter):
    """Serves a capability whose mapping is not current: facts and queries only, nothing new.

    Registered with ``restricted_contract``: no turn offers it, ``normalize`` and
    ``execute`` refuse (``mcp.mapping-disabled``), ``facts`` lets the final gate reach its
    revision check, and ``query`` still finds effects made under the old mapping while the
    server's identity is the one it was reviewed under (otherwise no evidence).
    """

    def __init__(self, record: MappingRecord, tool: ToolRecord, *,
                 connection: Callable[[], Connection | None], call_timeout_s: float) -> None:
        super().__init__(record, tool, connection=connection, call_timeout_s=call_timeout_s)
        self.contract = restricted_contract(record)

    async def normalize(self, req: NormalizeRequest) -> NormalizeResult:
        """Refuse: the mapping is under review."""
        return NormalizeResult(reason="mcp.mapping-disabled")

    async def execute(self, order: ExecutionOrder, boundary: SendBoundary) -> Completed:
        """Refuse before the boundary: the gate judges the intent again, and refuses it."""
        raise NotSent("mcp.mapping-disabled", "the mapping is under review")

    async def query(self, req: QueryRequest) -> QueryResult:
        """Query as before, only while the server is the one the mapping was reviewed under."""
        conn = self._connection()
        if conn is None or conn.identity.digest != self.record.identity_digest:
            return QueryResult(finding=QueryFinding.UNKNOWN)
        return await self._find(conn, req.intent_key)
