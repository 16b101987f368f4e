"""Connecting to Lockgate's broker: credentials resolved (a file, a local user, the host), refusals typed."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client
from nats.errors import Error as NatsError

from lockgate.client.discovery import DEFAULT_URL, Local, find_local
from lockgate.client.sdk.denials import DENIALS, Denials
from lockgate.client.sdk.errors import ClientError, Unauthorized
from lockgate.client.sdk.gateway import Gateway
from lockgate.operations.roles import JS_API
from lockgate.runtime.credentials import Credentials, CredentialsError, load_credentials

CredentialsLike = Credentials | Path | str


def _as_credentials(value: CredentialsLike) -> Credentials:
    if isinstance(value, Credentials):
        return value
    try:
        return load_credentials(Path(value))
    except CredentialsError as exc:
        raise ClientError(str(exc), code=exc.code) from None


def _refused(exc: BaseException) -> bool:
    """True when ``exc`` is the broker refusing the user (nats-py raises a plain ``Error``
    from the handshake, ``AuthorizationError`` later)."""
    return isinstance(exc, NatsError) and "authorization" in str(exc).lower()


async def _open(url: str, credentials: Credentials | None, options: dict[str, Any]) -> Client:
    """Connect as ``credentials``' user.

    Raises:
        Unauthorized: the broker refused the user (at once: asking again cannot help).
        ClientError: the broker cannot be reached (``lockgate.unavailable``).
    """
    extra = dict(options)
    user = credentials.user if credentials else "anonymous"
    denials = Denials(user)
    refused: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    told = extra.pop("error_cb", None)

    async def on_error(exc: Exception) -> None:
        if _refused(exc) and not refused.done():
            refused.set_result(None)
        await denials.on_error(exc)
        if told is not None:
            await told(exc)

    extra.setdefault("name", f"gateway.{user}")
    if credentials is not None:
        extra.update(user=credentials.user, password=credentials.password,
                     inbox_prefix=credentials.inbox_prefix)
    # ``url`` may name every node of a cluster, comma-separated: nats-py fails over.
    servers = [u.strip() for u in url.split(",") if u.strip()]
    connecting = asyncio.ensure_future(nats.connect(
        servers, max_reconnect_attempts=extra.pop("max_reconnect_attempts", 3),
        connect_timeout=extra.pop("connect_timeout", 2), error_cb=on_error, **extra))
    either: set[asyncio.Future[Any]] = {connecting, refused}
    try:
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        connecting.cancel()
        raise
    if not connecting.done():
        connecting.cancel()
        with contextlib.suppress(BaseException):
            await connecting
    try:
        nc = connecting.result()
    except Exception as exc:  # nats raises several unrelated types for "cannot connect"
        if refused.done() or _refused(exc):
            raise Unauthorized(f"the broker at {url} refused the credentials of {user}: "
                               "a user it does not know or a wrong password",
                               code="lockgate.unauthorized") from None
        raise ClientError(f"cannot connect to {url}: {exc}", code="lockgate.unavailable") from exc
    except asyncio.CancelledError:  # given up on after the refusal
        raise Unauthorized(f"the broker at {url} refused the credentials of {user}: "
                           "a user it does not know or a wrong password",
                           code="lockgate.unauthorized") from None
    DENIALS[nc] = denials
    return nc


async def connect(
    url: str | None = None, *, credentials: CredentialsLike | None = None,
    host: CredentialsLike | bool | None = None, timeout_s: float = 5.0,
    var_dir: Path | None = None, **options: Any,
) -> Gateway:
    """Connect to Lockgate's broker as one user (and, to open runs, as the trusted host).

    Args:
        url: the broker; by default the one ``lockgate run`` says it runs
            (``lockgate.client.discovery``), else ``LOCKGATE_NATS_URL``, else port 4222.
        credentials: the user to connect as: a ``Credentials``, the path of a credentials
            file (``var/credentials/agent-tenant-a.json``), or a user of the local
            deployment by name (``"agent-tenant-a"``); none on a broker without users.
        host: the trusted host's credentials, for ``open_run`` (a second connection);
            ``True`` for the local deployment's ``host`` user.
        timeout_s: how long each request waits for its answer.
        var_dir: the local deployment's directory (default: ``LOCKGATE_VAR_DIR``, else
            the checkout's ``var/``).
        options: passed to ``nats.connect``.

    Raises:
        Unauthorized: the broker refused the credentials (or their absence).
        ClientError: the broker cannot be reached, or a credentials file or user is unusable.
    """
    found = url is None or host is True or _names_a_user(credentials) or _names_a_user(host)
    local = find_local(url, var_dir) if found else None
    url = url or (local.url if local is not None else DEFAULT_URL)
    creds = _resolve(credentials, local)
    host_creds = _resolve("host" if host is True else (host or None), local)
    nc = await _open(url, creds, options)
    host_nc = None
    if host_creds is not None:
        try:
            host_nc = await _open(url, host_creds, options)
        except ClientError:
            await nc.close()
            raise
    return Gateway(
        nc, timeout_s=timeout_s, host_nc=host_nc,
        js_prefix=creds.js_prefix if creds else JS_API, user=creds.user if creds else "anonymous",
        principal=creds.principal if creds else "",
    )


def _names_a_user(value: object) -> bool:
    """True when ``value`` is a user's name rather than a credentials file's path."""
    return isinstance(value, str) and "/" not in value and not value.endswith(".json") \
        and not Path(value).exists()


def _resolve(value: CredentialsLike | None, local: Local | None) -> Credentials | None:
    if value is None:
        return None
    if _names_a_user(value) and local is not None:
        try:
            return local.credentials(str(value))
        except LookupError as exc:
            raise ClientError(str(exc), code="credentials.unknown-user") from None
    return _as_credentials(value)
