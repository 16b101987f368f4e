"""The documentation's adapter (docs/capabilities.md) is complete: its code block, as printed, serves a capability, and
the command under it is the one that serves a module's capability functions."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

from nats.aio.client import Client

from lockgate.adapters.sdk import CapabilityFunction, SendBoundary, serve
from lockgate.cli.app import parser
from lockgate.contracts.messages import ExecutionOrder, NormalizeRequest, QueryRequest
from lockgate.runtime.ports.adapters import AdapterClient
from lockgate.runtime.topology import ensure_topology

PAGE = Path(__file__).resolve().parents[2] / "docs" / "capabilities.md"


def section() -> str:
    return PAGE.read_text()


def page_adapter() -> dict[str, Any]:
    section_text = section()
    code = re.search(r"```python\n(.*?)```", section_text, re.DOTALL)
    assert code is not None, "docs/capabilities.md lost its adapter example"
    assert len(code.group(1).splitlines()) <= 40
    namespace: dict[str, Any] = {"__name__": "page_adapter"}
    exec(compile(code.group(1), str(PAGE), "exec"), namespace)  # noqa: S102 - our own docs
    return namespace


async def test_the_page_adapter_serves_its_capability(nc: Client) -> None:
    await ensure_topology(nc.jetstream())
    example = page_adapter()
    comment = example["comment"]
    assert isinstance(comment, CapabilityFunction) and comment.has_query
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(serve([comment.adapter()], nc, name="tickets", stop=stop, ready=ready))
    try:
        await asyncio.wait_for(ready.wait(), 10)
        client = AdapterClient(nc, timeout_s=2)
        described = await client.describe("ticket.comment")
        assert described.contract.name == "ticket.comment" and described.adapter == "tickets"
        assert set(described.contract.argument_schema["properties"]) == {"text"}
        assert described.contract.context_arguments == ("ticket_id",)
        normalized = await client.normalize("ticket.comment", NormalizeRequest(
            tenant="tenant-a", actor="user-42", arguments={"text": "  done  "},
            context={"ticket_id": "T-1"}))
        assert normalized.arguments == {"ticket_id": "T-1", "text": "done"}
        assert normalized.resource == {"type": "Ticket", "id": "T-1", "tenant": "tenant-a"}
        empty = await client.normalize("ticket.comment", NormalizeRequest(
            tenant="tenant-a", actor="user-42", arguments={"text": " "}, context={"ticket_id": "T-1"}))
        assert (empty.reason, empty.field) == ("argument.text.empty", "text")
        absent = await client.query("ticket.comment", QueryRequest(
            tenant="tenant-a", intent_id="i", intent_key="k", arguments={}))
        assert absent.finding == "absent"
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
    # What execute does with an order (the worker's part is its own test's): the comment is
    # made once per key, and the query then finds it.
    order = ExecutionOrder(
        tenant="tenant-a", intent_id="i", attempt_id="a", intent_key="k", capability="ticket.comment",
        digest="d", arguments={"ticket_id": "T-1", "text": "done"}, resource={}, actor="user-42",
        preconditions={}, authorized_version=1)

    async def cross() -> None:
        return None

    done = await comment.adapter().execute(order, SendBoundary(cross))
    assert done.result == {"comment_id": "c1"} and example["COMMENTS"] == {"k": {"comment_id": "c1"}}


def test_the_pages_command_serves_the_module() -> None:
    command = re.search(r"```bash\n(lockgate adapter serve [^\n#]+?)\s*(#[^\n]*)?\n```", section())
    assert command is not None, "docs/capabilities.md lost its serve command"
    words = command.group(1).split()
    args = parser().parse_args(words[1:])
    assert (args.command, args.adapter_command, args.target) == ("adapter", "serve", "tickets")
