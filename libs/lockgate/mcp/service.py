"""The MCP adapter process: connections, discovery, quarantine, drift, and the mapped capabilities.

For each configured server it keeps one session open (reconnecting with a back-off), and
lists the tools at connect, on ``notifications/tools/list_changed`` and every
``relist_s``. Each listing is compared with the last stored snapshot; a new identity or a
different listing is recorded on ``LG_MCP``. Then every capability the servers file
declares for the server is settled against the record:

- a mapping that is enabled and bound to the identity and the tool's digest now listed
  is *served*: its contract is registered (and renewed by heartbeat) and its orders are
  consumed, through the adapter SDK's ``CapabilityWorker``;
- an enabled mapping whose tool changed (any field, the description included) or
  vanished, or whose server identity changed, is disabled on the record (drift), and so is
  one an operator disabled: the capability is then registered as a *restricted* contract
  (``restricted_contract``) that no turn offers, that normalizes and executes nothing,
  and whose revision no approval was bound to, so the final gate refuses what was
  approved under the old mapping (``gate.mapping-changed``); it still answers ``query``
  for effects that may have happened under the old mapping;
- everything listed that no current mapping covers is in quarantine.

Operators read and write through requests on ``lg.mcp.op.<verb>.<operator>``; the
operator recorded as the reviewer is the one the subject names (the broker lets only
that user publish it).

The process answers its status at once and needs no server to be up.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import msgspec
from nats.aio.client import Client as Nats
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import Error as NatsError
from nats.js.errors import NotFoundError

from lockgate.adapters.worker import CapabilityWorker
from lockgate.contracts import mcp_subjects as subjects
from lockgate.contracts import subjects as lg_subjects
from lockgate.core.text import safe_text
from lockgate.mcp.adapter import MappedAdapter, RestrictedAdapter
from lockgate.mcp.config import ConfigError, ServerConfig, ServersFile
from lockgate.mcp.mapping import (
    Mapping,
    MappingInvalid,
    MappingRecord,
    ServerIdentity,
    Snapshot,
    Standing,
    check_mapping,
    conflicts_of,
    contract_of,
    diff,
    drifted,
    quarantined,
    restricted_contract,
    standing,
    tool_record,
)
from lockgate.mcp.records import McpRecords, Review
from lockgate.mcp.remote import Connection, connect
from lockgate.runtime.consumer import connection_of, respond
from lockgate.runtime.topology import CAPABILITIES_BUCKET

log = logging.getLogger(__name__)

#: The adapter process's name (its NATS user is ``adapter-mcp``).
NAME = "mcp"
#: Longest pause between reconnection attempts.
MAX_BACKOFF_S = 10.0
#: Longest description a snapshot answer shows an operator.
SHOWN_TEXT_CHARS = 2000

Connector = Callable[..., contextlib.AbstractAsyncContextManager[Connection]]


class OpRefused(Exception):
    """An operator's request that cannot be done, with a stable code."""

    def __init__(self, code: str, detail: str = "") -> None:
        super().__init__(detail or code)
        self.code = code
        self.detail = detail


@dataclass
class _Served:
    worker: CapabilityWorker
    task: asyncio.Task[None]
    stop: asyncio.Event
    revision: str


@dataclass
class _Server:
    config: ServerConfig
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    conn: Connection | None = None
    identity: ServerIdentity | None = None
    snapshot: Snapshot | None = None
    snapshot_seq: int = 0
    last_error: str = ""


