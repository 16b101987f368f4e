"""Lockgate as an MCP server: the one tool server an agent host (Claude Desktop, an IDE) connects to.

    python -m lockgate.client.mcp --stdio                         # the host launches it
    python -m lockgate.client.mcp --http --port 0 --port-file p   # streamable HTTP on loopback

Each MCP session is one Lockgate run, opened by the trusted host with the tenant, actor
and context of the configuration (``FrontSettings``); ``tools/list`` opens a turn and
lists its catalogue, ``tools/call`` proposes in the latest turn and answers the
model-facing projection; ``lockgate_status`` tells how a waiting call ended.
"""

from lockgate.client.mcp.names import ToolNames, is_mcp_tool_name
from lockgate.client.mcp.results import STATUS_TOOL, arguments_text, call_id_for, tool_result
from lockgate.client.mcp.server import create_server, serve_stdio
from lockgate.client.mcp.session import FrontSession, Lockgate
from lockgate.client.mcp.settings import FrontSettings

__all__ = [
    "STATUS_TOOL",
    "FrontSession",
    "FrontSettings",
    "Lockgate",
    "ToolNames",
    "arguments_text",
    "call_id_for",
    "create_server",
    "is_mcp_tool_name",
    "serve_stdio",
    "tool_result",
]
