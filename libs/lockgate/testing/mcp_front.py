"""Lockgate's MCP front door as a real process serving streamable HTTP, for tests that drive it.

The front door is started as a host starts it (``python -m lockgate.client.mcp --http``)
against a running ``System``, for the run the host authorises (tenant, actor, the case);
it binds a free loopback port, writes it to a port file, and is reached behind the bearer
token it keeps under the system's root.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx2

from lockgate.operations.supervisor import parent_death_signal
from lockgate.testing.system import REPO, System

#: The tenant and actor of every run the front door opens in these tests.
TENANT = "tenant-a"
ACTOR = "user-42"
#: How long the front door may take to say which port it bound.
START_TIMEOUT_S = 30.0


def front_env(system: System, case_id: str, *, status_wait_s: float = 5, **extra: str) -> dict[str, str]:
    """The front door's settings: this system's broker and users, and the run the host authorises.

    Args:
        system: the running system whose broker and credentials the front door uses.
        case_id: the case the run is about (its context); the MCP client cannot choose another.
        status_wait_s: how long ``lockgate_status`` and ``tasks/get`` wait for a waiting call.
        **extra: more ``LOCKGATE_FRONT_*`` settings.

    Returns:
        The environment variables to add to the front door's.
    """
    return {
        "LOCKGATE_FRONT_NATS_URL": system.url,
        "LOCKGATE_FRONT_VAR_DIR": str(system.root),
        "LOCKGATE_FRONT_TENANT": TENANT,
        "LOCKGATE_FRONT_ACTOR": ACTOR,
        "LOCKGATE_FRONT_CONTEXT": json.dumps({"case_id": case_id}),
        "LOCKGATE_FRONT_STATUS_WAIT_S": str(status_wait_s),
        **extra,
    }


@dataclass(frozen=True)
class Front:
    """A front door serving streamable HTTP: its endpoint and the bearer token it requires."""

    url: str
    token: str

    def client(self, token: str | None = None) -> httpx2.AsyncClient:
        """An HTTP client that presents the front door's token (or ``token``) on every request."""
        return httpx2.AsyncClient(headers={"Authorization": f"Bearer {token or self.token}"},
                                  timeout=httpx2.Timeout(60.0))


@contextlib.contextmanager
def http_front(system: System, case_id: str, name: str, *, status_wait_s: float = 5) -> Iterator[Front]:
    """Run the front door over HTTP for ``case_id`` while inside; it is stopped on the way out.

    Its output goes to the system's log ``name``.

    Args:
        system: the running system.
        case_id: the case of the run every client of this front door gets.
        name: the process's name, for its log and port file.
        status_wait_s: how long ``lockgate_status`` and ``tasks/get`` wait for a waiting call.

    Yields:
        Where to reach it.

    Raises:
        RuntimeError: the front door exited before it bound a port.
        TimeoutError: it did not say which port it bound within ``START_TIMEOUT_S``.
    """
    port_file = system.root / f"{name}.port"
    port_file.unlink(missing_ok=True)
    env = {**os.environ, **front_env(system, case_id, status_wait_s=status_wait_s)}
    with open(system.log(name), "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "lockgate.client.mcp", "--http", "--host", "127.0.0.1", "--port", "0",
             "--port-file", str(port_file)],
            env=env, cwd=REPO, stdout=log, stderr=log, preexec_fn=parent_death_signal())
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not port_file.exists() or not port_file.read_text().strip():
            if proc.poll() is not None:
                raise RuntimeError(f"the front door exited with {proc.returncode}: see {system.log(name)}")
            if time.monotonic() > deadline:
                raise TimeoutError("the front door did not say which port it bound")
            time.sleep(0.05)
        port = int(port_file.read_text())
        token = (system.root / "secrets" / "mcp-front.token").read_text().strip()
        yield Front(f"http://127.0.0.1:{port}/mcp", token)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
