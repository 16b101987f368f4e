"""Console tokens: a person's own NATS user, sealed for the console, with an expiry.

``lockgate token --as alice`` reads the person's own credentials
(``<var>/credentials/reviewer-alice.json``) and seals ``{user, password, issued_at,
expires_at}`` with AES-256-GCM under the console's token key (``<var>/secrets/console.key``,
made on first use, mode 0600). The console opens a token, refuses it when it is forged
or expired, and connects to the broker *as that user*: every approval, resolution or
withdrawal it makes for the person is checked by the broker's per-person permissions and
recorded under the person's name. The console holds no authority of its own.

What a leaked token gives: until it expires, what its person may do through the console.
Not the password (it is sealed), and nothing after ``expires_at``. Rotating the key
(delete the file, restart the console) revokes every token at once; changing one
person's password revokes theirs.
"""

from __future__ import annotations

import base64
import binascii
import os
import secrets
import time
from datetime import UTC, datetime
from pathlib import Path

import msgspec
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from lockgate.core.errors import LockgateError
from lockgate.runtime.credentials import Credentials
from lockgate.runtime.keys import key_at
from lockgate.runtime.settings import Settings

#: Every token starts so: the format's version, so a later one can be told apart.
PREFIX = "lgc1."
#: Bound into every seal: a ciphertext made for anything else does not open as a token.
_AAD = b"lockgate console token v1"
_NONCE_BYTES = 12
#: A token longer than this is not one (checked before any decoding).
MAX_TOKEN_CHARS = 2048
#: How long a token is valid unless ``--ttl`` says otherwise.
DEFAULT_TTL_S = 8 * 3600.0
MAX_TTL_S = 30 * 24 * 3600.0


class ConsoleSettings(BaseSettings):
    """What the console and the token issuer agree on. Environment prefix: ``LOCKGATE_CONSOLE_``."""

    model_config = SettingsConfigDict(env_prefix="LOCKGATE_CONSOLE_", frozen=True)

    #: The console's port (0: any free port; its status answer says which).
    port: int = Field(default=8421, ge=0, le=65535)
    #: The address it listens on: loopback unless told otherwise (a container's console
    #: listens on every interface of the container, and compose publishes the port on
    #: the host's loopback).
    addr: str = "127.0.0.1"
    #: The key tokens are sealed with; None: ``<var_dir>/secrets/console.key``.
    token_key_file: Path | None = None
    #: A person's verified connection is closed after this long unused.
    idle_s: float = Field(default=300.0, gt=0)
    #: How often the live stream looks for new events in the views.
    poll_s: float = Field(default=0.5, gt=0)


class TokenError(LockgateError):
    """A token the console does not accept: forged, damaged or expired (``code`` says which)."""


class Claims(msgspec.Struct, frozen=True, kw_only=True):
    """What a token says: whose NATS user it is, and for how long."""

    user: str
    password: str
    issued_at: int
    expires_at: int

    def __repr__(self) -> str:
        # The password must never reach a log line or a traceback by accident.
        return f"Claims(user={self.user!r}, expires_at={self.expires_at})"

    __str__ = __repr__


def token_key_path(settings: Settings, console: ConsoleSettings) -> Path:
    """Where the console's token key lives."""
    return console.token_key_file or settings.var_dir / "secrets" / "console.key"


def token_key(settings: Settings, console: ConsoleSettings) -> bytes:
    """The console's token key (32 random bytes, made on first use, mode 0600).

    Raises:
        KeyFileError: the file cannot be read or created, or is too short.
    """
    return key_at(token_key_path(settings, console), chosen=console.token_key_file is not None,
                  what="console token key")


class ConsoleInfo(msgspec.Struct, frozen=True, kw_only=True):
    """Where a running console serves (``<var>/console.json``, no secrets in it)."""

    url: str
    pid: int


def console_info_path(var_dir: Path) -> Path:
    """Where the console says where it serves."""
    return var_dir / "console.json"


def write_console_info(var_dir: Path, info: ConsoleInfo) -> None:
    """Say where the console serves, for ``lockgate token`` to print."""
    path = console_info_path(var_dir)
    staged = path.with_name(f".{path.name}.{info.pid}")
    staged.write_bytes(msgspec.json.encode(info) + b"\n")
    staged.replace(path)


def read_console_info(var_dir: Path) -> ConsoleInfo | None:
    """The running console's URL, or ``None`` (none wrote it, or it is gone)."""
    try:
        info = msgspec.json.decode(console_info_path(var_dir).read_bytes(), type=ConsoleInfo)
        os.kill(info.pid, 0)
    except (OSError, msgspec.MsgspecError):
        return None
    return info


def seal(key: bytes, credentials: Credentials, *, ttl_s: float = DEFAULT_TTL_S,
         now: float | None = None) -> str:
    """A token for ``credentials``' user, valid for ``ttl_s`` seconds from ``now``.

    Raises:
        ValueError: ``ttl_s`` is not in (0, 30 days].
    """
    if not 0 < ttl_s <= MAX_TTL_S:
        raise ValueError(f"a token lives between 1 second and {MAX_TTL_S:g} seconds")
    issued = int(time.time() if now is None else now)
    claims = Claims(user=credentials.user, password=credentials.password, issued_at=issued,
                    expires_at=issued + int(ttl_s))
    nonce = secrets.token_bytes(_NONCE_BYTES)
    sealed = AESGCM(key[:32]).encrypt(nonce, msgspec.json.encode(claims), _AAD)
    return PREFIX + base64.urlsafe_b64encode(nonce + sealed).decode().rstrip("=")


def unseal(key: bytes, token: str, *, now: float | None = None) -> Claims:
    """The claims of ``token``, if it was sealed with ``key`` and has not expired.

    Raises:
        TokenError: ``auth.token-invalid`` (not a token, or not sealed with this key: forged,
            damaged, or from before the key was rotated) or ``auth.token-expired``.
    """
    if len(token) > MAX_TOKEN_CHARS or not token.startswith(PREFIX):
        raise TokenError("not a console token", code="auth.token-invalid")
    body = token[len(PREFIX):]
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        plain = AESGCM(key[:32]).decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], _AAD)
        claims = msgspec.json.decode(plain, type=Claims)
    except (binascii.Error, ValueError, InvalidTag, msgspec.MsgspecError):
        raise TokenError("the token was not issued for this console", code="auth.token-invalid") from None
    if (time.time() if now is None else now) >= claims.expires_at:
        raise TokenError("the token has expired: issue a new one with `lockgate token`",
                         code="auth.token-expired")
    return claims


def issue(credentials: Credentials, *, ttl_s: float, settings: Settings | None = None,
          console: ConsoleSettings | None = None) -> tuple[str, datetime]:
    """A token for one person's credentials, and when it expires (the CLI's ``token`` command)."""
    settings = settings or Settings()
    console = console or ConsoleSettings()
    now = time.time()
    token = seal(token_key(settings, console), credentials, ttl_s=ttl_s, now=now)
    return token, datetime.fromtimestamp(int(now) + int(ttl_s), UTC)
