"""Server identities, discovery snapshots and reviewed mappings: pure decisions, no I/O.

- A **server identity** (``ServerIdentity``) is what Lockgate saw of a server when it
  connected; its digest changes with any part of it, and a mapping bound to another
  digest is not current.
- A **snapshot** (``Snapshot``) is one ``tools/list``; each tool (``ToolRecord``) has a
  digest over a canonical form of everything the server said about it (name, title,
  description, schemas, annotations), so a changed description alone is a change.
- A **mapping** (``Mapping``) is an operator's reviewed narrowing of one remote tool to a
  product capability: Lockgate's own name and description, the arguments the model
  controls, fixed arguments and defaults, the effect class, how an effect is found again
  or deduplicated. Its record (``MappingRecord``) binds it to the tool's digest and the
  server identity's digest; its ``revision`` covers all three.
- ``contract_of`` generates the product ``CapabilityContract`` from a current mapping;
  the contract changes (a new revision) whenever the mapping or its bound snapshot does.
- Annotations are the provider's evidence, never enforcement: where one disagrees with
  the mapping the more conservative side wins (``effective_effect``, ``idempotency_honoured``).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

import msgspec

from lockgate.contracts.capability import CapabilityContract, EffectClass, Idempotency
from lockgate.contracts.consequence import Consequence
from lockgate.contracts.offer import Offer
from lockgate.core.canonical import digest

#: Longest remote text (a description, a title) kept in a record; the digest is over all of it.
REMOTE_TEXT_MAX_CHARS = 8192
#: Longest remote result, in bytes, a mapping may let through (before labelling).
RESULT_MAX_BYTES = 8192
#: Effect classes from harmless to irreversible (``EffectClass`` order).
EFFECT_ORDER: tuple[EffectClass, ...] = (
    EffectClass.READ, EffectClass.DERIVE, EffectClass.WRITE, EffectClass.PUBLISH, EffectClass.DESTROY,
)
#: The keys of MCP's tool annotations Lockgate keeps as evidence.
ANNOTATION_KEYS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint", "title")


def _bounded(text: str, limit: int = REMOTE_TEXT_MAX_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class ServerIdentity(msgspec.Struct, frozen=True, kw_only=True):
    """Who a server is, as seen at connect: where, as whom, and what it said of itself.

    ``auth_handle`` names the secret, never holds it; ``env_names`` are the names of the
    variables a stdio server was started with, never their values.
    """

    server: str
    transport: str
    endpoint: str
    auth_handle: str = ""
    auth_header: str = ""
    env_names: tuple[str, ...] = ()
    protocol_version: str = ""
    server_name: str = ""
    server_version: str = ""
    capabilities: dict[str, Any] = msgspec.field(default_factory=dict)
    instructions_digest: str = ""

    @property
    def digest(self) -> str:
        """Content digest of the identity (RFC 8785 + SHA-256)."""
        return digest(msgspec.to_builtins(self))


class ToolRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One tool as a server listed it; ``digest`` is over the whole listing, before bounding."""

    name: str
    digest: str
    title: str = ""
    description: str = ""
    input_schema: dict[str, Any] = msgspec.field(default_factory=dict)
    output_schema: dict[str, Any] | None = None
    annotations: dict[str, Any] = msgspec.field(default_factory=dict)


def tool_digest(listed: dict[str, Any]) -> str:
    """Digest of a tool's canonical form: every field the server gave, key order irrelevant.

    ``listed`` is the tool as it came over the wire (``name``, ``description``,
    ``inputSchema``, ``outputSchema``, ``annotations``, ``title``, ``_meta``…).
    """
    return digest(listed)


