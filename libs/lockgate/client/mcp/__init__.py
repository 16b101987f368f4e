"""Lockgate as an MCP server: the one tool server an agent host (Claude Desktop, an IDE) connects to.

    python -m lockgate.client.mcp --stdio                         # the host launches it
    python -m lockgate.client.mcp --http --port 0 --port-file p   # streamable HTTP on loopback

Both MCP eras: each handshake-era session is one Lockgate run, and the stateless
2026-07-28 era's requests share the process's one run, opened by the trusted host with
the tenant, actor and context of the configuration (``FrontSettings``) for the
authenticated client. ``tools/list`` opens a turn and lists its catalogue, ``tools/call``
proposes in the latest turn and answers the model-facing projection; a waiting call is
a task for a client of the tasks extension, and ``lockgate_status`` tells any client how
it ended.
"""

from lockgate.client.mcp.names import ToolNames, is_mcp_tool_name
from lockgate.client.mcp.results import (
    STATUS_TOOL,
    arguments_text,
    call_id_for,
    stateless_call_id_for,
    tool_result,
)
from lockgate.client.mcp.server import Binding, create_server, serve_stdio
from lockgate.client.mcp.session import FrontSession, Lockgate
from lockgate.client.mcp.settings import FrontSettings
from lockgate.client.mcp.tasks import TaskIds, TaskRef

__all__ = [
    "STATUS_TOOL",
    "Binding",
    "FrontSession",
    "FrontSettings",
    "Lockgate",
    "TaskIds",
    "TaskRef",
    "ToolNames",
    "arguments_text",
    "call_id_for",
    "create_server",
    "is_mcp_tool_name",
    "serve_stdio",
    "stateless_call_id_for",
    "tool_result",
]
