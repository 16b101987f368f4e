"""The proposals port: a candidate put forward on a run's behalf (a reviewer's edit).

Published to the run's candidate subject like an agent runtime's own, deduplicated by a
message id, so the same edit sent again proposes nothing new.
"""

from __future__ import annotations

from typing import Protocol

from nats.js import JetStreamContext

from lockgate.contracts.subjects import propose_subject

__all__ = ["MemoryProposals", "NatsProposals", "Proposals"]


class Proposals(Protocol):
    """Where a candidate is proposed for a run. A broker that does not answer raises
    ``nats.errors.Error``."""

    async def propose(self, tenant: str, run_id: str, candidate: bytes, *, message_id: str) -> None:
        """Propose ``candidate`` (its JSON) in the run, once per ``message_id``."""
        ...


class NatsProposals:
    """``Proposals`` over JetStream's candidate stream."""

    def __init__(self, js: JetStreamContext) -> None:
        self._js = js

    async def propose(self, tenant: str, run_id: str, candidate: bytes, *, message_id: str) -> None:
        """Publish ``candidate`` on the run's candidate subject."""
        await self._js.publish(propose_subject(tenant, run_id), candidate,
                               headers={"Nats-Msg-Id": message_id})


class MemoryProposals:
    """The fake ``Proposals``: what was proposed, once per message id."""

    def __init__(self) -> None:
        #: (tenant, run id, candidate JSON) by message id, in order.
        self.proposed: dict[str, tuple[str, str, bytes]] = {}

    async def propose(self, tenant: str, run_id: str, candidate: bytes, *, message_id: str) -> None:
        """Keep the candidate unless its message id was proposed already."""
        self.proposed.setdefault(message_id, (tenant, run_id, candidate))
