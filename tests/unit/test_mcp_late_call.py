"""A governed MCP tool is not called once its attempt's write is no longer wanted.

After ``boundary.not_after`` the executor records the outcome unknown, and an effect the
query finds absent may be tried again; an MCP server cannot refuse a call that reaches it
late, so the adapter does not make one (a process frozen between crossing and calling).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from lockgate.adapters.sdk import SendBoundary
from lockgate.contracts.messages import ExecutionOrder
from lockgate.mcp.adapter import MappedAdapter
from lockgate.mcp.remote import CallResult
from tests.unit.test_mcp_mappings import listed, mapped, snapshot


class Remote:
    """Stands in for an open session: records the calls it is asked to make."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def call_tool(self, name: str, arguments: dict[str, Any], timeout_s: float) -> CallResult:
        self.calls.append((name, arguments))
        return CallResult({"id": "item-1"}, False, "")


def adapter(remote: Remote) -> MappedAdapter:
    snap = snapshot(listed())
    record = mapped(snap)
    tool = snap.tool("create_item")
    assert tool is not None
    return MappedAdapter(record, tool, connection=lambda: remote,  # type: ignore[arg-type,return-value]
                         call_timeout_s=5.0)


def order(served: MappedAdapter) -> ExecutionOrder:
    return ExecutionOrder(
        tenant="tenant-a", intent_id="intent-1", attempt_id="att-1", intent_key="key-1",
        capability=served.contract.name, digest="sha256:d", actor="user-42",
        arguments={"title": "Release", "body": "Out."},
        resource={"type": "board", "id": "p", "tenant": "tenant-a",
                  "mcp_mapping": served.record.revision},
        preconditions={}, authorized_version=4,
    )


def boundary(not_after: datetime) -> SendBoundary:
    async def cross() -> datetime:
        return not_after

    return SendBoundary(cross)


async def test_a_call_held_up_past_not_after_is_not_made() -> None:
    remote = Remote()
    served = adapter(remote)
    late = boundary(datetime.now(UTC) - timedelta(seconds=1))
    with pytest.raises(RuntimeError, match="not called"):
        await served.execute(order(served), late)
    assert late.crossed  # past the boundary: the SDK reports nothing, the outcome is unknown
    assert remote.calls == []


async def test_a_call_in_time_is_made_once() -> None:
    remote = Remote()
    served = adapter(remote)
    done = await served.execute(order(served), boundary(datetime.now(UTC) + timedelta(seconds=30)))
    assert [name for name, _ in remote.calls] == ["create_item"]
    assert done.receipt["remote_id"] == "item-1"
