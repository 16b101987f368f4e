"""Which MCP servers the adapter connects to, how, and which product capabilities each may back.

The servers file (YAML or JSON; ``LOCKGATE_MCP_SERVERS_FILE``, by default
``mcp/servers.yaml`` under the deployment's ``var`` directory) is deployment
configuration, written by the people who run Lockgate: it names each server, its
transport (``stdio``: command, arguments, environment; ``http``: a streamable-HTTP URL),
its authentication **by handle**, and the product capability names that may be mapped
onto its tools. Those names, never a remote server's, are what the adapter's broker
role grants (``lockgate.runtime.specs.MCP``).

Secrets are named, never written here: ``auth: {header: Authorization, scheme: Bearer,
secret: <handle>}`` and ``secret_env: {VAR: <handle>}`` resolve ``<handle>`` from the file
``<secrets_dir>/<handle>`` (mode 0600, by default ``var/secrets/mcp``), else from the
environment variable ``LOCKGATE_MCP_SECRET_<HANDLE>``. A resolved value lives in a
``Secret``, whose ``repr`` hides it; it goes into a header or a child's environment and
nowhere else (no record, no log line, no response).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from lockgate.core.errors import LockgateError
from lockgate.core.ids import is_capability_name
from lockgate.runtime.settings import Settings

#: A server's name: one lower-case subject token.
SERVER_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")
#: A secret's handle: what the servers file names instead of the secret.
HANDLE = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
#: An environment variable's name.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
#: Environment variable that holds a secret when no file does: this prefix and the handle
#: in upper case, ``-`` as ``_``.
SECRET_ENV_PREFIX = "LOCKGATE_MCP_SECRET_"


class ConfigError(LockgateError):
    """The servers file, a mapping file or a secret cannot be used as written."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="mcp.config-invalid")


class Secret:
    """A resolved secret: usable by ``reveal()``, invisible to ``repr``, ``str`` and logs."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The secret itself, for the one header or environment variable it goes into."""
        return self._value

    def __repr__(self) -> str:
        return "Secret(***)"

    __str__ = __repr__


class AuthRef(BaseModel):
    """How a server authenticates Lockgate over HTTP: a header built from a secret's handle."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    header: str = "Authorization"
    scheme: str = "Bearer"
    secret: str

    @field_validator("secret")
    @classmethod
    def _handle(cls, value: str) -> str:
        if not HANDLE.fullmatch(value):
            raise ValueError(f"secret handle {value!r} must match {HANDLE.pattern}")
        return value


class ServerConfig(BaseModel):
    """One configured MCP server."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    transport: Literal["stdio", "http"]
    command: str = ""
    args: tuple[str, ...] = ()
    #: Plain environment variables of a stdio server (not secret; only names are recorded).
    env: dict[str, str] = Field(default_factory=dict)
    #: Environment variables of a stdio server filled from secrets: name → handle.
    secret_env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str = ""
    auth: AuthRef | None = None
    #: The product capabilities that may be mapped onto this server's tools.
    capabilities: tuple[str, ...] = ()
    #: How often the tools are listed again besides connect and ``list_changed``.
    relist_s: float = Field(default=60.0, gt=0)
    #: How long one remote call may take before its outcome counts as unknown.
    call_timeout_s: float = Field(default=20.0, gt=0)

    @model_validator(mode="after")
    def _check(self) -> ServerConfig:
        if not SERVER_NAME.fullmatch(self.name):
            raise ValueError(f"server name {self.name!r} must match {SERVER_NAME.pattern}")
        if self.transport == "stdio" and not self.command:
            raise ValueError(f"server {self.name}: a stdio server needs a command")
        if self.transport == "http":
            if not self.url.startswith(("http://", "https://")):
                raise ValueError(f"server {self.name}: an http server needs an http(s) URL")
            if "@" in self.url.split("//", 1)[1].split("/", 1)[0]:
                raise ValueError(f"server {self.name}: credentials in the URL; use auth with a handle")
        for name in (*self.env, *self.secret_env):
            if not ENV_NAME.fullmatch(name):
                raise ValueError(f"server {self.name}: {name!r} is not an environment variable name")
        for handle in self.secret_env.values():
            if not HANDLE.fullmatch(handle):
                raise ValueError(f"server {self.name}: secret handle {handle!r} must match {HANDLE.pattern}")
        for capability in self.capabilities:
            if not is_capability_name(capability):
                raise ValueError(f"server {self.name}: {capability!r} is not a capability name")
        return self

    @property
    def endpoint(self) -> str:
        """What identifies where the server is: its URL, or its command line."""
        return self.url if self.transport == "http" else " ".join((self.command, *self.args))


class ServersFile(BaseModel):
    """The servers file: every configured server."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    servers: tuple[ServerConfig, ...] = ()

    @model_validator(mode="after")
    def _distinct(self) -> ServersFile:
        names = [s.name for s in self.servers]
        if len(set(names)) != len(names):
            raise ValueError(f"server names repeat: {names}")
        caps = [c for s in self.servers for c in s.capabilities]
        if len(set(caps)) != len(caps):
            raise ValueError(f"a capability is declared for two servers: {caps}")
        return self

    def server(self, name: str) -> ServerConfig | None:
        """The server called ``name``, if configured."""
        return next((s for s in self.servers if s.name == name), None)

    @property
    def capabilities(self) -> tuple[str, ...]:
        """Every product capability name the servers file lets be mapped (what the role grants)."""
        return tuple(c for s in self.servers for c in s.capabilities)


class McpSettings(BaseSettings):
    """Where the servers file and the secrets are. Environment prefix ``LOCKGATE_MCP_``."""

    model_config = SettingsConfigDict(env_prefix="LOCKGATE_MCP_", frozen=True)

    servers_file: Path = Field(default_factory=lambda: Settings().var_dir / "mcp" / "servers.yaml")
    secrets_dir: Path = Field(default_factory=lambda: Settings().var_dir / "secrets" / "mcp")


def read_structured(path: Path) -> object:
    """A YAML or JSON file's content (JSON is YAML, but a ``.json`` file is read as JSON).

    Raises:
        ConfigError: the file is missing or not YAML/JSON.
    """
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror or exc}") from None
    try:
        return json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: not valid {path.suffix.lstrip('.') or 'YAML'}: {exc}") from None


def load_servers(path: Path) -> ServersFile:
    """The servers file at ``path``; none configured when it does not exist.

    Raises:
        ConfigError: it exists and is not a valid servers file.
    """
    if not path.exists():
        return ServersFile()
    data = read_structured(path)
    try:
        return ServersFile.model_validate(data or {})
    except ValueError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def resolve_secret(handle: str, secrets_dir: Path, environ: Mapping[str, str] | None = None) -> Secret:
    """The secret a handle names: ``<secrets_dir>/<handle>``, else ``LOCKGATE_MCP_SECRET_<HANDLE>``.

    Raises:
        ConfigError: a malformed handle, or no such secret (the message names the handle only).
    """
    if not HANDLE.fullmatch(handle):
        raise ConfigError(f"secret handle {handle!r} is malformed")
    path = secrets_dir / handle
    if path.is_file():
        value = path.read_text().strip()
    else:
        env = os.environ if environ is None else environ
        value = env.get(SECRET_ENV_PREFIX + handle.upper().replace("-", "_"), "").strip()
    if not value:
        raise ConfigError(f"no secret for handle {handle!r} (neither {path} nor "
                          f"{SECRET_ENV_PREFIX}{handle.upper().replace('-', '_')})")
    return Secret(value)
