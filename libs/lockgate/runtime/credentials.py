"""What a process reads of its deployment: its own credentials file, and the running system's ``run.json``.

A deployment's users are made from outside its processes (``lockgate.operations.deployment``
writes ``<var>/credentials/<user>.json`` and, while ``lockgate run`` runs, ``<var>/run.json``);
a process only reads them: the credentials file names its NATS user and the client settings
its role needs, and ``run.json`` says where the running system's broker is. The file formats
are defined here, once, for both sides.
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from lockgate.core.errors import LockgateError

#: The JetStream API as the services' account serves it (an account that imports it names
#: it ``lockgate.contracts.subjects.IMPORTED_JS_API``).
JS_API = "$JS.API"


class CredentialsError(LockgateError):
    """A credentials file that is missing, unreadable or not a Lockgate credential."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="credentials.invalid")


class Credentials(msgspec.Struct, frozen=True, kw_only=True):
    """How one NATS user connects: its name and password, and the client settings its role needs."""

    user: str
    password: str
    account: str
    inbox_prefix: str
    js_prefix: str
    #: The principal token its command subjects end in (reviewers, operators).
    principal: str = ""

    def __repr__(self) -> str:
        # A credential must never reach a log line or a traceback by accident.
        return f"Credentials(user={self.user!r}, account={self.account!r})"

    __str__ = __repr__


class NodeAddress(msgspec.Struct, frozen=True, kw_only=True):
    """Where one node listens (written to ``run.json``; no secrets)."""

    name: str
    url: str
    monitor: str


class RunInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What ``lockgate run`` says about itself in ``<var>/run.json`` while it runs."""

    url: str
    pid: int
    credentials_dir: str = ""
    embedded: bool = True
    #: The nodes of a local cluster (empty: one server at ``url``).
    nodes: list[NodeAddress] = []
    #: How many replicas of each supervised process run (absent: one).
    replicas: dict[str, int] = {}
    #: How many events streams the deployment keeps (``lockgate.eventstore.partitions``).
    event_partitions: int = 1
    #: The adapter processes the deployment has users for, with their capabilities: the
    #: configured ones and those registered while it runs (``lockgate.operations.registered``).
    adapters: dict[str, list[str]] = {}


def credentials_dir(var_dir: Path) -> Path:
    """Where a deployment's credentials files are."""
    return var_dir / "credentials"


def credentials_path(var_dir: Path, user: str) -> Path:
    """The credentials file of ``user``."""
    return credentials_dir(var_dir) / f"{user}.json"


def load_credentials(path: Path) -> Credentials:
    """Read one credentials file.

    Raises:
        CredentialsError: missing, unreadable, or not a credentials file.
    """
    try:
        return msgspec.json.decode(path.read_bytes(), type=Credentials)
    except FileNotFoundError:
        raise CredentialsError(f"no credentials file {path}") from None
    except (OSError, msgspec.MsgspecError) as exc:
        raise CredentialsError(f"{path} is not a credentials file: {type(exc).__name__}") from None


def run_info_path(var_dir: Path) -> Path:
    """Where a running ``lockgate run`` describes itself."""
    return var_dir / "run.json"


def read_run_info(var_dir: Path) -> RunInfo | None:
    """The running system's description, or ``None`` when nothing runs from ``var_dir``.

    A file left by a supervisor that died is ignored (its pid is gone).
    """
    try:
        info = msgspec.json.decode(run_info_path(var_dir).read_bytes(), type=RunInfo)
    except (OSError, msgspec.MsgspecError):
        return None
    try:
        os.kill(info.pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return info
