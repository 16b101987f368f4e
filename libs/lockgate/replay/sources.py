"""The deployment as a replay reads it: runs' contexts and contracts, as the ``replay`` role.

The ``replay`` user (``lockgate.operations.roles.replay_role``) may read two buckets, the
runs (``LG_RUNS``: the context the trusted host opened each run with) and the
capabilities (``LG_CAPABILITIES``: the contracts), and nothing else: no adapter request,
no order, no proposal, no append. A replay connected as it cannot reach the real world
even by mistake.
"""

from __future__ import annotations

import msgspec
import nats
from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue

from lockgate.contracts.capability import CapabilityContract
from lockgate.contracts.messages import RunContext
from lockgate.contracts.subjects import run_key
from lockgate.core.ids import is_subject_token
from lockgate.operations.roles import JS_API
from lockgate.replay.record import DeploymentUnreachable
from lockgate.runtime.credentials import Credentials
from lockgate.runtime.ports.capabilities import CapabilityRegistry
from lockgate.runtime.topology import CAPABILITIES_BUCKET, RUNS_BUCKET


class BrokerDeployment:
    """Runs and contracts read from a deployment's broker (connect with ``open``)."""

    def __init__(self, nc: Client, runs: KeyValue, registry: CapabilityRegistry) -> None:
        self._nc = nc
        self._runs = runs
        self._registry = registry

    @classmethod
    async def open(cls, url: str, credentials: Credentials | None) -> BrokerDeployment:
        """Connect as ``credentials`` (the ``replay`` user; none on a broker without users).

        Raises:
            DeploymentUnreachable: no server answered, it refused the user, or it has no
                runs or capabilities bucket.
        """
        errors: list[Exception] = []

        async def noted(exc: Exception) -> None:
            errors.append(exc)

        # A failure is told by what this raises: nats-py's default callback would also log
        # every attempt, tracebacks beside the one line the command prints. With no
        # reconnect attempt allowed nats-py tries the first connection forever; with one,
        # it gives up with ``NoServersError``, and the server's refusal is only in what the
        # callback was told.
        options: dict[str, object] = {"max_reconnect_attempts": 1, "connect_timeout": 2, "error_cb": noted}
        if credentials is not None:
            options.update(user=credentials.user, password=credentials.password,
                           inbox_prefix=credentials.inbox_prefix)
        try:
            nc = await nats.connect(url, **options)
        except (NatsError, OSError, TimeoutError) as exc:
            # The server's own refusal (an -ERR, as "authorization violation") says more than
            # the connection reset that follows it, or the NoServersError that ends it all.
            said = [e for e in errors if type(e) is NatsError] or errors or [exc]
            raise DeploymentUnreachable(url, _why(said[0])) from None
        try:
            js = nc.jetstream(prefix=credentials.js_prefix if credentials else JS_API)
            runs = await js.key_value(RUNS_BUCKET)
            registry = CapabilityRegistry(await js.key_value(CAPABILITIES_BUCKET))
        except (NatsError, OSError, TimeoutError) as exc:
            await nc.close()
            raise DeploymentUnreachable(url, _why(exc)) from None
        except BaseException:
            await nc.close()
            raise
        return cls(nc, runs, registry)

    async def close(self) -> None:
        """Close the connection."""
        await self._nc.close()

    async def run(self, tenant: str, run_id: str) -> RunContext | None:
        """The context ``run_id`` was opened with, from ``LG_RUNS``."""
        if not (is_subject_token(tenant) and is_subject_token(run_id)):
            return None
        try:
            entry = await self._runs.get(run_key(tenant, run_id))
        except KeyNotFoundError:
            return None
        try:
            return msgspec.json.decode(entry.value or b"", type=RunContext)
        except msgspec.MsgspecError:
            return None

    async def contract(self, capability: str) -> CapabilityContract | None:
        """The contract registered for ``capability``, from ``LG_CAPABILITIES``."""
        return await self._registry.get(capability)



def _why(exc: BaseException) -> str:
    """An exception in a few words: its text, else its class (a timeout has none)."""
    return (str(exc).strip() or type(exc).__name__).splitlines()[0][:200]
