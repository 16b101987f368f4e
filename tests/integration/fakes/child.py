"""A stand-in for a Lockgate service: answers ``lg.status.<name>`` and records its pid."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import nats
from nats.aio.msg import Msg

from lockgate.runtime.entry import CONFIG_ERROR_EXIT
from lockgate.runtime.metrics import start_endpoint, url_of
from lockgate.runtime.settings import Settings


def run(
    name: str, *, crash_once_after_s: float | None = None, grandchild: bool = False,
    stuck: bool = False, config_error_on: str | None = None,
) -> int:
    """Answer status requests until killed; optionally exit with 3 once, or start a grandchild,
    or exit with ``CONFIG_ERROR_EXIT`` once the file ``config_error_on`` names appears.

    The supervisor hands every child ``LOCKGATE_NATS_URL`` and ``LOCKGATE_VAR_DIR``;
    the pid files under the var dir let the test find every process it must see gone.
    """
    var_dir = Path(os.environ["LOCKGATE_VAR_DIR"])
    with open(var_dir / f"{name}.pids", "a") as pids:
        pids.write(f"{os.getpid()}\n")
    if grandchild:
        # A helper process of the child's own: it must not outlive a shutdown.
        helper = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(600)", str(var_dir)]
        )
        (var_dir / f"{name}.grandchild.pid").write_text(str(helper.pid))
    marker = var_dir / f"{name}.crashed-once"
    crash_after_s = None
    if crash_once_after_s is not None and not marker.exists():
        marker.touch()
        crash_after_s = crash_once_after_s
    return asyncio.run(_serve(name, os.environ["LOCKGATE_NATS_URL"], var_dir, crash_after_s, stuck,
                              var_dir / config_error_on if config_error_on else None))


async def _serve(
    name: str, url: str, var_dir: Path, crash_after_s: float | None, stuck: bool,
    config_error_on: Path | None = None,
) -> int:
    # A fake has no row in the role table: it answers as the topology owner.
    creds = json.loads((var_dir / "credentials" / "admin.json").read_text())
    nc = await nats.connect(url, user=creds["user"], password=creds["password"])
    # Where the supervisor's environment says (a port of its own, or one it was handed).
    endpoint = start_endpoint(Settings())
    body: dict[str, object] = {"service": name, "pid": os.getpid(), "instance": f"{name}-{os.getpid()}",
                               "metrics": url_of(endpoint)}
    if stuck:  # alive and answering, but one handler never returns
        body["consumers"] = {"work": {"pending": 3, "idle_s": 0.5, "busy_s": 999.0}}
    answer = json.dumps(body)

    async def status(msg: Msg) -> None:
        await msg.respond(answer.encode())

    await nc.subscribe(f"lg.status.{name}", cb=status)
    await nc.flush()
    if crash_after_s is not None:
        await asyncio.sleep(crash_after_s)
        return 3
    while config_error_on is not None:
        if config_error_on.exists():
            print(f"{name}: its configuration is no longer valid", file=sys.stderr, flush=True)
            return CONFIG_ERROR_EXIT
        await asyncio.sleep(0.1)
    await asyncio.Event().wait()
    return 0
