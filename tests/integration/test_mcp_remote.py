"""The MCP client side against real server processes: no elicitation, no sampling, no consent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lockgate.mcp.config import ServerConfig
from lockgate.mcp.remote import connect

SERVERS_SCRIPT = Path(__file__).resolve().parents[1] / "e2e" / "mcp_board_servers.py"


def board(tmp_path: Path, kind: str) -> ServerConfig:
    import sys

    return ServerConfig(name=kind, transport="stdio", command=sys.executable,
                        args=(str(SERVERS_SCRIPT), "--kind", kind), env={"BOARD_STATE": str(tmp_path)})


def ledger(tmp_path: Path) -> list[dict[str, object]]:
    path = tmp_path / "ledger.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize("asked", ["elicit", "sample"])
async def test_a_servers_request_for_elicitation_or_sampling_is_refused(tmp_path: Path, asked: str) -> None:
    (tmp_path / "switches.json").write_text(json.dumps({"ask": asked}))
    async with connect(board(tmp_path, "q"), tmp_path, on_tools_changed=lambda: None) as conn:
        caps = conn.identity.capabilities
        result = await conn.call_tool("create_item", {"title": "t", "body": "b", "client_ref": "r1"}, 10)
    assert result.structured == {"published": False}
    answers = [e for e in ledger(tmp_path) if "asked" in e]
    assert answers == [{"asked": asked, "answer": "refused", "error": answers[0].get("error")}]
    assert not [e for e in ledger(tmp_path) if e.get("effect")]  # nothing counted as consent
    assert "tools" in caps


async def test_the_identity_records_names_not_values(tmp_path: Path) -> None:
    async with connect(board(tmp_path, "p"), tmp_path, on_tools_changed=lambda: None) as conn:
        tools = await conn.list_tools()
    identity = conn.identity
    assert identity.env_names == ("BOARD_STATE",)
    assert str(tmp_path) not in json.dumps([identity.env_names, identity.auth_handle])
    assert (identity.server_name, identity.server_version) == ("board-p", "1.0")
    assert identity.protocol_version
    assert {t["name"] for t in tools} == {"create_item", "get_item"}