def tool_record(listed: dict[str, Any]) -> ToolRecord:
    """The record of one listed tool: its digest over everything, its text bounded."""
    annotations = listed.get("annotations") or {}
    return ToolRecord(
        name=str(listed.get("name", "")),
        digest=tool_digest(listed),
        title=_bounded(str(listed.get("title") or ""), 256),
        description=_bounded(str(listed.get("description") or "")),
        input_schema=dict(listed.get("inputSchema") or {}),
        output_schema=listed.get("outputSchema"),
        annotations={k: annotations[k] for k in ANNOTATION_KEYS if k in annotations},
    )


class Snapshot(msgspec.Struct, frozen=True, kw_only=True):
    """One ``tools/list`` of a server: its identity's digest, every tool, when and why."""

    server: str
    identity_digest: str
    tools: tuple[ToolRecord, ...]
    taken_at: datetime
    #: ``connect``, ``list_changed`` or ``relist``.
    trigger: str = "connect"

    @property
    def digest(self) -> str:
        """Digest of what was listed (identity and tools; not when or why)."""
        return digest({"identity": self.identity_digest,
                       "tools": sorted(t.digest for t in self.tools)})

    def tool(self, name: str) -> ToolRecord | None:
        """The tool called ``name`` in this snapshot."""
        return next((t for t in self.tools if t.name == name), None)


class QueryMapping(msgspec.Struct, frozen=True, kw_only=True):
    """How an effect is found by its client reference: which remote tool and argument.

    ``reference`` is the argument of the mapped tool that carries Lockgate's intent key
    as the client reference; ``tool`` is called with ``{argument: <intent key>}``;
    the effect counts as found when the result's structured content has a truthy
    ``found`` field (when named) or is a non-empty object.
    """

    tool: str
    argument: str
    reference: str
    found: str = ""


