"""What the front door is told: the broker, its two users, and the run the trusted host authorises.

Read from the environment (prefix ``LOCKGATE_FRONT_``) and, under it, a JSON or YAML file
(``config_file``, or ``LOCKGATE_FRONT_CONFIG_FILE``): a keyword argument wins over the
environment, the environment over the file. The MCP client never chooses the tenant, the
actor or the context: they are the host's, and only here.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, SecretStr, field_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from lockgate.runtime.credentials import credentials_path, read_run_info
from lockgate.runtime.settings import default_var_dir

ENV_PREFIX = "LOCKGATE_FRONT_"
#: The broker when neither a URL nor a running ``lockgate run`` says otherwise.
DEFAULT_NATS_URL = "nats://127.0.0.1:4222"


class _ConfigFile(PydanticBaseSettingsSource):
    """The values of a JSON or YAML file (YAML reads JSON too), below the environment."""

    def __init__(self, settings_cls: type[BaseSettings], path: Path | None) -> None:
        super().__init__(settings_cls)
        self.path = path

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        # Unused: ``__call__`` reads the whole file at once.
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        if self.path is None:
            return {}
        data = yaml.safe_load(self.path.read_text(encoding="utf-8"))
        if data is None:
            return {}
        if not isinstance(data, dict):
            raise ValueError(f"{self.path}: the configuration must be a mapping of settings")
        return {str(k): v for k, v in data.items()}


class FrontSettings(BaseSettings):
    """The front door's settings. Environment prefix: ``LOCKGATE_FRONT_``.

    Dicts and lists in the environment are JSON (``LOCKGATE_FRONT_CONTEXT='{"case_id": "case-123"}'``).
    """

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, frozen=True)

    #: A JSON or YAML file with any of these settings (the environment wins over it).
    config_file: Path | None = None
    #: Lockgate's broker; None: the one ``lockgate run`` under ``var_dir`` runs (its
    #: ``run.json``), else ``DEFAULT_NATS_URL``.
    nats_url: str | None = None
    #: Where the system keeps its state; credentials and the bearer token default under it.
    var_dir: Path = Field(default_factory=default_var_dir)
    #: The agent runtime's credentials file; None: ``<var_dir>/credentials/agent-<tenant>.json``.
    credentials_file: Path | None = None
    #: The trusted host's credentials file (it opens the runs); None: ``<var_dir>/credentials/host.json``.
    host_credentials_file: Path | None = None

    #: The run every MCP session gets, as the trusted host authorises it.
    tenant: str
    actor: str
    context: dict[str, str] = Field(default_factory=dict)
    stage: str = "default"
    roles: tuple[str, ...] = ()
    #: The classes of data the run may touch; None: any.
    data_classes: tuple[str, ...] | None = None

    #: How long each request to Lockgate (open a run, a turn) waits for its answer.
    timeout_s: float = Field(default=5.0, gt=0)
    #: Between attempts to reach the broker (three, then the call is an error and the next
    #: one tries again): short, because the MCP client waits for every attempt.
    reconnect_wait_s: float = Field(default=0.5, gt=0)
    #: How long a tool call waits for the state the model should learn of.
    propose_timeout_s: float = Field(default=30.0, gt=0)
    #: How long ``lockgate_status`` waits for a waiting call to move on before answering.
    status_wait_s: float = Field(default=2.0, ge=0)

    #: The streamable HTTP transport: loopback only.
    http_host: str = "127.0.0.1"
    #: 0: any free port (logged, and written to ``port_file`` if set).
    http_port: int = Field(default=0, ge=0, le=65535)
    #: A file to write the bound port into, once listening.
    port_file: Path | None = None
    #: The bearer token HTTP clients must present; None: ``token_file``'s.
    http_token: SecretStr | None = None
    #: Where the generated token lives; None: ``<var_dir>/secrets/mcp-front.token``.
    token_file: Path | None = None
    #: An HTTP session unused this long is closed (its run stays on the record).
    session_idle_s: float = Field(default=1800.0, gt=0)
    log_level: str = "INFO"

    @field_validator("http_host")
    @classmethod
    def _loopback(cls, value: str) -> str:
        if value == "localhost":
            return value
        try:
            loopback = ipaddress.ip_address(value).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            raise ValueError(f"the front door binds loopback only, not {value!r}")
        return value

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Keyword arguments, then the environment, then the configuration file."""
        chosen = getattr(init_settings, "init_kwargs", {}).get("config_file")
        named = chosen if chosen is not None else os.environ.get(f"{ENV_PREFIX}CONFIG_FILE")
        path = Path(named) if named else None
        return init_settings, env_settings, _ConfigFile(settings_cls, path)

    def broker_url(self) -> str:
        """The broker to connect to: ``nats_url``, else the running system's, else the default.

        Read again on every connection, so a front door follows its run when that run
        starts again on another port.
        """
        if self.nats_url:
            return self.nats_url
        running = read_run_info(self.var_dir)
        return running.url if running is not None else DEFAULT_NATS_URL

    def agent_credentials(self) -> Path:
        """The agent runtime's credentials file."""
        return self.credentials_file or credentials_path(self.var_dir, f"agent-{self.tenant}")

    def host_credentials(self) -> Path:
        """The trusted host's credentials file."""
        return self.host_credentials_file or credentials_path(self.var_dir, "host")

    def token_path(self) -> Path:
        """Where the HTTP bearer token is kept when none is configured."""
        return self.token_file or self.var_dir / "secrets" / "mcp-front.token"
