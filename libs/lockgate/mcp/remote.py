"""One connection to an MCP server, through the official MCP SDK (2.x), with Lockgate's limits.

- The handshake is MCP's ``initialize`` (``mode="legacy"``): the protocol version,
  server info and capabilities it negotiates are the server's identity, with the
  endpoint or command, the secret's *handle* and the environment's *names*.
- No sampling, elicitation or roots callback is installed, so the client never
  advertises them and the SDK answers every such request from the server with an
  error: a server cannot make Lockgate produce text or grant consent.
- A server's notifications only ever *wake* the adapter: ``tools/list_changed`` asks
  for a re-list; log messages are bounded and logged as untrusted data; nothing a
  server sends invokes anything.
- A stdio server's standard error is discarded: it is remote text of unbounded size.

The MCP SDK is imported when a connection opens, never at import.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lockgate.core.canonical import digest
from lockgate.core.errors import LockgateError, TransientError
from lockgate.core.text import safe_text
from lockgate.mcp.config import ServerConfig, resolve_secret
from lockgate.mcp.mapping import ServerIdentity

if TYPE_CHECKING:
    from mcp.client.client import Client

log = logging.getLogger(__name__)

#: Longest remote log or error text that reaches a log line.
REMOTE_LOG_MAX_CHARS = 200
#: Most tools one listing may hold (pages are followed up to this).
MAX_TOOLS = 512
#: How long connecting and one listing may take.
CONNECT_TIMEOUT_S = 15.0


class RemoteError(LockgateError):
    """A remote call that came back as a JSON-RPC error: the server refused the request."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(safe_text(message, REMOTE_LOG_MAX_CHARS), code="mcp.remote-refused")
        self.rpc_code = code


class RemoteUnavailable(TransientError):
    """No connection to the server now (it may come back)."""

    def __init__(self, server: str) -> None:
        super().__init__(f"MCP server {server} is not connected", code="mcp.server-unavailable")


class CallResult:
    """A tool's result: its structured content (or JSON text content), error flag, bounded text."""

    def __init__(self, structured: object, is_error: bool, text: str) -> None:
        self.structured = structured
        self.is_error = is_error
        self.text = text


def untrusted(server: str, text: str) -> str:
    """Remote text, bounded and labelled, as it may appear in a log line."""
    return f"[untrusted text from MCP server {server}] {safe_text(text, REMOTE_LOG_MAX_CHARS)!r}"


class Connection:
    """An open session with one server: its identity, its tools, calls."""

    def __init__(self, config: ServerConfig, client: Client, identity: ServerIdentity) -> None:
        self.config = config
        self._client = client
        self.identity = identity

    async def list_tools(self) -> list[dict[str, Any]]:
        """Every tool the server lists now, as it came over the wire (camelCase keys)."""
        tools: list[dict[str, Any]] = []
        cursor: str | None = None
        while len(tools) < MAX_TOOLS:
            page = await self._client.list_tools(cursor=cursor, cache_mode="bypass")
            tools += [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in page.tools]
            cursor = page.next_cursor
            if not cursor:
                break
        return tools[:MAX_TOOLS]

    async def call_tool(self, name: str, arguments: dict[str, Any], timeout_s: float) -> CallResult:
        """Call ``name``; a JSON-RPC refusal of the request raises ``RemoteError``.

        Raises:
            RemoteError: the server answered with a JSON-RPC error that says it did not run
                the tool (unknown tool, invalid parameters).
            Exception: anything else (a timeout, a lost connection, an unreadable answer):
                the caller treats it as an unknown outcome.
        """
        from mcp_types import INVALID_PARAMS, METHOD_NOT_FOUND

        from mcp.shared.exceptions import MCPError

        try:
            result = await self._client.call_tool(name, arguments, read_timeout_seconds=timeout_s)
        except MCPError as exc:
            if exc.code in (INVALID_PARAMS, METHOD_NOT_FOUND):
                raise RemoteError(exc.code, exc.error.message) from None
            raise
        text = " ".join(getattr(c, "text", "") for c in result.content)[:4096]
        structured: object = result.structured_content
        if structured is None and text:
            import json

            with contextlib.suppress(ValueError):
                structured = json.loads(text)
        return CallResult(structured, bool(result.is_error), text)


async def _transport(config: ServerConfig, secrets_dir: Path, stack: contextlib.AsyncExitStack) -> Any:
    """The SDK transport for ``config``, secrets resolved into it (and only into it)."""
    if config.transport == "stdio":
        from mcp.client.stdio import StdioServerParameters, stdio_client

        env = dict(config.env)
        for name, handle in config.secret_env.items():
            env[name] = resolve_secret(handle, secrets_dir).reveal()
        params = StdioServerParameters(command=config.command, args=list(config.args), env=env,
                                       cwd=config.cwd)
        errlog = stack.enter_context(open(os.devnull, "w"))  # noqa: SIM115 - closed by the stack
        return stdio_client(params, errlog=errlog)
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    headers: dict[str, str] = {}
    if config.auth is not None:
        secret = resolve_secret(config.auth.secret, secrets_dir).reveal()
        headers[config.auth.header] = f"{config.auth.scheme} {secret}".strip()
    # A client handed in is not closed by the transport: the stack closes it.
    http = await stack.enter_async_context(create_mcp_http_client(headers=headers))
    return streamable_http_client(config.url, http_client=http)


def identity_of(config: ServerConfig, client: Client) -> ServerIdentity:
    """The identity a connected client shows: where, as whom, and what the server said."""
    info = client.server_info
    capabilities = client.server_capabilities.model_dump(mode="json", by_alias=True, exclude_none=True)
    instructions = client.instructions
    return ServerIdentity(
        server=config.name,
        transport=config.transport,
        endpoint=config.endpoint,
        auth_handle=config.auth.secret if config.auth else "",
        auth_header=config.auth.header if config.auth else "",
        env_names=tuple(sorted({*config.env, *config.secret_env})),
        protocol_version=client.protocol_version,
        server_name=safe_text(info.name, 128) if info else "",
        server_version=safe_text(info.version or "", 64) if info else "",
        capabilities=capabilities,
        instructions_digest=digest(instructions) if instructions else "",
    )


@contextlib.asynccontextmanager
async def connect(
    config: ServerConfig, secrets_dir: Path, *, on_tools_changed: Callable[[], None]
) -> AsyncIterator[Connection]:
    """Open a session with ``config``'s server; ``on_tools_changed`` is called on ``list_changed``.

    Raises:
        ConfigError: a secret the server needs is missing.
        Exception: the server could not be started or reached, or the handshake failed.
    """
    import mcp_types

    from mcp.client.client import Client

    async def on_message(message: object) -> None:
        # Notifications only wake; they never invoke anything.
        if isinstance(message, mcp_types.ToolListChangedNotification):
            on_tools_changed()

    async def on_log(params: mcp_types.LoggingMessageNotificationParams) -> None:
        log.info("log from MCP server %s: %s", config.name, untrusted(config.name, str(params.data)))

    async with contextlib.AsyncExitStack() as stack:
        client = Client(await _transport(config, secrets_dir, stack), mode="legacy", cache=None,
                        message_handler=on_message, logging_callback=on_log)
        entered = await stack.enter_async_context(client)
        yield Connection(config, entered, identity_of(config, entered))
