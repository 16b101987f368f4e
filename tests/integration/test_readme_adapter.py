"""The README's adapter is complete: its code block, as printed, serves a capability."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

from nats.aio.client import Client

from lockgate.adapters.client import AdapterClient
from lockgate.adapters.sdk import serve
from lockgate.contracts.messages import NormalizeRequest, QueryRequest
from lockgate.runtime.topology import ensure_topology

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_adapter() -> dict[str, Any]:
    text = README.read_text()
    section = text[text.index("## Writing a capability and its adapter"):]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert code is not None, "the README lost its adapter example"
    assert len(code.group(1).splitlines()) <= 40
    namespace: dict[str, Any] = {"__name__": "readme_adapter"}
    exec(compile(code.group(1), str(README), "exec"), namespace)  # noqa: S102 - our own README
    return namespace


async def test_the_readme_adapter_serves_its_capability(nc: Client) -> None:
    await ensure_topology(nc.jetstream())
    example = readme_adapter()
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(serve([example["TicketComment"]()], nc, name="tickets", stop=stop, ready=ready))
    try:
        await asyncio.wait_for(ready.wait(), 10)
        client = AdapterClient(nc, timeout_s=2)
        described = await client.describe("ticket.comment")
        assert described.contract.name == "ticket.comment" and described.adapter == "tickets"
        normalized = await client.normalize("ticket.comment", NormalizeRequest(
            tenant="tenant-a", actor="user-42", arguments={"text": "  done  "},
            context={"ticket_id": "T-1"}))
        assert normalized.arguments == {"ticket_id": "T-1", "text": "done"}
        assert normalized.resource == {"type": "ticket", "id": "T-1"}
        empty = await client.normalize("ticket.comment", NormalizeRequest(
            tenant="tenant-a", actor="user-42", arguments={"text": " "}, context={"ticket_id": "T-1"}))
        assert (empty.reason, empty.field) == ("argument.text.empty", "text")
        absent = await client.query("ticket.comment", QueryRequest(
            tenant="tenant-a", intent_id="i", intent_key="k", arguments={}))
        assert absent.finding == "absent"
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
