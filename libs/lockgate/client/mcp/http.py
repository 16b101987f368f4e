"""Streamable HTTP on loopback, behind a bearer token: both protocol eras on one path.

Every request must carry ``Authorization: Bearer <token>`` (the configured one, or the
one generated into ``<var>/secrets/mcp-front.token``, mode 0600); anything else is 401
before a session is looked at. A request whose ``MCP-Protocol-Version`` header names no
handshake-era version goes to the SDK's single-exchange entry of the stateless era (an
unknown version is answered there with its typed error), served by the process's one
stateless binding. Anything else is the handshake era: sessions are the SDK's streamable
HTTP transport, one serving loop each, whose lifespan state holds the session's own
``FrontSession``: the SDK's session manager shares one lifespan state between all
sessions, so it is not used here.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os
import secrets
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import anyio
import anyio.abc
import uvicorn
from mcp.server._streamable_http_modern import handle_modern_request
from mcp.server.lowlevel.server import Server
from mcp.server.runner import serve_loop
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER, StreamableHTTPServerTransport
from mcp.server.subscriptions import InMemorySubscriptionBus, SubscriptionBus
from mcp.server.transport_security import (
    DEFAULT_MAX_REQUEST_BODY_SIZE,
    RequestBodyLimitMiddleware,
    TransportSecuritySettings,
)
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.datastructures import Headers
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from lockgate.client.mcp.server import (
    Binding,
    create_server,
    initialization_options,
    stateless_front,
)
from lockgate.client.mcp.session import FrontSession, Lockgate
from lockgate.client.mcp.settings import FrontSettings
from lockgate.client.mcp.tasks import TaskIds
from lockgate.core.errors import LockgateError
from lockgate.runtime.entry import CONFIG_ERROR_EXIT

log = logging.getLogger("lockgate.client.mcp")

#: The one path the front door serves.
PATH = "/mcp"
#: Sessions open at once; each holds a run. A request that would open one more is 503.
MAX_SESSIONS = 256
#: A token read from a file must be at least this long.
MIN_TOKEN_CHARS = 32
_PROTOCOL_VERSION_HEADER = "mcp-protocol-version"


class TokenFileError(LockgateError):
    """The bearer token file cannot be read or created, or holds too short a token."""


def bearer_token(settings: FrontSettings) -> str:
    """The token HTTP clients must present: the configured one, else the token file's (made on first use).

    Raises:
        TokenFileError: the file cannot be read or created, or its token is too short.
    """
    if settings.http_token is not None:
        token = settings.http_token.get_secret_value()
        if len(token) < MIN_TOKEN_CHARS:
            raise TokenFileError(f"the configured bearer token is shorter than {MIN_TOKEN_CHARS} characters",
                                 code="front.token-too-short")
        return token
    return token_at(settings.token_path(), chosen=settings.token_file is not None)


def token_at(path: Path, *, chosen: bool = False) -> str:
    """The token in ``path``, created (mode 0600, a 0700 directory unless ``chosen``) if absent.

    Made as ``lockgate.runtime.keys`` makes keys: written to a file of its own and
    hard-linked into place, so two processes starting at once read the same token.

    Raises:
        TokenFileError: the file cannot be read or created, or its token is too short.
    """
    try:
        return _read_token(path)
    except FileNotFoundError:
        pass
    try:
        if not path.parent.exists():
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        elif not chosen:
            path.parent.chmod(0o700)
        staged = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="ascii") as out:
                out.write(secrets.token_urlsafe(32) + "\n")
                out.flush()
                os.fsync(out.fileno())
            with contextlib.suppress(FileExistsError):
                os.link(staged, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                staged.unlink()
    except OSError as exc:
        raise TokenFileError(f"cannot create the bearer token {path}: {exc}", code="front.token-unavailable") from exc
    return _read_token(path)


def _read_token(path: Path) -> str:
    try:
        token = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError) as exc:
        raise TokenFileError(f"cannot read the bearer token {path}: {exc}", code="front.token-unavailable") from exc
    if len(token) < MIN_TOKEN_CHARS:
        raise TokenFileError(f"the bearer token in {path} is shorter than {MIN_TOKEN_CHARS} characters",
                             code="front.token-too-short")
    return token


def authorized(headers: Headers, token: str) -> bool:
    """True when the request carries ``Authorization: Bearer <token>`` (compared in constant time)."""
    scheme, _, presented = headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not presented:
        return False
    return hmac.compare_digest(presented.strip().encode("utf-8", "replace"), token.encode("utf-8"))


def _rpc_error(status: int, code: int, message: str) -> Response:
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}
    return JSONResponse(body, status_code=status)


_UNAUTHORIZED = Response("a bearer token is required\n", status_code=401,
                         headers={"WWW-Authenticate": 'Bearer realm="lockgate"'}, media_type="text/plain")


class Sessions:
    """The ASGI app: the bearer check, then MCP sessions, each with its own ``FrontSession``."""

    def __init__(self, server: Server[Binding], lockgate: Lockgate, token: str, *, bus: SubscriptionBus,
                 idle_s: float, max_sessions: int = MAX_SESSIONS) -> None:
        self.server = server
        self.lockgate = lockgate
        self.token = token
        self.bus = bus
        self.task_ids = TaskIds.for_binding(lockgate.settings, token)
        self._stateless = Binding(None, stateless_front(lockgate, self.task_ids), bus)
        # A stateless request is one POST, read whole before it is parsed: bounded first.
        self._modern = RequestBodyLimitMiddleware(self._serve_modern, DEFAULT_MAX_REQUEST_BODY_SIZE)
        self.idle_s = idle_s
        self.max_sessions = max_sessions
        # DNS rebinding: a page in a browser must not reach a loopback server by another name.
        self.security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
            allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"])
        self._sessions: dict[str, StreamableHTTPServerTransport] = {}
        self._tg: anyio.abc.TaskGroup | None = None

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Serve sessions while inside; every session ends on the way out."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            try:
                yield
            finally:
                tg.cancel_scope.cancel()
                self._tg = None
                self._sessions.clear()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        headers = Headers(scope=scope)
        if not authorized(headers, self.token):
            await _UNAUTHORIZED(scope, receive, send)
            return
        if scope["path"].rstrip("/") != PATH:
            await Response("not found\n", status_code=404, media_type="text/plain")(scope, receive, send)
            return
        version = headers.get(_PROTOCOL_VERSION_HEADER)
        if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
            await self._modern(scope, receive, send)
            return
        session_id = headers.get(MCP_SESSION_ID_HEADER)
        if session_id is None:
            await self._open(scope, receive, send)
            return
        transport = self._sessions.get(session_id)
        if transport is None:
            await _rpc_error(404, -32600, "Session not found")(scope, receive, send)
            return
        await transport.handle_request(scope, receive, send)
        if transport.is_terminated:  # the client ended it (DELETE)
            await self._discard(session_id, transport)

    async def _serve_modern(self, scope: Scope, receive: Receive, send: Send) -> None:
        await handle_modern_request(self.server, self.security, False, self._stateless, scope, receive, send)

    async def _open(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._tg is None:
            raise RuntimeError("Sessions.running() is not entered")
        if len(self._sessions) >= self.max_sessions:
            await _rpc_error(503, -32603, "Too many open sessions")(scope, receive, send)
            return
        session_id = uuid4().hex
        transport = StreamableHTTPServerTransport(
            mcp_session_id=session_id, security_settings=self.security, idle_timeout=self.idle_s)
        self._sessions[session_id] = transport
        established = False
        try:
            await self._tg.start(self._serve, session_id, transport)
            status = await _status_of(transport, scope, receive, send)
            established = status is not None and status < 400
        finally:
            if not established:  # only an initialize opens a session; anything else leaves none
                await self._discard(session_id, transport)

    async def _serve(self, session_id: str, transport: StreamableHTTPServerTransport, *,
                     task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        session = FrontSession(self.lockgate, self.task_ids)
        binding = Binding(session, self._stateless.stateless, self.bus)
        async with transport.connect() as (read_stream, write_stream):
            task_status.started()
            try:
                idle = transport.idle_scope if transport.idle_scope is not None else anyio.CancelScope()
                with idle:
                    await serve_loop(self.server, read_stream, write_stream, lifespan_state=binding,
                                     session_id=session_id, init_options=initialization_options(self.server))
                if idle.cancelled_caught:
                    log.info("session %s (run %s) idle: closed", session_id[:8], session.run_id)
            except Exception:
                log.exception("session %s failed", session_id[:8])
            finally:
                await self._discard(session_id, transport)

    async def _discard(self, session_id: str, transport: StreamableHTTPServerTransport) -> None:
        self._sessions.pop(session_id, None)
        if not transport.is_terminated:
            with anyio.CancelScope(shield=True):
                await transport.terminate()


async def _status_of(transport: StreamableHTTPServerTransport, scope: Scope, receive: Receive,
                     send: Send) -> int | None:
    status: int | None = None

    async def watch(message: Any) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = int(message["status"])
        await send(message)

    await transport.handle_request(scope, receive, watch)
    return status


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: the process's loop owns shutdown."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host`` (loopback; port 0: any free port).

    Raises:
        OSError: the port is taken, or the address is not this machine's.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(128)
    sock.setblocking(False)
    return sock


def write_port_file(path: Path, port: int) -> None:
    """Say which port was bound (written whole, then moved into place)."""
    staged = path.with_name(f".{path.name}.{os.getpid()}")
    staged.write_text(f"{port}\n", encoding="ascii")
    staged.replace(path)


async def serve_http(lockgate: Lockgate, settings: FrontSettings, stop: asyncio.Event) -> int:
    """Serve streamable HTTP until ``stop`` is set (0), or fail to start (1; ``CONFIG_ERROR_EXIT``
    when the port it was told to take is not free: starting it again changes nothing)."""
    try:
        token = bearer_token(settings)
    except TokenFileError as exc:
        log.error("%s", exc)
        return 1
    try:
        sock = bind(settings.http_host, settings.http_port)
    except OSError as exc:
        log.error("cannot listen on %s:%s: %s", settings.http_host, settings.http_port, exc)
        return CONFIG_ERROR_EXIT
    port = int(sock.getsockname()[1])
    bus = InMemorySubscriptionBus()
    sessions = Sessions(create_server(bus), lockgate, token, bus=bus, idle_s=settings.session_idle_s)
    uv = _Server(uvicorn.Config(
        sessions, log_level=settings.log_level.lower(), access_log=False, lifespan="off",
        timeout_graceful_shutdown=2, server_header=False, proxy_headers=False))
    try:
        async with sessions.running():
            serving = asyncio.create_task(uv.serve(sockets=[sock]))
            host = f"[{settings.http_host}]" if ":" in settings.http_host else settings.http_host
            if settings.port_file is not None:
                write_port_file(settings.port_file, port)
            log.info("MCP front door at http://%s:%d%s (port %d), Lockgate at %s", host, port, PATH,
                     port, settings.broker_url())
            stopping = asyncio.create_task(stop.wait())
            await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            uv.should_exit = True
            await asyncio.gather(serving, return_exceptions=True)
            return 0 if stop.is_set() else 1
    finally:
        sock.close()
