"""The ``case.add_note`` capability: the case world behind the adapter SDK.

The world's credential lives only here, in ``CaseWorldSettings``; nothing the model
or the services see carries it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from lockgate.adapters.sdk import Adapter, Completed, NotSent, Rejected, SendBoundary
from lockgate.contracts.capability import (
    CapabilityContract,
    Disclosure,
    EffectClass,
    Idempotency,
)
from lockgate.contracts.consequence import Consequence
from lockgate.contracts.messages import (
    ExecutionOrder,
    Facts,
    FactsRequest,
    NormalizeRequest,
    NormalizeResult,
    QueryRequest,
    QueryResult,
)
from lockgate.contracts.vocabulary import QueryFinding
from lockgate.runtime.settings import Settings
from lockgate.worlds.casenotes.world import DEMO_CREDENTIAL, CaseWorldError, World

#: Longest note the capability accepts, in UTF-8 bytes.
NOTE_MAX_BYTES = 500

#: Reason codes ``normalize`` and ``execute`` produce themselves (the world adds its own).
REASONS: tuple[str, ...] = (
    "argument.note.empty",
    "argument.note.too-long",
    "argument.note.invalid",
    "run.context.missing",
    "order.precondition.missing",
)


class CaseWorldSettings(BaseSettings):
    """Where the case world lives and its credential. Environment prefix ``LOCKGATE_CASE_WORLD_``."""

    model_config = SettingsConfigDict(env_prefix="LOCKGATE_CASE_WORLD_", frozen=True)

    #: Default: ``worlds/case`` under the deployment's ``var`` directory (``LOCKGATE_VAR_DIR``),
    #: whatever the current directory.
    dir: Path = Field(default_factory=lambda: Settings().var_dir / "worlds" / "case")
    credential: SecretStr = SecretStr(DEMO_CREDENTIAL)


CONTRACT = CapabilityContract(
    name="case.add_note",
    description=(
        "Add a note to the case you are working on. The note is visible to everyone "
        "with access to the case. Give only the note text; the case is known from the task."
    ),
    argument_schema={
        "type": "object",
        "properties": {
            "note": {
                "type": "string",
                "description": f"The note text, at most {NOTE_MAX_BYTES} bytes.",
            }
        },
        "required": ["note"],
        "additionalProperties": False,
    },
    context_arguments=("case_id",),
    effect_class=EffectClass.WRITE,
    idempotency=Idempotency(key_field="intent_key", retention_s=7 * 24 * 3600),
    query_by_identity=True,
    send_boundary="add-note request written to the case system",
    postconditions=("the note exists on the case with the intent key",),
    recovery=("query", "retry_same_intent", "operator"),
    approval_hint="A note is visible to everyone on the case and cannot be edited.",
    consequence=Consequence(
        action="Add a note to case {resource.id}, as {actor}; it cannot be edited afterwards",
        visible_to="everyone with access to case {resource.id}",
        shows=("note",),
    ),
    data_classes=("case_note",),
    outcome_deadline_s=30.0,
    serialize_per_resource=True,
    alternatives=("ask_owner", "stop"),
    disclosure={
        "argument.note.empty": Disclosure("rejected", "argument.note.empty", "note"),
        "argument.note.too-long": Disclosure("rejected", "argument.note.too-long", "note"),
    },
)


class CaseNotesAdapter(Adapter):
    """Serves ``case.add_note`` against one case world."""

    contract = CONTRACT

    def __init__(self, world: World, credential: str) -> None:
        self._world = world
        self._credential = credential

    @classmethod
    def from_settings(cls, settings: CaseWorldSettings) -> CaseNotesAdapter:
        """Open (seeding it if empty) the world the settings name, and serve it."""
        credential = settings.credential.get_secret_value()
        return cls(World.open_or_seed(settings.dir, credential=credential), credential)

    async def normalize(self, req: NormalizeRequest) -> NormalizeResult:
        """Trim the note, check its size, take the case from run context."""
        note = req.arguments.get("note")
        if not isinstance(note, str):
            return NormalizeResult(reason="argument.note.invalid", field="note")
        note = note.strip()
        if not note:
            return NormalizeResult(reason="argument.note.empty", field="note")
        if len(note.encode()) > NOTE_MAX_BYTES:
            return NormalizeResult(reason="argument.note.too-long", field="note")
        # Only the run's authoritative context names the case, never the model.
        case_id = req.context.get("case_id")
        if not case_id:
            return NormalizeResult(reason="run.context.missing")
        return NormalizeResult(
            arguments={"case_id": case_id, "note": note},
            resource={"type": "case", "id": case_id, "tenant": req.tenant},
            destination=f"case-notes:{req.tenant}/{case_id}",
        )

    async def facts(self, req: FactsRequest) -> Facts:
        """Return the case's current facts; the revision is its version token."""
        facts = await asyncio.to_thread(
            self._world.case_facts, self._credential, req.tenant, req.actor, req.resource["id"]
        )
        return Facts(facts=facts, revision=str(facts["version"]))

    async def execute(self, order: ExecutionOrder, boundary: SendBoundary) -> Completed:
        """Add the note, conditional on the version the gate saw, keyed by the intent key."""
        try:
            expected_version = int(order.preconditions["version"])
            case_id = str(order.arguments["case_id"])
            note = str(order.arguments["note"])
        except (KeyError, ValueError) as exc:
            raise NotSent("order.precondition.missing", f"order lacks {exc}") from exc
        await boundary.cross()
        try:
            receipt = await asyncio.to_thread(
                self._world.add_note,
                self._credential,
                order.tenant,
                order.actor,
                case_id,
                note,
                expected_version,
                order.intent_key,
                order.intent_id,
            )
        except CaseWorldError as exc:
            raise Rejected(exc.reason, str(exc)) from exc
        return Completed(
            receipt=receipt, result={"note_id": receipt["note_id"], "case_id": case_id}
        )

    async def query(self, req: QueryRequest) -> QueryResult:
        """Look the note up by the intent key it was written with."""
        receipt = await asyncio.to_thread(
            self._world.find_note, self._credential, req.tenant, req.intent_key
        )
        if receipt is None:
            return QueryResult(finding=QueryFinding.ABSENT)
        return QueryResult(finding=QueryFinding.FOUND, receipt=receipt)
