"""The administrator's step: the deployment's users, the supervisor's own connection, and
every stream, bucket and durable, created once before any child starts.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from pathlib import Path

from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.errors import ServiceUnavailableError

from lockgate.operations.cluster import LocalCluster, wait_until_settled
from lockgate.operations.deployment import Deployment, ensure_deployment
from lockgate.operations.roles import deployment_roles
from lockgate.operations.supervisor.report import SupervisorError, _say
from lockgate.runtime.credentials import Credentials, credentials_dir
from lockgate.runtime.settings import Settings
from lockgate.runtime.specs import ADAPTERS as ADAPTER_SPECS
from lockgate.runtime.topology import PartitionsMismatch, ensure_topology, topology_streams

#: How long the first connection to the server may take.
CONNECT_TIMEOUT_S = 10.0
#: How long the topology step asks again while the broker answers that JetStream is
#: temporarily unavailable, or does not answer (a stream still electing its leader).
TOPOLOGY_TIMEOUT_S = 60.0


#: Every stream and bucket the topology creates with one events stream (a partitioned
#: deployment's: ``topology_streams``).
TOPOLOGY_STREAMS: tuple[str, ...] = topology_streams()


def _deployment(
    settings: Settings, var_dir: Path, *, server_config: Path | None = None
) -> Deployment:
    """Every role's user and credentials under ``var_dir`` (made on the first start)."""
    try:
        deployment = ensure_deployment(var_dir, deployment_roles(settings), server_config=server_config)
    except (OSError, ValueError) as exc:
        raise SupervisorError(f"could not make the deployment's users: {exc}") from exc
    _say(f"lockgate: {len(deployment.credentials)} NATS users, one per process and person; "
         f"credentials in {credentials_dir(var_dir)} (mode 0600)")
    return deployment


def unserved_adapters(children: Sequence[str], adapters: Mapping[str, Sequence[str]]) -> list[str]:
    """The demo adapters among ``children`` whose capabilities ``adapters`` (the adapter
    set the deployment makes users for) leaves without that adapter's user.

    Such a child would connect as nobody, or as a user whose account lacks its
    capabilities' subjects, and never answer: the run would never become ready.

    Returns:
        One phrase per adapter, e.g. ``"repo (repo.read_file, ...)"``; empty when all are served.
    """
    unserved: list[str] = []
    for spec in ADAPTER_SPECS:
        if spec.status_name not in children:
            continue
        missing = [c for c in spec.capabilities if c not in adapters.get(spec.name, ())]
        if missing:
            unserved.append(f"{spec.name} ({', '.join(missing)})")
    return unserved


async def _connect(
    settings: Settings, url: str, stopping: asyncio.Event, admin: Credentials | None
) -> Client:
    async def on_error(exc: Exception) -> None:
        # nats-py logs a traceback per failed reconnect attempt by default.
        return None

    connected = False

    async def on_disconnected() -> None:
        # Also called for each failed first attempt, before there was anything to lose.
        if connected and not stopping.is_set():
            _say("lockgate: lost the NATS connection; reconnecting")

    async def on_reconnected() -> None:
        _say("lockgate: reconnected to NATS")

    options = settings.connect_options()
    if admin is not None:
        options.update(user=admin.user, password=admin.password)
    options.update(
        servers=[u for u in url.split(",") if u],
        name="lockgate-supervisor",
        error_cb=on_error,
        disconnected_cb=on_disconnected,
        reconnected_cb=on_reconnected,
    )
    nc = Client()
    try:
        # With unlimited reconnects nats-py retries a first connection forever.
        await asyncio.wait_for(nc.connect(**options), CONNECT_TIMEOUT_S)  # type: ignore[arg-type]
    except (TimeoutError, OSError, NatsError) as exc:
        reason = nc.last_error or exc
        with contextlib.suppress(Exception):
            await nc.close()
        raise SupervisorError(f"cannot connect to NATS at {url}: {reason!r}") from exc
    connected = True
    return nc


async def _create_topology(
    nc: Client, url: str, settings: Settings, *, replicas: int, nodes: LocalCluster | None,
    stopping: asyncio.Event, capabilities: Sequence[str],
) -> None:
    """The administrator's step: every stream, bucket and durable, once (services and
    adapters only bind to them; their users may not create them).

    A cluster started again on its stores elects its meta leader, then each stream's: the
    step waits for both, then asks again while JetStream answers "temporarily unavailable"
    or nothing, up to ``TOPOLOGY_TIMEOUT_S``.

    Raises:
        SupervisorError: the cluster did not settle, or the topology could not be created.
    """
    waited = ""
    if nodes is not None:
        settled = asyncio.create_task(wait_until_settled(nodes.addresses()))
        stopped = asyncio.create_task(stopping.wait())
        try:
            # Ctrl-C while the cluster elects its leaders stops the run, not the wait only.
            await asyncio.wait({settled, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
            if not settled.done():
                settled.cancel()
        if stopping.is_set():
            return
        try:
            settled.result()
        except TimeoutError as exc:
            raise SupervisorError(f"the cluster did not settle on {url}: {exc}") from exc
        waited = " after the meta leader and every stream's leader were elected"
    loop = asyncio.get_running_loop()
    deadline = loop.time() + TOPOLOGY_TIMEOUT_S
    while True:
        try:
            await ensure_topology(
                nc.jetstream(), replicas=replicas, ack_wait_s=settings.ack_wait_s,
                capabilities=capabilities, partitions=settings.partitions)
            return
        except (NatsTimeoutError, ServiceUnavailableError) as exc:
            if loop.time() >= deadline or stopping.is_set():
                raise SupervisorError(
                    f"could not create streams on {url} within {TOPOLOGY_TIMEOUT_S:g}s{waited}: "
                    f"JetStream kept answering {exc!r}") from exc
            await asyncio.sleep(1.0)
        except NatsError as exc:
            raise SupervisorError(
                f"could not create streams on {url} (is JetStream enabled?): {exc!r}") from exc
        except PartitionsMismatch as exc:
            raise SupervisorError(str(exc)) from exc
