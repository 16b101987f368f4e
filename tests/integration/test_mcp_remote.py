"""The MCP client side against the fixture servers as processes: no elicitation, no sampling, no consent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lockgate.mcp.config import ServerConfig
from lockgate.mcp.remote import connect
from lockgate.worlds.mcpservers import State, arm, stdio_command


def board(tmp_path: Path, kind: str) -> ServerConfig:
    command = stdio_command(kind, tmp_path / "state")
    return ServerConfig(name=kind, transport="stdio", command=command[0], args=command[1:],
                        env={"LOCKGATE_FIXTURE": kind})


@pytest.mark.parametrize("asked", ["elicit", "sample"])
async def test_a_servers_request_for_elicitation_or_sampling_is_refused(tmp_path: Path, asked: str) -> None:
    (tmp_path / "state").mkdir()
    arm(tmp_path / "state", "ask_client", kind=asked)
    async with connect(board(tmp_path, "q"), tmp_path, on_tools_changed=lambda: None) as conn:
        caps = conn.identity.capabilities
        result = await conn.call_tool("create_item", {"title": "t", "body": "b", "client_ref": "r1"}, 10)
    assert "no-consent" in json.dumps(result.structured or {}) or result.is_error
    calls = State(tmp_path / "state").ledger()
    assert [c["outcome"] for c in calls] == [f"asked.{asked}.refused"]
    assert State(tmp_path / "state").items() == []   # nothing counted as consent
    assert "tools" in caps


async def test_the_identity_records_names_not_values(tmp_path: Path) -> None:
    async with connect(board(tmp_path, "p"), tmp_path, on_tools_changed=lambda: None) as conn:
        tools = await conn.list_tools()
    identity = conn.identity
    assert identity.env_names == ("LOCKGATE_FIXTURE",)
    assert str(tmp_path) not in json.dumps([identity.env_names, identity.auth_handle])
    assert (identity.server_name, identity.server_version) == ("lockgate-fixture-drafts", "1.0.0")
    assert identity.protocol_version
    assert {t["name"] for t in tools} == {"create_item", "get_item", "list_items"}
