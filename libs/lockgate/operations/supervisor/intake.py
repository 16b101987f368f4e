"""Adapters registered while the run runs, taken in on SIGUSR1: their users are made, the
broker reloads its accounts, and ``run.json`` lists them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from nats.aio.client import Client
from nats.errors import Error as NatsError

from lockgate.operations.deployment import ensure_deployment
from lockgate.operations.natsserver import NatsServer
from lockgate.operations.registered import TAKE_IN, merged
from lockgate.operations.roles import deployment_roles
from lockgate.operations.supervisor.report import _say
from lockgate.runtime.credentials import Credentials
from lockgate.runtime.settings import Settings
from lockgate.runtime.topology import CAPABILITIES_BUCKET

#: How often the supervisor has the broker reload before it gives an adapter up, and how
#: long it waits after each reload for the adapter's user to reach its imports.
RELOAD_TRIES = 5
RELOAD_SETTLE_S = 0.5


@dataclass
class _AdapterIntake:
    """Takes in the adapters registered while the run runs (``lockgate.operations.registered``).

    On ``TAKE_IN`` (SIGUSR1) it makes the users of every adapter registered since, renders
    the accounts again and has the broker reload them. nats-server reloads accounts,
    users, permissions, imports and exports in place, keeping every connection; but an
    account added by a reload may not yet see the export another account gained in the
    same reload (measured on 2.15: a JetStream API import of the new account had no
    responders until a second reload, while the services reached the new account's
    requests after the first). So it checks the new users the way their adapter will use
    them (connect, then ask JetStream through the account's import) and reloads again until
    they can, then lists them in ``run.json``, which is what ``lockgate adapter
    serve`` waits for. No service keeps a list of adapters: they find capabilities in the
    capabilities bucket, and reach adapters through imports the reload made.
    """

    settings: Settings
    configured: dict[str, tuple[str, ...]]
    var_dir: Path
    url: str
    brokers: list[NatsServer]
    describe: Callable[[Mapping[str, Sequence[str]]], None]
    server_config: Path | None = None

    async def run(self, loop: asyncio.AbstractEventLoop) -> None:
        wake = asyncio.Event()
        try:
            loop.add_signal_handler(TAKE_IN, wake.set)
        except (ValueError, RuntimeError, NotImplementedError):
            return  # not the main thread: nothing can ask
        current = dict(self.settings.adapters)
        try:
            while True:
                await wake.wait()
                wake.clear()
                current = await self.take_in(current)
        finally:
            loop.remove_signal_handler(TAKE_IN)

    async def take_in(self, current: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        """Make users for what was registered since ``current``; return what is served now."""
        wanted = merged(self.configured, self.var_dir)
        new = {name: caps for name, caps in wanted.items() if current.get(name) != caps}
        if not new:
            self.describe(current)
            return current
        settings = self.settings.model_copy(update={"adapters": wanted})
        try:
            deployment = ensure_deployment(self.var_dir, deployment_roles(settings),
                                           server_config=self.server_config)
        except (OSError, ValueError) as exc:
            _say(f"lockgate: could not make the users of {', '.join(new)}: {exc}", error=True)
            return current
        for _ in range(RELOAD_TRIES):
            for broker in self.brokers:
                broker.reload()
            await asyncio.sleep(RELOAD_SETTLE_S)
            reached = [await _reaches(self.url, deployment.of(f"adapter-{name}")) for name in new]
            if all(reached):
                break
        else:
            _say(f"lockgate: the broker did not take in the users of {', '.join(new)} after "
                 f"{RELOAD_TRIES} reloads; they are not served (see the broker's log)", error=True)
            return current
        for name, caps in new.items():
            _say(f"lockgate: adapter {name} taken in ({', '.join(caps)}); its user adapter-{name}")
        self.describe(wanted)
        return wanted


async def _reaches(url: str, creds: Credentials) -> bool:
    """Whether ``creds`` connect and reach JetStream through their account's import."""
    nc = Client()
    try:
        await nc.connect(servers=[u for u in url.split(",") if u], user=creds.user,
                         password=creds.password, inbox_prefix=creds.inbox_prefix,
                         allow_reconnect=False, connect_timeout=2)
        await nc.jetstream(prefix=creds.js_prefix, timeout=2).stream_info(
            f"KV_{CAPABILITIES_BUCKET}")
        return True
    except (NatsError, OSError, TimeoutError):
        return False
    finally:
        with contextlib.suppress(Exception):
            await nc.close()
