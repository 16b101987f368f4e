"""Typed settings, read from the environment only when a process asks for them."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from urllib.parse import quote

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from lockgate.eventstore.partitions import MAX_PARTITIONS, Partitions
from lockgate.runtime import specs
from lockgate.runtime.credentials import (
    JS_API,
    Credentials,
    credentials_path,
    load_credentials,
    read_run_info,
)

#: The checkout this package runs from (the demo policies live there).
_REPO = Path(__file__).resolve().parents[3]
#: The longest a review may stay open (14 days).
MAX_REVIEW_TTL_S = 14 * 24 * 3600.0

#: The demo deployment's adapter processes and the capabilities each serves (their specs).
DEMO_ADAPTERS: dict[str, tuple[str, ...]] = {a.name: a.capabilities for a in specs.ADAPTERS}
#: The demo's people: reviewers and operators, each with the tenants they act in
#: (empty: every tenant). ``user-42`` is also an actor of the case world, so the demo
#: shows a person refused approval of their own request.
DEMO_REVIEWERS: dict[str, tuple[str, ...]] = {"alice": (), "user-42": ("tenant-a",)}
DEMO_OPERATORS: dict[str, tuple[str, ...]] = {"ops": ()}


def default_var_dir() -> Path:
    """``var/`` of the checkout this package runs from, else a per-user state directory.

    Never relative to the current directory: every command finds the same system
    wherever it is run from.
    """
    if (_REPO / "pyproject.toml").is_file():
        return _REPO / "var"
    return Path.home() / ".local" / "state" / "lockgate"


class Settings(BaseSettings):
    """Settings every Lockgate process shares. Environment prefix: ``LOCKGATE_``."""

    model_config = SettingsConfigDict(env_prefix="LOCKGATE_", frozen=True, populate_by_name=True)

    nats_url: str = "nats://127.0.0.1:4222"
    nats_user: str | None = None
    nats_password: str | None = None
    #: This process's NATS user as a credentials file (``lockgate run`` hands each child
    #: its own); it sets the user, password, inbox prefix and JetStream prefix.
    credentials_file: Path | None = None
    #: Where replies to this process's requests go; a role with its own prefix cannot
    #: read other clients' replies (see ``lockgate.operations.roles``).
    inbox_prefix: str = "_INBOX"
    #: Create or update streams, buckets and durables at start. Off: an administrator
    #: (``lockgate run``'s supervisor, a cluster's topology job) creates them once and
    #: services only bind, as their broker permissions require.
    manage_topology: bool = False
    var_dir: Path = Field(default_factory=default_var_dir)
    #: The tenants ``lockgate run`` makes agent users for.
    tenants: tuple[str, ...] = ("tenant-a", "tenant-b")
    #: The people who review, with the tenants each reviews (empty: every tenant).
    reviewers: dict[str, tuple[str, ...]] = Field(default_factory=lambda: dict(DEMO_REVIEWERS))
    #: The people who operate, with their tenants (empty: every tenant).
    operators: dict[str, tuple[str, ...]] = Field(default_factory=lambda: dict(DEMO_OPERATORS))
    #: The adapter processes, each with the capabilities it serves (a user and an account each).
    adapters: dict[str, tuple[str, ...]] = Field(default_factory=lambda: dict(DEMO_ADAPTERS))
    #: The executor's secret for the per-attempt report tokens (32 random bytes); None:
    #: ``<var_dir>/secrets/report.key``, created on first use. Every executor replica
    #: must read the same key.
    report_key_file: Path | None = None
    #: Cedar policies and schema fragments, read recursively.
    policy_dir: Path = _REPO / "deploy" / "policies"
    #: Replicas of every stream: 1 embedded, 3 in a cluster.
    replicas: int = Field(default=1, ge=1, le=5)
    #: Events streams (``lockgate.eventstore.partitions``): 1 embedded (``LG_EVENTS``),
    #: K in a cluster (``LG_EVENTS_0`` ... ``LG_EVENTS_<K-1>``, leaders spread over the
    #: nodes). Every process of a deployment must be given the same K.
    event_partitions: int = Field(default=1, ge=1, le=MAX_PARTITIONS)
    #: How long a service waits for an adapter's request/reply answer.
    adapter_timeout_s: float = 2.0
    #: How long a JetStream message may stay unacknowledged before redelivery: the
    #: time a crashed replica's in-flight work waits before another takes it. Handlers
    #: are idempotent, so a slow one being redelivered early is harmless.
    ack_wait_s: float = 5.0
    #: Upper bound of raw argument bytes intake accepts for any tool.
    max_candidate_bytes: int = 64 * 1024
    #: How long a review stays open: at most ``MAX_REVIEW_TTL_S``, what its expiry timer's
    #: bounded deliveries cover (``runtime.specs.EXPIRY_DELIVERIES``).
    review_ttl_s: float = Field(default=3600.0, gt=0, le=MAX_REVIEW_TTL_S)
    #: Serve Prometheus metrics on ``/metrics`` (``lockgate.runtime.metrics``).
    metrics_enabled: bool = True
    #: Its port; 0: a free one, chosen when the process starts and named in its status
    #: answer. ``lockgate run`` given a port serves its own there and hands its children
    #: the ones after it, in start order.
    metrics_port: int = Field(default=0, ge=0, le=65535)
    #: Its address: loopback unless told otherwise.
    metrics_addr: str = "127.0.0.1"
    #: Where traces go (OTLP over HTTP, the base URL as in ``OTEL_EXPORTER_OTLP_ENDPOINT``,
    #: which sets it too); ``None``: no tracing, and the tracing SDK is never imported.
    otlp_endpoint: str | None = Field(default=None, validation_alias=AliasChoices(
        "LOCKGATE_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"))
    #: The share of candidates traced. Decided from the trace id, which every process
    #: derives from the intent id, so all of them keep or drop the same candidates.
    trace_ratio: float = Field(default=1.0, ge=0.0, le=1.0)
    log_level: str = "INFO"
    #: When set, each service writes a cProfile of its whole run here when it stops.
    profile_dir: Path | None = None
    #: Where the projector keeps the views and every query reads them:
    #: ``postgresql://user:password@host:port/dbname``, ``sqlite:///path``, or empty for
    #: ``<var_dir>/views.sqlite``.
    views_url: str = ""
    #: How long after it ended an intent leaves the hot store (its events stay in the
    #: views; a mark stays as its identity). 0: never.
    archive_after_s: float = Field(default=7 * 24 * 3600.0, ge=0)
    #: How often the archiver looks for intents that may leave.
    archive_every_s: float = Field(default=60.0, gt=0)

    def located(self, adapter: str | None = None) -> Settings:
        """These settings with what ``lockgate run`` wrote filling in what was not set.

        Without ``LOCKGATE_NATS_URL``, the broker the running system's ``run.json`` names
        (it takes a free port when 4222 is taken); for ``adapter`` without a credentials
        file of its own, ``<var_dir>/credentials/adapter-<adapter>.json`` when it exists.
        A process ``lockgate run`` starts has both set and is handed these back unchanged.
        """
        changes: dict[str, object] = {}
        if "nats_url" not in self.model_fields_set:
            info = read_run_info(self.var_dir)
            if info is not None:
                changes["nats_url"] = info.url
        if adapter and self.credentials_file is None and self.nats_user is None:
            own = credentials_path(self.var_dir, f"adapter-{adapter}")
            if own.is_file():
                changes["credentials_file"] = own
        return self.model_copy(update=changes) if changes else self

    @property
    def partitions(self) -> Partitions:
        """The events streams of this deployment."""
        return Partitions(self.event_partitions)

    @cached_property
    def credentials(self) -> Credentials | None:
        """This process's credentials, when a credentials file is set.

        Raises:
            CredentialsError: the file is missing or not a credentials file.
        """
        return load_credentials(self.credentials_file) if self.credentials_file else None

    @property
    def js_prefix(self) -> str:
        """The JetStream API prefix this process's account reaches JetStream under."""
        return self.credentials.js_prefix if self.credentials else JS_API

    def connect_options(self) -> dict[str, object]:
        """Keyword arguments for ``nats.connect``.

        The user and password go as options, not in the URLs: nats-py adds the servers a
        cluster announces to its pool as URLs without credentials (it compares them with
        the configured ones including the credentials), and reconnecting to one of them
        with credentials taken from the URL fails with an authorization violation. The
        options are sent to every server.
        """
        creds = self.credentials
        user, password = (creds.user, creds.password) if creds else (self.nats_user, self.nats_password)
        options: dict[str, object] = {
            "servers": [u.strip() for u in self.nats_url.split(",") if u.strip()],
            "max_reconnect_attempts": -1,
            "reconnect_time_wait": 0.5,
            "connect_timeout": 2,
            "inbox_prefix": creds.inbox_prefix if creds else self.inbox_prefix,
        }
        if user:
            options.update(user=user, password=password or "")
        return options

    def servers(self) -> list[str]:
        """The server URLs (``nats_url`` may list several, comma-separated), with credentials."""
        urls = [u.strip() for u in self.nats_url.split(",") if u.strip()]
        creds = self.credentials
        user, password = (creds.user, creds.password) if creds else (self.nats_user, self.nats_password)
        if not user:
            return urls
        auth = f"{quote(user, safe='')}:{quote(password or '', safe='')}@"
        return [u.replace("://", "://" + auth, 1) if "@" not in u else u for u in urls]
