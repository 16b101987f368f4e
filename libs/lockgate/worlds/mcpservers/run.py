"""Run a fixture server as a process: over stdio, or streamable HTTP on a loopback port."""

from __future__ import annotations

import argparse
import hmac
import ipaddress
import logging
import os
import socket
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import uvicorn
from mcp.server.stdio import stdio_server

from lockgate.worlds.mcpservers.server import FixtureServer
from lockgate.worlds.mcpservers.state import PORT_FILE, SERVERS

MCP_PATH = "/mcp"


def parser() -> argparse.ArgumentParser:
    """``python -m lockgate.worlds.mcpservers {p|q} (--stdio | --http --port N) --state DIR``."""
    p = argparse.ArgumentParser(prog="python -m lockgate.worlds.mcpservers",
                                description="an MCP fixture server: p (drafts) or q (publisher)")
    p.add_argument("server", choices=SERVERS)
    transport = p.add_mutually_exclusive_group(required=True)
    transport.add_argument("--stdio", action="store_true", help="serve one client on stdin/stdout")
    transport.add_argument("--http", action="store_true", help=f"streamable HTTP at {MCP_PATH}")
    p.add_argument("--port", type=int, default=0,
                   help=f"HTTP port (0: any free one, written to STATE/{PORT_FILE})")
    p.add_argument("--host", default="127.0.0.1", help="a loopback address only")
    p.add_argument("--state", type=Path, required=True, help="the state directory")
    p.add_argument("--token-file", type=Path, default=None,
                   help="HTTP only: answer 401 to a request without this bearer token")
    return p


def bearer_only(app: Any, token: str) -> Any:
    """``app`` behind a bearer token: any HTTP request without it is answered 401."""
    expected = f"Bearer {token}".encode()

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, expected):
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": b"unauthorized"})
                return
        await app(scope, receive, send)

    return guarded


async def serve_stdio(server: FixtureServer) -> None:
    """Serve one client over this process's stdin and stdout until it closes them."""
    async with stdio_server() as (read_stream, write_stream):
        await server.lowlevel.run(read_stream, write_stream,
                                  server.lowlevel.create_initialization_options())


async def serve_http(server: FixtureServer, *, host: str, port: int, token: str | None = None) -> None:
    """Serve streamable HTTP on ``host:port``; the bound port is written to the state directory.

    The socket is bound before the port file is written, so a reader that sees the file can
    connect (the listen backlog holds it until uvicorn accepts).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    bound = sock.getsockname()[1]
    app: Any = server.lowlevel.streamable_http_app(streamable_http_path=MCP_PATH, host=host)
    if token is not None:
        app = bearer_only(app, token)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    tmp = server.state_dir / f".{PORT_FILE}.{uuid.uuid4().hex}"
    tmp.write_text(f"{bound}\n")
    os.replace(tmp, server.state_dir / PORT_FILE)
    await uvicorn.Server(config).serve(sockets=[sock])


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: parse, open the state, serve until the client (or a signal) ends it."""
    args = parser().parse_args(argv)
    if args.http and not _loopback(args.host):
        print(f"refusing to listen on {args.host}: fixture servers are loopback-only",
              file=sys.stderr)
        return 2
    # stdout is the protocol on stdio: every log line goes to stderr.
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    args.state.mkdir(parents=True, exist_ok=True)
    server = FixtureServer(args.server, args.state)
    if args.stdio:
        anyio.run(serve_stdio, server)
    else:
        token = args.token_file.read_text().strip() if args.token_file else None
        anyio.run(lambda: serve_http(server, host=args.host, port=args.port, token=token))
    return 0
