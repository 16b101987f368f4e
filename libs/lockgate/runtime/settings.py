"""Typed settings, read from the environment only when a process asks for them."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

#: The checkout this package runs from (the demo policies live there).
_REPO = Path(__file__).resolve().parents[3]


class Settings(BaseSettings):
    """Settings every Lockgate process shares. Environment prefix: ``LOCKGATE_``."""

    model_config = SettingsConfigDict(env_prefix="LOCKGATE_", frozen=True)

    nats_url: str = "nats://127.0.0.1:4222"
    nats_user: str | None = None
    nats_password: str | None = None
    #: Where replies to this process's requests go; a role with its own prefix cannot
    #: read other clients' replies (see ``lockgate.runtime.roles``).
    inbox_prefix: str = "_INBOX"
    #: Create or update streams, buckets and durables at start. The embedded default
    #: does; in a cluster an administrator's job does it once and services only bind.
    manage_topology: bool = True
    var_dir: Path = Path("var")
    #: The executor's secret for the per-attempt report tokens (32 random bytes); None:
    #: ``<var_dir>/secrets/report.key``, created on first use. Every executor replica
    #: must read the same key.
    report_key_file: Path | None = None
    #: Cedar policies and schema fragments, read recursively.
    policy_dir: Path = _REPO / "deploy" / "policies"
    #: Replicas of every stream: 1 embedded, 3 in a cluster.
    replicas: int = Field(default=1, ge=1, le=5)
    #: How long a service waits for an adapter's request/reply answer.
    adapter_timeout_s: float = 2.0
    #: How long a JetStream message may stay unacknowledged before redelivery: the
    #: time a crashed replica's in-flight work waits before another takes it. Handlers
    #: are idempotent, so a slow one being redelivered early is harmless.
    ack_wait_s: float = 5.0
    #: Upper bound of raw argument bytes intake accepts for any tool.
    max_candidate_bytes: int = 64 * 1024
    #: How long a review stays open.
    review_ttl_s: float = 3600.0
    #: Metrics port of this process (0: no metrics endpoint).
    metrics_port: int = 0
    metrics_addr: str = "127.0.0.1"
    log_level: str = "INFO"
    #: When set, each service writes a cProfile of its whole run here when it stops.
    profile_dir: Path | None = None

    def connect_options(self) -> dict[str, object]:
        """Keyword arguments for ``nats.connect`` / ``NatsBroker``."""
        return {
            "servers": self.servers(),
            "max_reconnect_attempts": -1,
            "reconnect_time_wait": 0.5,
            "connect_timeout": 2,
            "inbox_prefix": self.inbox_prefix,
        }

    def servers(self) -> list[str]:
        """The server URLs (``nats_url`` may list several, comma-separated), with credentials."""
        urls = [u.strip() for u in self.nats_url.split(",") if u.strip()]
        if not self.nats_user:
            return urls
        # Credentials in the URL work the same for nats-py and FastStream.
        auth = f"{quote(self.nats_user, safe='')}:{quote(self.nats_password or '', safe='')}@"
        return [u.replace("://", "://" + auth, 1) if "@" not in u else u for u in urls]
