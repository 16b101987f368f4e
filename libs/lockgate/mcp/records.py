"""The MCP adapter's records on the broker: stream ``LG_MCP``, append-only, latest by direct get.

Identities, snapshots, mappings and reviews each have their subject per server
(``lockgate.contracts.mcp_subjects``); a record is one msgspec JSON message, and the newest on a
subject is what holds now. Only the MCP adapter's user may publish or read them
(``lockgate.operations.roles``); operators change them through requests the adapter answers.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol, TypeVar

import msgspec
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from lockgate.contracts import mcp_subjects as subjects
from lockgate.mcp.mapping import MappingRecord, ServerIdentity, Snapshot

T = TypeVar("T")

#: The stream's name (its configuration is ``lockgate.runtime.topology``'s).
STREAM = "LG_MCP"


class Review(msgspec.Struct, frozen=True, kw_only=True):
    """One review action, for the audit: who mapped, disabled or found drift in what."""

    server: str
    tool: str
    capability: str
    action: str
    by: str
    at: datetime
    revision: str = ""
    why: str = ""


class Records(Protocol):
    """Append-only records by subject; the latest per subject, or one by its sequence."""

    async def append(self, subject: str, data: bytes) -> int:
        """Store ``data`` on ``subject``; return its sequence."""
        ...

    async def latest(self, subject: str) -> tuple[int, bytes] | None:
        """The newest record on ``subject`` and its sequence (``None``: none yet)."""
        ...

    async def at(self, seq: int) -> tuple[str, bytes] | None:
        """The record with sequence ``seq`` and its subject."""
        ...


class MemoryRecords:
    """``Records`` in a list, for tests."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, bytes]] = []

    async def append(self, subject: str, data: bytes) -> int:
        """Store ``data`` on ``subject``."""
        self.messages.append((subject, data))
        return len(self.messages)

    async def latest(self, subject: str) -> tuple[int, bytes] | None:
        """The newest record on ``subject``."""
        for seq in range(len(self.messages), 0, -1):
            if self.messages[seq - 1][0] == subject:
                return seq, self.messages[seq - 1][1]
        return None

    async def at(self, seq: int) -> tuple[str, bytes] | None:
        """The record with sequence ``seq``."""
        return self.messages[seq - 1] if 0 < seq <= len(self.messages) else None


class JetStreamRecords:
    """``Records`` on the ``LG_MCP`` stream (``js`` in the MCP adapter's account)."""

    def __init__(self, js: JetStreamContext) -> None:
        self._js = js

    async def append(self, subject: str, data: bytes) -> int:
        """Publish and wait for the stream's acknowledgement."""
        ack = await self._js.publish(subject, data, stream=STREAM)
        return int(ack.seq)

    async def latest(self, subject: str) -> tuple[int, bytes] | None:
        """Direct get of the last message on ``subject``."""
        try:
            msg = await self._js.get_last_msg(STREAM, subject, direct=True)
        except NotFoundError:
            return None
        return int(msg.seq or 0), msg.data or b""

    async def at(self, seq: int) -> tuple[str, bytes] | None:
        """Direct get by sequence."""
        try:
            msg = await self._js.get_msg(STREAM, seq, direct=True)
        except NotFoundError:
            return None
        return msg.subject or "", msg.data or b""


class McpRecords:
    """Typed access to one deployment's MCP records."""

    def __init__(self, records: Records) -> None:
        self._records = records

    async def _latest(self, subject: str, kind: type[T]) -> tuple[int, T] | None:
        found = await self._records.latest(subject)
        if found is None:
            return None
        try:
            return found[0], msgspec.json.decode(found[1], type=kind)
        except (msgspec.ValidationError, msgspec.DecodeError):
            return None  # an unreadable record holds nothing; the next one will

    async def identity(self, server: str) -> ServerIdentity | None:
        """The server's latest recorded identity."""
        found = await self._latest(subjects.record(server, "identity"), ServerIdentity)
        return found[1] if found else None

    async def put_identity(self, identity: ServerIdentity) -> int:
        """Record an identity."""
        return await self._records.append(subjects.record(identity.server, "identity"),
                                          msgspec.json.encode(identity))

    async def snapshot(self, server: str) -> tuple[int, Snapshot] | None:
        """The server's latest snapshot and its sequence."""
        return await self._latest(subjects.record(server, "snapshot"), Snapshot)

    async def snapshot_at(self, server: str, seq: int) -> Snapshot | None:
        """The snapshot stored at ``seq`` (``None``: not a snapshot of ``server``)."""
        found = await self._records.at(seq)
        if found is None or found[0] != subjects.record(server, "snapshot"):
            return None
        try:
            return msgspec.json.decode(found[1], type=Snapshot)
        except (msgspec.ValidationError, msgspec.DecodeError):
            return None

    async def put_snapshot(self, snapshot: Snapshot) -> int:
        """Record a snapshot; return its sequence."""
        return await self._records.append(subjects.record(snapshot.server, "snapshot"),
                                          msgspec.json.encode(snapshot))

    async def mapping(self, server: str, capability: str) -> MappingRecord | None:
        """The latest mapping record of ``capability`` on ``server``."""
        found = await self._latest(subjects.record(server, "mapping", capability), MappingRecord)
        return found[1] if found else None

    async def put_mapping(self, record: MappingRecord) -> int:
        """Record a mapping (enabled or disabled)."""
        return await self._records.append(
            subjects.record(record.server, "mapping", record.mapping.capability),
            msgspec.json.encode(record))

    async def put_review(self, review: Review) -> int:
        """Record a review action."""
        return await self._records.append(subjects.record(review.server, "review"),
                                          msgspec.json.encode(review))
