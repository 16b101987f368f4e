"""A deployment as a person makes one for their own functions: the six services under the
supervisor (``lockgate run``'s, without the demo adapters), a policy bundle of the demo's plus
the test's files, and adapters served beside it with ``lockgate adapter serve``.

The end-to-end tests of capability functions share it (``test_function_adapters``,
``test_history_e2e``); each names its bundle files and what its functions write their calls
to (a JSON-lines ledger, under an environment variable its function module reads).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TypeVar

import nats
from nats.aio.client import Client

from lockgate.client.sdk import Gateway
from lockgate.client.sdk import connect as connect_gateway
from lockgate.contracts import subjects
from lockgate.operations.supervisor import READY_LINE
from lockgate.runtime.credentials import credentials_path, load_credentials, read_run_info
from lockgate.testing.processes import Printing
from lockgate.testing.system import REPO, bundle_copy

HERE = Path(__file__).resolve().parent
LOCKGATE = [sys.executable, "-m", "lockgate.cli"]
#: The supervisor over the six services only: the demo's adapters play no part here.
SUPERVISE = (
    "import asyncio, sys\n"
    "from lockgate.runtime.settings import Settings\n"
    "from lockgate.operations.status import SERVICES\n"
    "from lockgate.operations.supervisor import run_supervisor\n"
    "children = [(s, f'lockgate.{s}') for s in SERVICES]\n"
    "sys.exit(asyncio.run(run_supervisor(Settings(), port=0, children=children)))\n"
)


class ServedFunctions:
    """The running supervisor, its var directory, and the adapters served beside it.

    ``bundle``: files added to a copy of the demo bundle; ``ledger_env``: the variable that
    tells the served functions where to write their calls (``root / ledger``).
    """

    def __init__(self, root: Path, bundle: Mapping[str, str], *, ledger: str, ledger_env: str) -> None:
        self.root = root
        self.var_dir = root / "var"
        self.ledger = root / ledger
        self._ledger_env = ledger_env
        self.policies = bundle_copy(root, (REPO / "deploy" / "policies" / "bundle.yaml").read_text(),
                                    bundle)
        self.run: Printing | None = None
        self.served: dict[str, Printing] = {}

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKGATE_")}
        env.update(LOCKGATE_VAR_DIR=str(self.var_dir), LOCKGATE_POLICY_DIR=str(self.policies),
                   LOCKGATE_METRICS_PORT="0", PYTHONPATH=os.pathsep.join([str(REPO), str(HERE)]))
        env[self._ledger_env] = str(self.ledger)
        return env

    async def serve(self, target: str, name: str) -> Printing:
        """Start ``lockgate adapter serve target --name name`` (not yet waited for)."""
        proc = await Printing.start(*LOCKGATE, "adapter", "serve", target, "--name", name,
                                    env=self.env(), cwd=HERE)
        self.served[name] = proc
        return proc

    async def serving(self, target: str, name: str) -> None:
        """Serve ``target`` and wait until it says so and answers that it is ready."""
        proc = await self.serve(target, name)
        await proc.wait_for_line(lambda line: line.startswith(f"lockgate: adapter {name} serving"), 60)
        await self.ready(name)

    async def ready(self, name: str, timeout_s: float = 60.0) -> None:
        """Wait until the adapter process answers that it serves all it registered."""
        nc = await self.connect("admin")
        try:
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                try:
                    msg = await nc.request(subjects.adapter_status(name), b"", timeout=0.5)
                    if json.loads(msg.data).get("ready"):
                        return
                except (nats.errors.Error, TimeoutError):
                    pass
                await asyncio.sleep(0.2)
            raise AssertionError(f"adapter {name} not ready: {self.served[name].lines[-20:]}")
        finally:
            await nc.close()

    def url(self) -> str:
        info = read_run_info(self.var_dir)
        assert info is not None
        return info.url

    async def connect(self, user: str, **options: object) -> Client:
        creds = load_credentials(credentials_path(self.var_dir, user))
        return await nats.connect(self.url(), user=creds.user, password=creds.password,
                                  inbox_prefix=creds.inbox_prefix, allow_reconnect=False, **options)

    async def gateway(self, user: str = "agent-tenant-a") -> Gateway:
        """An agent runtime (and its trusted host), or a person, by broker user."""
        host = credentials_path(self.var_dir, "host") if user.startswith("agent-") else None
        return await connect_gateway(self.url(), credentials=credentials_path(self.var_dir, user),
                                     host=host, timeout_s=10)

    def calls(self, kind: str) -> list[dict[str, str]]:
        """The served functions' calls of ``kind``, from their ledger."""
        lines = self.ledger.read_text().splitlines() if self.ledger.exists() else []
        return [c for c in map(json.loads, lines) if c["kind"] == kind]


D = TypeVar("D", bound=ServedFunctions)


@asynccontextmanager
async def supervised(deployment: D) -> AsyncIterator[D]:
    """Run the supervisor until the block ends; then stop every adapter served and it, which
    must exit 0."""
    deployment.run = await Printing.start(sys.executable, "-c", SUPERVISE, env=deployment.env(),
                                          cwd=deployment.root)
    try:
        await deployment.run.wait_for_line(lambda line: line == READY_LINE, 240)
        yield deployment
    finally:
        for proc in deployment.served.values():
            await proc.stop(signal.SIGTERM, timeout_s=15)
        code = await deployment.run.stop(timeout_s=60)
    assert code == 0, deployment.run.lines[-20:]