class McpAdapter:
    """The MCP adapter on one NATS connection: every configured server and its mapped capabilities."""

    def __init__(
        self,
        nc: Nats,
        servers: ServersFile,
        records: McpRecords,
        *,
        secrets_dir: os.PathLike[str] | str,
        js_prefix: str = "$JS.API",
        ack_wait_s: float = 30.0,
        connector: Connector = connect,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        metrics_url: str | None = None,
    ) -> None:
        self._nc = nc
        self._metrics_url = metrics_url
        self._js = nc.jetstream(prefix=js_prefix)
        self._js_prefix = js_prefix
        self._ack_wait_s = ack_wait_s
        self._servers = {s.name: _Server(s) for s in servers.servers}
        self._records = records
        self._secrets_dir = secrets_dir
        self._connector = connector
        self._clock = clock
        self._served: dict[str, _Served] = {}
        self._subs: list[Subscription] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._stop = asyncio.Event()

    # -- start and stop -----------------------------------------------------------------

    async def start(self) -> None:
        """Answer status and operators at once; connect to every server in the background."""
        self._subs.append(await self._nc.subscribe(lg_subjects.adapter_status(NAME), cb=self._on_status))
        self._subs.append(await self._nc.subscribe(subjects.OPS_ALL, queue="adapter.mcp.ops",
                                                   cb=self._on_op))
        for server in self._servers.values():
            self._tasks.append(asyncio.create_task(self._link(server)))

    async def close(self) -> None:
        """Stop serving, close every session."""
        self._stop.set()
        for server in self._servers.values():
            server.wake.set()
        for sub in self._subs:
            with contextlib.suppress(NatsError):
                await sub.unsubscribe()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for capability in list(self._served):
            await self._unserve(capability, delete=False)

    @property
    def serving(self) -> list[str]:
        """The capabilities served now."""
        return sorted(self._served)

    async def _on_status(self, msg: Msg) -> None:
        body = {"service": f"adapter.{NAME}", "pid": os.getpid(), "capabilities": self.serving,
                "ready": True, "metrics": self._metrics_url,
                "servers": {n: s.conn is not None for n, s in self._servers.items()}}
        with contextlib.suppress(NatsError):
            await msg.respond(json.dumps(body).encode())

    # -- connections and discovery ------------------------------------------------------

    async def _link(self, server: _Server) -> None:
        backoff_s = 0.5
        name = server.config.name
        while not self._stop.is_set():
            try:
                async with self._connector(server.config, self._secrets_dir,
                                           on_tools_changed=server.wake.set) as conn:
                    server.conn, backoff_s, trigger = conn, 0.5, "connect"
                    while not self._stop.is_set():
                        await self.discovered(name, conn.identity, await conn.list_tools(), trigger)
                        server.wake.clear()
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(server.wake.wait(), server.config.relist_s)
                            trigger = "list_changed"
                            continue
                        trigger = "relist"
            except asyncio.CancelledError:
                raise
            except ConfigError as exc:
                server.last_error = str(exc)
                log.error("MCP server %s: %s", name, exc)
            except Exception as exc:  # the server went away or never came: try again later
                server.last_error = safe_text(f"{type(exc).__name__}", 200)
                log.warning("MCP server %s: connection ended (%s); again in %.1fs",
                            name, type(exc).__name__, backoff_s)
            finally:
                server.conn = None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), backoff_s)
            backoff_s = min(backoff_s * 2, MAX_BACKOFF_S)

    async def discovered(self, name: str, identity: ServerIdentity, listed: list[dict[str, Any]],
                         trigger: str) -> None:
        """Record what a listing showed (when it differs from the record), then settle the mappings."""
        server = self._servers[name]
        async with server.lock:
            recorded = await self._records.identity(name)
            if recorded is None or recorded.digest != identity.digest:
                await self._records.put_identity(identity)
                if recorded is not None:
                    log.warning("MCP server %s: identity changed (%s → %s)", name,
                                recorded.digest, identity.digest)
            snapshot = Snapshot(server=name, identity_digest=identity.digest,
                                tools=tuple(tool_record(t) for t in listed),
                                taken_at=self._clock(), trigger=trigger)
            latest = await self._records.snapshot(name)
            if latest is None or latest[1].digest != snapshot.digest:
                server.snapshot_seq = await self._records.put_snapshot(snapshot)
                server.snapshot = snapshot
                log.info("MCP server %s: snapshot %d (%s, %d tools)", name, server.snapshot_seq,
                         trigger, len(snapshot.tools))
            else:
                server.snapshot_seq, server.snapshot = latest
            server.identity = identity
            await self._settle(server)

    async def _settle(self, server: _Server) -> None:
        """Serve what is current, disable what drifted, withdraw what is not current."""
        if server.identity is None:
            return
        for capability in server.config.capabilities:
            record = await self._records.mapping(server.config.name, capability)
            if record is not None:
                stale = drifted(record, server.identity.digest, server.snapshot, now=self._clock())
                if stale is not None:
                    await self._records.put_mapping(stale)
                    await self._records.put_review(Review(
                        server=stale.server, tool=stale.tool, capability=capability, action="drift",
                        by="lockgate", at=self._clock(), revision=stale.revision, why=stale.why))
                    log.warning("MCP server %s: %s disabled (%s) until reviewed again",
                                stale.server, capability, stale.why)
                    record = stale
            if record is None:
                if capability in self._served:
                    await self._unserve(capability)
                continue
            tool = server.snapshot.tool(record.tool) if server.snapshot else None
            current = standing(record, server.identity.digest, server.snapshot) is Standing.CURRENT
            if current and tool is not None:
                await self._serve(server, record, tool)
            else:
                # Registered restricted: offered nowhere, refused at the gate, still queried.
                await self._serve(server, record, tool or tool_record({"name": record.tool}),
                                  restricted=True)

    async def _serve(self, server: _Server, record: MappingRecord, tool: Any, *,
                     restricted: bool = False) -> None:
        capability = record.mapping.capability
        revision = (restricted_contract(record) if restricted else contract_of(record, tool)).revision
        served = self._served.get(capability)
        if served is not None and served.revision == revision:
            return
        if served is not None:
            await self._unserve(capability, delete=False)
        kind = RestrictedAdapter if restricted else MappedAdapter
        adapter = kind(record, tool, connection=lambda: server.conn,
                       call_timeout_s=server.config.call_timeout_s)
        worker = CapabilityWorker(adapter, self._nc, name=NAME, ack_wait_s=self._ack_wait_s,
                                  js_prefix=self._js_prefix)
        await worker.start()
        stop = asyncio.Event()
        self._served[capability] = _Served(worker, asyncio.create_task(worker.run_orders(stop)),
                                           stop, revision)
        log.info("serving %s%s (mapping %s of %s/%s)", capability, " restricted" if restricted else "",
                 record.revision, record.server, record.tool)

    async def _unserve(self, capability: str, *, delete: bool = True) -> None:
        served = self._served.pop(capability, None)
        if served is None:
            return
        served.stop.set()
        await asyncio.gather(served.task, return_exceptions=True)
        await served.worker.close()
        if delete:
            # No registration: no turn offers it, and the gate finds no contract to match.
            try:
                kv = await self._js.key_value(CAPABILITIES_BUCKET)
                await kv.delete(lg_subjects.capability_key(capability))
            except (NatsError, NotFoundError, TimeoutError) as exc:
                log.error("registration of %s not deleted: %r", capability, exc)
        log.warning("no longer serving %s", capability)

    # -- operators ------------------------------------------------------------------------

    async def _on_op(self, msg: Msg) -> None:
        asked_on = connection_of(self._nc)
        parsed = subjects.parse_op(msg.subject)
        reply: object
        try:
            if parsed is None:
                raise OpRefused("mcp.malformed", "not an operator request subject")
            try:
                body = json.loads(msg.data or b"{}")
            except ValueError:
                raise OpRefused("mcp.malformed", "the request is not JSON") from None
            if not isinstance(body, dict):
                raise OpRefused("mcp.malformed", "the request is not a JSON object")
            handler = self._ops()[parsed.verb]
            reply = await handler(body, parsed.principal)
        except OpRefused as exc:
            reply = {"error": exc.code, "detail": exc.detail}
        except Exception as exc:  # a refusal, never a dead subscription
            log.exception("operator request %s failed", msg.subject)
            reply = {"error": "mcp.error", "detail": type(exc).__name__}
        await respond(self._nc, msg, msgspec.json.encode(reply), asked_on, log)

    def _ops(self) -> dict[str, Callable[[dict[str, Any], str], Awaitable[object]]]:
        return {"servers": self._op_servers, "snapshot": self._op_snapshot, "diff": self._op_diff,
                "quarantine": self._op_quarantine, "map": self._op_map}

    def _server(self, body: dict[str, Any]) -> _Server:
        server = self._servers.get(str(body.get("server", "")))
        if server is None:
            raise OpRefused("mcp.unknown-server", f"no configured server {str(body.get('server'))[:64]!r}")
        return server

    async def _current(self, server: _Server) -> tuple[int, Snapshot]:
        latest = await self._records.snapshot(server.config.name)
        if latest is None:
            raise OpRefused("mcp.no-snapshot", f"server {server.config.name} was never listed")
        return latest

    async def _mappings(self, server: _Server) -> list[MappingRecord]:
        found = [await self._records.mapping(server.config.name, c) for c in server.config.capabilities]
        return [r for r in found if r is not None]

    async def _op_servers(self, body: dict[str, Any], principal: str) -> object:
        out = []
        for server in self._servers.values():
            name = server.config.name
            identity = await self._records.identity(name)
            latest = await self._records.snapshot(name)
            mappings = await self._mappings(server)
            digest_now = identity.digest if identity else ""
            snap = latest[1] if latest else None
            out.append({
                "server": name, "transport": server.config.transport, "endpoint": server.config.endpoint,
                "connected": server.conn is not None, "last_error": server.last_error,
                "identity": msgspec.to_builtins(identity) if identity else None,
                "identity_digest": digest_now,
                "snapshot": {"seq": latest[0], "digest": snap.digest, "tools": len(snap.tools),
                             "taken_at": snap.taken_at.isoformat()} if latest and snap else None,
                "capabilities": {
                    c: next((str(standing(r, digest_now, snap)) for r in mappings
                             if r.mapping.capability == c), "unmapped")
                    for c in server.config.capabilities},
                "serving": [c for c in server.config.capabilities if c in self._served
                            and not isinstance(self._served[c].worker.adapter, RestrictedAdapter)],
                "quarantined": len(quarantined(snap, mappings, digest_now)) if snap else 0,
            })
        return {"servers": out}

    async def _op_snapshot(self, body: dict[str, Any], principal: str) -> object:
        server = self._server(body)
        seq, snap = await self._current(server)
        if "seq" in body:
            at = await self._records.snapshot_at(server.config.name, int(body["seq"]))
            if at is None:
                raise OpRefused("mcp.no-snapshot", f"no snapshot {body['seq']} of {server.config.name}")
            seq, snap = int(body["seq"]), at
        return {"server": snap.server, "seq": seq, "digest": snap.digest,
                "identity_digest": snap.identity_digest, "taken_at": snap.taken_at.isoformat(),
                "trigger": snap.trigger, "untrusted": True,
                "tools": [{"name": t.name, "digest": t.digest, "title": t.title,
                           "description": t.description[:SHOWN_TEXT_CHARS],
                           "input_schema": t.input_schema, "output_schema": t.output_schema,
                           "annotations": t.annotations} for t in snap.tools]}

    async def _op_diff(self, body: dict[str, Any], principal: str) -> object:
        server = self._server(body)
        to_seq, after = await self._current(server)
        if body.get("to") is not None:
            found = await self._records.snapshot_at(server.config.name, int(body["to"]))
            if found is None:
                raise OpRefused("mcp.no-snapshot", f"no snapshot {body['to']}")
            to_seq, after = int(body["to"]), found
        from_seq = body.get("from")
        if from_seq is None:
            # By default: the snapshot the oldest mapping was reviewed on, against the latest.
            seqs = [r.snapshot_seq for r in await self._mappings(server)]
            from_seq = min(seqs) if seqs else None
        before = await self._records.snapshot_at(server.config.name, int(from_seq)) if from_seq else None
        return {"server": server.config.name, "from": from_seq, "to": to_seq,
                "changes": [msgspec.to_builtins(c) for c in diff(before, after)]}

    async def _op_quarantine(self, body: dict[str, Any], principal: str) -> object:
        chosen = [self._server(body)] if body.get("server") else list(self._servers.values())
        out = []
        for server in chosen:
            latest = await self._records.snapshot(server.config.name)
            if latest is None:
                continue
            mappings = await self._mappings(server)
            identity = await self._records.identity(server.config.name)
            held = quarantined(latest[1], mappings, identity.digest if identity else "")
            known = {r.tool for r in mappings}
            out += [{"server": server.config.name, "tool": t.name, "digest": t.digest,
                     "why": "changed or disabled since its review" if t.name in known else "new"}
                    for t in held]
        return {"quarantined": out}

    async def _op_map(self, body: dict[str, Any], principal: str) -> object:
        server = self._server(body)
        name = server.config.name
        tool_name = str(body.get("tool", ""))
        now = self._clock()
        if body.get("disable"):
            disabled = []
            for record in await self._mappings(server):
                if record.tool == tool_name and record.enabled:
                    off = msgspec.structs.replace(record, enabled=False, why=f"disabled by {principal}",
                                                  reviewer=principal, reviewed_at=now)
                    await self._records.put_mapping(off)
                    await self._records.put_review(Review(
                        server=name, tool=tool_name, capability=record.mapping.capability,
                        action="disable", by=principal, at=now, revision=off.revision))
                    disabled.append(record.mapping.capability)
            async with server.lock:
                await self._settle(server)
            return {"disabled": disabled, "by": principal}
        try:
            mapping = msgspec.convert(body.get("mapping"), type=Mapping)
        except (msgspec.ValidationError, TypeError) as exc:
            raise OpRefused("mcp.mapping-invalid", safe_text(str(exc), 300)) from None
        seq, snapshot = await self._current(server)
        tool = snapshot.tool(tool_name)
        if tool is None:
            raise OpRefused("mcp.unknown-tool", f"{name} lists no tool {tool_name[:64]!r}")
        try:
            check_mapping(mapping, tool, server.config.capabilities, snapshot)
        except MappingInvalid as exc:
            raise OpRefused(exc.reason, str(exc)) from None
        record = MappingRecord(
            server=name, tool=tool_name, mapping=mapping, tool_digest=tool.digest,
            identity_digest=snapshot.identity_digest, snapshot_seq=seq, reviewer=principal,
            reviewed_at=now, conflicts=conflicts_of(mapping, tool))
        await self._records.put_mapping(record)
        await self._records.put_review(Review(server=name, tool=tool_name, capability=mapping.capability,
                                              action="map", by=principal, at=now,
                                              revision=record.revision))
        async with server.lock:
            await self._settle(server)
        contract = contract_of(record, tool)
        return {"mapped": mapping.capability, "server": name, "tool": tool_name,
                "revision": record.revision, "contract_revision": contract.revision,
                "effect": str(contract.effect_class), "idempotent": contract.idempotency is not None,
                "query_by_identity": contract.query_by_identity, "conflicts": list(record.conflicts),
                "serving": mapping.capability in self._served and not isinstance(
                    self._served[mapping.capability].worker.adapter, RestrictedAdapter),
                "by": principal}
