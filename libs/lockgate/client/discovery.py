"""Where the running system is, and whose credentials to use: found the same way everywhere.

``lockgate run`` says where its broker listens in ``<var>/run.json`` and keeps every
user's credentials under ``<var>/credentials/``. The CLI, ``lockgate.client.connect``
and the framework integrations all find them here, so a system started on a port of its
own choosing is found without anyone copying a URL.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from lockgate.operations.deployment import Deployment, read_deployment
from lockgate.runtime.credentials import Credentials, read_run_info
from lockgate.runtime.settings import Settings

#: Where a broker is looked for when nothing says otherwise.
DEFAULT_URL = "nats://127.0.0.1:4222"


@dataclass(frozen=True)
class Local:
    """The system as found on this machine: its broker and its users' credentials.

    ``deployment`` is ``None`` for a broker without Lockgate's users (nothing to log in as).
    """

    url: str
    var_dir: Path
    deployment: Deployment | None
    running: bool

    def credentials(self, user: str) -> Credentials | None:
        """``user``'s credentials; ``None`` on a broker without users.

        Raises:
            LookupError: the deployment has users but not this one.
        """
        if self.deployment is None:
            return None
        found = self.deployment.credentials.get(user)
        if found is None:
            known = ", ".join(sorted(self.deployment.credentials)) or "none"
            raise LookupError(f"no credentials for {user!r} under {self.var_dir} (known: {known})")
        return found


def find_local(url: str | None = None, var_dir: Path | None = None) -> Local:
    """Find the system: ``url``, else ``LOCKGATE_NATS_URL``, else what ``lockgate run`` wrote.

    ``var_dir``: the deployment's directory (default: ``LOCKGATE_VAR_DIR``, else the
    checkout's ``var/``).
    """
    var_dir = var_dir or Settings().var_dir
    info = read_run_info(var_dir)
    chosen = url or os.environ.get("LOCKGATE_NATS_URL") or (info.url if info else DEFAULT_URL)
    deployment = read_deployment(var_dir)
    if info is not None and not info.credentials_dir:
        deployment = None  # it runs against a broker without Lockgate's users
    return Local(chosen, var_dir, deployment, running=info is not None)