class Mapping(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """An operator's reviewed mapping of one remote tool onto a product capability."""

    capability: str
    description: str
    #: JSON Schema of the arguments the model controls (an object schema).
    arguments: dict[str, Any]
    effect: EffectClass
    #: Remote arguments Lockgate fixes, whatever the model says.
    fixed: dict[str, Any] = msgspec.field(default_factory=dict)
    #: Remote arguments Lockgate fills when the model leaves them out.
    defaults: dict[str, Any] = msgspec.field(default_factory=dict)
    #: Remote argument → the run-context key it is taken from (the model may not give it).
    context: dict[str, str] = msgspec.field(default_factory=dict)
    #: The remote argument that carries Lockgate's intent key, when the server deduplicates by it.
    idempotency_key: str = ""
    idempotency_retention_s: int = 7 * 24 * 3600
    query: QueryMapping | None = None
    #: JSON Schema the remote result's structured content must satisfy.
    result_schema: dict[str, Any] | None = None
    result_max_bytes: int = 4096
    outcome_deadline_s: float = 30.0
    #: The Cedar resource type and the run-context key its id comes from (default: the server).
    resource_type: str = "mcp_server"
    resource_from: str = ""
    approval_hint: str = ""
    consequence: str = ""
    visible_to: str = ""
    data_classes: tuple[str, ...] = ()


class MappingRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A mapping as stored: bound to the tool's and the identity's digest, reviewed by whom.

    ``enabled`` is False once an operator disabled it or drift did (``why`` says which);
    a disabled record stays until a new review writes an enabled one.
    """

    server: str
    tool: str
    mapping: Mapping
    tool_digest: str
    identity_digest: str
    snapshot_seq: int
    reviewer: str
    reviewed_at: datetime
    enabled: bool = True
    why: str = ""
    #: Where the tool's annotations disagree with the mapping, and what was done.
    conflicts: tuple[str, ...] = ()

    @property
    def revision(self) -> str:
        """The mapping revision: the mapping and both digests it is bound to."""
        return digest({"server": self.server, "tool": self.tool,
                       "mapping": msgspec.to_builtins(self.mapping),
                       "tool_digest": self.tool_digest, "identity_digest": self.identity_digest})


# -- annotations: evidence, the conservative side wins --------------------------------------


def _at_least(effect: EffectClass, floor: EffectClass) -> EffectClass:
    return effect if EFFECT_ORDER.index(effect) >= EFFECT_ORDER.index(floor) else floor


def effective_effect(declared: EffectClass, annotations: dict[str, Any]) -> tuple[EffectClass, tuple[str, ...]]:
    """The effect class to govern by, and the conflicts that raised it.

    Only hints the server stated count (MCP's defaults are guesses): ``destructiveHint:
    true`` makes the effect ``destroy``; ``readOnlyHint: false`` makes a ``read`` or
    ``derive`` at least a ``write``. A hint never lowers what the mapping declared.
    """
    effect, conflicts = declared, []
    if annotations.get("destructiveHint") is True and declared is not EffectClass.DESTROY:
        effect = EffectClass.DESTROY
        conflicts.append(f"destructiveHint: true, mapped as {declared}: governed as destroy")
    if annotations.get("readOnlyHint") is False and declared in (EffectClass.READ, EffectClass.DERIVE):
        raised = _at_least(effect, EffectClass.WRITE)
        if raised is not effect:
            conflicts.append(f"readOnlyHint: false, mapped as {declared}: governed as {raised}")
        effect = raised
    return effect, tuple(conflicts)


def idempotency_honoured(mapping: Mapping, annotations: dict[str, Any]) -> tuple[bool, tuple[str, ...]]:
    """Whether the mapping's idempotency key is claimed, and the conflicts that withdrew it.

    ``idempotentHint: true`` never grants idempotency on its own (only a mapped key
    argument does); ``idempotentHint: false`` against a mapped key withdraws the claim.
    """
    if not mapping.idempotency_key:
        return False, ()
    if annotations.get("idempotentHint") is False:
        return False, (f"idempotentHint: false against idempotency key {mapping.idempotency_key}: "
                       "no idempotency claimed",)
    return True, ()


def conflicts_of(mapping: Mapping, tool: ToolRecord) -> tuple[str, ...]:
    """Every disagreement between the tool's annotations and the mapping."""
    return (effective_effect(mapping.effect, tool.annotations)[1]
            + idempotency_honoured(mapping, tool.annotations)[1])


# -- checks of a mapping against what the server listed -------------------------------------


class MappingInvalid(ValueError):
    """A mapping that cannot be used with this tool; ``reason`` is a stable code."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


def check_mapping(mapping: Mapping, tool: ToolRecord, declared: tuple[str, ...], snapshot: Snapshot) -> None:
    """Refuse a mapping whose names do not fit the deployment, the tool or the server.

    Raises:
        MappingInvalid: the capability is not declared for the server, the argument schema
            is not a closed object schema, a named remote argument is not the tool's, or the
            query tool is not listed.
    """
    if mapping.capability not in declared:
        raise MappingInvalid("mcp.capability-not-declared",
                             f"{mapping.capability} is not declared for this server in the servers file")
    schema = mapping.arguments
    if schema.get("type") != "object" or schema.get("additionalProperties") is not False:
        raise MappingInvalid("mcp.mapping-invalid",
                             "arguments must be an object schema with additionalProperties: false")
    remote = set(tool.input_schema.get("properties") or {})
    model = set(schema.get("properties") or {})
    named = {*mapping.fixed, *mapping.defaults, *mapping.context, *model}
    for extra in (mapping.idempotency_key, mapping.query.reference if mapping.query else ""):
        if extra:
            named.add(extra)
    if remote and not named <= remote:
        raise MappingInvalid("mcp.mapping-invalid",
                             f"arguments not in the remote tool's schema: {sorted(named - remote)}")
    overlap = model & ({*mapping.fixed, *mapping.context}
                       | {mapping.idempotency_key} | ({mapping.query.reference} if mapping.query else set()))
    if overlap:
        raise MappingInvalid("mcp.mapping-invalid",
                             f"the model may not control fixed, context or key arguments: {sorted(overlap)}")
    if mapping.query is not None and snapshot.tool(mapping.query.tool) is None:
        raise MappingInvalid("mcp.mapping-invalid", f"query tool {mapping.query.tool} is not listed")
    if mapping.result_max_bytes > RESULT_MAX_BYTES:
        raise MappingInvalid("mcp.mapping-invalid", f"result_max_bytes is at most {RESULT_MAX_BYTES}")


# -- quarantine and drift -------------------------------------------------------------------


class Standing(StrEnum):
    """Where a mapping stands against the latest identity and snapshot."""

    CURRENT = "current"
    DISABLED = "disabled"
    TOOL_CHANGED = "tool_changed"
    TOOL_GONE = "tool_gone"
    IDENTITY_CHANGED = "identity_changed"


def standing(record: MappingRecord, identity_digest: str, snapshot: Snapshot | None) -> Standing:
    """Whether ``record`` may be served now: enabled, and bound to what the server shows now.

    A query tool that changed or vanished is drift too: recovery depends on it.
    """
    if not record.enabled:
        return Standing.DISABLED
    if record.identity_digest != identity_digest or snapshot is None \
            or snapshot.identity_digest != identity_digest:
        return Standing.IDENTITY_CHANGED
    tool = snapshot.tool(record.tool)
    if tool is None:
        return Standing.TOOL_GONE
    if tool.digest != record.tool_digest:
        return Standing.TOOL_CHANGED
    query = record.mapping.query
    if query is not None and snapshot.tool(query.tool) is None:
        return Standing.TOOL_GONE
    return Standing.CURRENT


def drifted(record: MappingRecord, identity_digest: str, snapshot: Snapshot | None,
            *, now: datetime) -> MappingRecord | None:
    """The disabled record to store when an enabled mapping no longer matches (else ``None``)."""
    now_standing = standing(record, identity_digest, snapshot)
    if now_standing in (Standing.CURRENT, Standing.DISABLED):
        return None
    return msgspec.structs.replace(record, enabled=False, why=f"drift: {now_standing}",
                                   reviewed_at=now, reviewer="lockgate")


def quarantined(snapshot: Snapshot, records: list[MappingRecord], identity_digest: str) -> list[ToolRecord]:
    """The tools of ``snapshot`` no current mapping covers: new or changed, unavailable to every catalogue.

    A tool only used as a current mapping's query tool is covered by that mapping's review.
    """
    covered: set[str] = set()
    for record in records:
        if standing(record, identity_digest, snapshot) is Standing.CURRENT:
            covered.add(record.tool)
            if record.mapping.query is not None:
                covered.add(record.mapping.query.tool)
    return [t for t in snapshot.tools if t.name not in covered]


class ToolChange(msgspec.Struct, frozen=True, kw_only=True):
    """How one tool differs between two snapshots: ``added``, ``removed`` or ``changed`` (which fields)."""

    tool: str
    change: str
    fields: tuple[str, ...] = ()


def diff(before: Snapshot | None, after: Snapshot) -> list[ToolChange]:
    """Per tool, what changed from ``before`` to ``after`` (unchanged tools are left out)."""
    old = {t.name: t for t in (before.tools if before else ())}
    new = {t.name: t for t in after.tools}
    changes = [ToolChange(tool=n, change="added") for n in sorted(new.keys() - old.keys())]
    changes += [ToolChange(tool=n, change="removed") for n in sorted(old.keys() - new.keys())]
    for name in sorted(old.keys() & new.keys()):
        a, b = old[name], new[name]
        if a.digest == b.digest:
            continue
        fields = tuple(f for f in ("title", "description", "input_schema", "output_schema", "annotations")
                       if getattr(a, f) != getattr(b, f)) or ("other",)
        changes.append(ToolChange(tool=name, change="changed", fields=fields))
    return changes


# -- the product contract -------------------------------------------------------------------


def result_schema(mapping: Mapping) -> dict[str, Any]:
    """What the model may see of a result: the remote data, labelled untrusted, with its source."""
    return {
        "type": "object",
        "properties": {
            "untrusted": {"const": True},
            "source": {"type": "string"},
            "data": mapping.result_schema or {"type": "object"},
        },
        "required": ["untrusted", "source", "data"],
        "additionalProperties": False,
    }


def recovery_of(mapping: Mapping, idempotent: bool) -> tuple[str, ...]:
    """What may be done after an unknown outcome.

    Without a query by identity nothing can be proven, so an operator decides (no blind
    retry); with one, an effect proven absent may be tried again as the same intent.
    """
    if mapping.query is None:
        return ("operator",)
    return ("query", "retry_same_intent" if idempotent else "retry_same_intent_if_absent", "operator")


def contract_of(record: MappingRecord, tool: ToolRecord) -> CapabilityContract:
    """The product capability a current mapping serves, generated from it.

    Its content (and so its revision) includes the mapping revision, the tool's digest and
    the server identity's digest, so any change to one is a new contract.
    """
    m = record.mapping
    effect, _ = effective_effect(m.effect, tool.annotations)
    idempotent, _ = idempotency_honoured(m, tool.annotations)
    shows = tuple(sorted((m.arguments.get("properties") or {}).keys()))
    return CapabilityContract(
        name=m.capability,
        description=m.description,
        argument_schema=m.arguments,
        context_arguments=tuple(sorted(set(m.context.values()))),
        effect_class=effect,
        idempotency=Idempotency(m.idempotency_key, m.idempotency_retention_s) if idempotent else None,
        query_by_identity=m.query is not None,
        send_boundary=(f"tools/call {record.tool} written to MCP server {record.server} "
                       f"(mapping {record.revision}, tool {record.tool_digest}, "
                       f"identity {record.identity_digest})"),
        postconditions=(f"MCP server {record.server} answered tools/call {record.tool}",),
        recovery=recovery_of(m, idempotent),
        approval_hint=m.approval_hint,
        consequence=Consequence(
            action=m.consequence or f"Call {record.tool} on MCP server {record.server}",
            visible_to=m.visible_to, shows=shows),
        data_classes=m.data_classes,
        result_max_bytes=min(m.result_max_bytes, RESULT_MAX_BYTES) + 512,
        result_schema=result_schema(m),
        outcome_deadline_s=m.outcome_deadline_s,
    )


#: The role a restricted contract asks of the actor: no run is opened with it, so no turn
#: offers a capability under review (and were one offered, normalize refuses it).
UNDER_REVIEW_ROLE = "_mcp-under-review"


def restricted_contract(record: MappingRecord) -> CapabilityContract:
    """What a capability whose mapping is not current is registered as, until reviewed again.

    It is offered in no turn, normalizes and executes nothing, and its revision is no
    enabled mapping's: the final gate, which asks the adapter for fresh facts before it
    compares revisions, refuses what was approved under the old mapping
    (``gate.mapping-changed``) instead of waiting for an adapter that is gone. It still
    answers ``query`` for effects that may have happened under the old mapping, and
    allows no retry: an effect proven absent goes to an operator.
    """
    m = record.mapping
    return CapabilityContract(
        name=m.capability,
        description=(f"Unavailable: the mapping of {record.tool} on MCP server {record.server} "
                     "is under review."),
        argument_schema=m.arguments,
        context_arguments=tuple(sorted(set(m.context.values()))),
        effect_class=EffectClass.DESTROY,
        query_by_identity=m.query is not None,
        send_boundary=f"never sent: mapping {record.revision} is disabled ({record.why or 'disabled'})",
        recovery=("query", "operator") if m.query is not None else ("operator",),
        offer=Offer(roles=(UNDER_REVIEW_ROLE,)),
        result_max_bytes=min(m.result_max_bytes, RESULT_MAX_BYTES) + 512,
        result_schema=result_schema(m),
        outcome_deadline_s=m.outcome_deadline_s,
    )
