"""Two small MCP servers for the MCP adapter's tests, run as real processes (stdio or HTTP).

``--kind p``: ``create_item(title, body, visibility?, notify?, client_key)`` makes an
idempotent private draft keyed by ``client_key``; ``get_item(client_key)`` finds it.
``--kind q``: ``create_item(title, body, visibility?, notify?, client_ref)`` publishes and
notifies subscribers, not deduplicated; ``find_item(client_ref)`` finds a publication.

Switches, read from ``<state>/switches.json`` at every listing and call, let a test
change the server while it runs: ``description_suffix`` (appended to create_item's
description), ``remove`` (tool names no longer listed), ``extra_tool`` (list
``delete_everything`` too), ``lose_response`` (that many calls commit, then never answer),
``ask`` (``elicit`` or ``sample``: create_item first asks the client, and records what it
got). Every effect and every answer the server got is in ``<state>/ledger.jsonl``.

Over HTTP the server answers only requests with ``Authorization: Bearer $BOARD_TOKEN``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ToolAnnotations

STATE = Path(os.environ.get("BOARD_STATE", "."))


def switches() -> dict[str, Any]:
    path = STATE / "switches.json"
    return json.loads(path.read_text()) if path.exists() else {}


def ledger() -> list[dict[str, Any]]:
    path = STATE / "ledger.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def write(entry: dict[str, Any]) -> None:
    with open(STATE / "ledger.jsonl", "a") as f:
        f.write(json.dumps(entry) + "\n")


def take(switch: str) -> bool:
    sw = switches()
    left = int(sw.get(switch, 0) or 0)
    if left <= 0:
        return False
    sw[switch] = left - 1
    (STATE / "switches.json").write_text(json.dumps(sw))
    return True


class Board(MCPServer):
    """Lists what the switches say."""

    async def list_tools(self) -> list[Any]:
        sw = switches()
        tools = []
        for tool in await super().list_tools():
            if tool.name in sw.get("remove", []):
                continue
            if tool.name == "delete_everything" and not sw.get("extra_tool"):
                continue
            if tool.name == "create_item" and sw.get("description_suffix"):
                tool = tool.model_copy(update={"description": (tool.description or "") + sw["description_suffix"]})
            tools.append(tool)
        return tools


async def ask_client(ctx: Context, kind: str) -> None:
    from mcp_types import SamplingMessage, TextContent
    from pydantic import BaseModel

    class Confirm(BaseModel):
        ok: bool

    try:
        if kind == "elicit":
            answer = await ctx.elicit("Confirm you want to publish to every subscriber", Confirm)
            write({"asked": "elicit", "answer": str(answer.action)})
        else:
            result = await ctx.request_context.session.create_message(
                messages=[SamplingMessage(role="user", content=TextContent(type="text", text="say yes"))],
                max_tokens=5)
            write({"asked": "sample", "answer": "answered", "text": str(result.content)})
    except Exception as exc:
        write({"asked": kind, "answer": "refused", "error": type(exc).__name__})


def build(kind: str) -> Board:
    server = Board(name=f"board-{kind}", version="1.0")
    ref = "client_key" if kind == "p" else "client_ref"
    finder = "get_item" if kind == "p" else "find_item"

    async def create_item(title: str, body: str, ctx: Context, visibility: str = "public",
                          notify: bool = True, client_key: str = "", client_ref: str = "") -> dict[str, Any]:
        key = client_key or client_ref
        sw = switches()
        if sw.get("ask"):
            await ask_client(ctx, sw["ask"])
            if kind == "q":
                return {"published": False}
        existing = [e for e in ledger() if e.get("effect") and e["key"] == key]
        if kind == "p" and existing:
            return {"id": existing[0]["id"], "found": True}
        item_id = f"{kind}-{len([e for e in ledger() if e.get('effect')]) + 1}"
        write({"effect": "draft" if kind == "p" else "publish", "id": item_id, "key": key, "title": title,
               "body": body, "visibility": visibility, "notify": notify})
        if take("lose_response"):
            await asyncio.sleep(120)  # committed; the answer never comes
        return {"id": item_id, "visibility": visibility, "notified": 3 if notify else 0}

    async def find(client_key: str = "", client_ref: str = "") -> dict[str, Any]:
        key = client_key or client_ref
        found = [e for e in ledger() if e.get("effect") and e["key"] == key]
        return {"found": bool(found), **({"id": found[0]["id"]} if found else {})}

    def delete_everything() -> str:
        return "no"

    desc = ("Create a private draft item; idempotent by client_key." if kind == "p"
            else "Create an item, publish it and notify subscribers.")
    server.add_tool(create_item, name="create_item", description=desc,
                    annotations=ToolAnnotations(destructiveHint=False, idempotentHint=kind == "p"))
    server.add_tool(find, name=finder, description=f"Find an item by its {ref}.",
                    annotations=ToolAnnotations(readOnlyHint=True))
    server.add_tool(delete_everything, name="delete_everything", description="Delete every item.")
    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kind", choices=("p", "q"), required=True)
    parser.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    server = build(args.kind)
    if args.transport == "stdio":
        server.run("stdio")
        return
    import uvicorn

    app = server.streamable_http_app()
    token = os.environ.get("BOARD_TOKEN", "")

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            seen = headers.get(b"authorization", b"").decode()
            if seen != f"Bearer {token}":
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b"unauthorized"})
                return
        await app(scope, receive, send)

    uvicorn.run(guarded, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
