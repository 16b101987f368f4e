"""The ``draft.prepare_private`` and ``item.publish`` capabilities over the items world.

One remote method (``create_item``, the same arguments on both servers) becomes two
product verbs with honest names, because what a lost response means differs:

- ``draft.prepare_private`` (server P) is a *write* the server deduplicates by the
  intent key: after an unknown outcome the same intent may simply be retried.
- ``item.publish`` (server Q) *publishes* and notifies subscribers, and the server does
  not deduplicate. It records the intent key as its client reference, so an unknown
  outcome is settled by asking (``query``), and retried only if absent.

The world's credential lives only here, in ``ItemsWorldSettings``; nothing the model
or the services see carries it. The adapter also honours the faults armed in the
world (``World.inject``), so tests in another process can break it on purpose.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar, NoReturn

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
from lockgate.worlds.items.world import DEMO_CREDENTIAL, ItemsWorldError, ResponseLost, World

#: Longest title, in characters after trimming.
TITLE_MAX_CHARS = 120
#: Longest body, in UTF-8 bytes.
BODY_MAX_BYTES = 2000
#: How long an attempt may stay silent before its outcome is unknown, by default.
DEFAULT_OUTCOME_DEADLINE_S = 30.0
#: The exit status of an injected crash (what SIGKILL would leave).
CRASH_EXIT_STATUS = 137
#: How far past the attempt's deadline an injected ``stall_before_write`` holds the write:
#: long enough for the outcome to be recorded unknown, found absent and tried again.
STALL_PAST_DEADLINE_S = 6.0

DRAFT = "draft.prepare_private"
PUBLISH = "item.publish"

#: Reason codes ``normalize`` and ``execute`` produce themselves (the world adds its own).
REASONS: tuple[str, ...] = (
    "argument.title.empty",
    "argument.title.too-long",
    "argument.title.invalid",
    "argument.body.empty",
    "argument.body.too-long",
    "argument.body.invalid",
    "run.context.missing",
    "items.fault-injected",
)


class ItemsWorldSettings(BaseSettings):
    """Where the items world lives, its credential, and the adapters' outcome deadline.

    Environment prefix ``LOCKGATE_ITEMS_WORLD_``.
    """

    model_config = SettingsConfigDict(env_prefix="LOCKGATE_ITEMS_WORLD_", frozen=True)

    #: Default: ``worlds/items`` under the deployment's ``var`` directory (``LOCKGATE_VAR_DIR``),
    #: whatever the current directory.
    dir: Path = Field(default_factory=lambda: Settings().var_dir / "worlds" / "items")
    credential: SecretStr = SecretStr(DEMO_CREDENTIAL)
    outcome_deadline_s: float = Field(default=DEFAULT_OUTCOME_DEADLINE_S, gt=0)


def _argument_schema() -> dict[str, Any]:
    # No maxLength here: limits are checked after trimming, with field-scoped reasons.
    return {
        "type": "object",
        "properties": {
            "title": {
                "type": "string",
                "description": f"A short title, at most {TITLE_MAX_CHARS} characters.",
            },
            "body": {
                "type": "string",
                "description": f"The item's text, at most {BODY_MAX_BYTES} bytes.",
            },
        },
        "required": ["title", "body"],
        "additionalProperties": False,
    }


def _result_schema(fields: dict[str, str]) -> dict[str, Any]:
    """A closed object of exactly ``fields`` (name -> JSON type): what the model may see."""
    return {
        "type": "object",
        "properties": {name: {"type": kind} for name, kind in fields.items()},
        "required": list(fields),
        "additionalProperties": False,
    }


def _disclosure() -> dict[str, Disclosure]:
    return {
        code: Disclosure("rejected", code, code.split(".")[1])
        for code in (
            "argument.title.empty",
            "argument.title.too-long",
            "argument.body.empty",
            "argument.body.too-long",
        )
    }


def draft_contract(outcome_deadline_s: float = DEFAULT_OUTCOME_DEADLINE_S) -> CapabilityContract:
    """The ``draft.prepare_private`` contract (server P), with the given outcome deadline."""
    return CapabilityContract(
        name=DRAFT,
        description=(
            "Prepare a private draft item in the space you are working in. Only you can "
            "see the draft and nobody is notified; preparing the same draft again changes "
            "nothing. Give a title and a body; the space is known from the task."
        ),
        argument_schema=_argument_schema(),
        context_arguments=("space_id",),
        effect_class=EffectClass.WRITE,
        idempotency=Idempotency(key_field="intent_key", retention_s=7 * 24 * 3600),
        query_by_identity=True,
        send_boundary="create-draft request written to the items server",
        postconditions=("a private draft exists in the space with the intent key",),
        recovery=("query", "retry_same_intent"),
        approval_hint="A private draft: visible only to its author until published.",
        consequence=Consequence(
            action="Prepare a private draft titled {args.title} in space {resource.id}",
            visible_to="{actor} only, until it is published",
            shows=("title", "body"),
        ),
        data_classes=("item_draft",),
        result_schema=_result_schema({"draft_id": "string", "space_id": "string"}),
        outcome_deadline_s=outcome_deadline_s,
        disclosure=_disclosure(),
    )


def publish_contract(outcome_deadline_s: float = DEFAULT_OUTCOME_DEADLINE_S) -> CapabilityContract:
    """The ``item.publish`` contract (server Q), with the given outcome deadline."""
    return CapabilityContract(
        name=PUBLISH,
        description=(
            "Publish an item to the space you are working in, now. Everyone in the space "
            "can see it and every subscriber is notified at once; it cannot be taken back. "
            "Give a title and a body; the space is known from the task."
        ),
        argument_schema=_argument_schema(),
        context_arguments=("space_id",),
        effect_class=EffectClass.PUBLISH,
        idempotency=None,
        query_by_identity=True,
        send_boundary="publish request written to the items server",
        postconditions=(
            "a publication with the intent key as client reference exists in the space",
            "every subscriber of the space was notified",
        ),
        recovery=("query", "retry_same_intent_if_absent", "operator"),
        approval_hint=(
            "Publishing is public and notifies every subscriber at once; it cannot be undone."
        ),
        consequence=Consequence(
            action="Publish an item titled {args.title} in space {resource.id} now, notifying "
                   "every subscriber; it cannot be taken back",
            visible_to="everyone in space {resource.id}",
            shows=("title", "body"),
        ),
        data_classes=("published_item",),
        result_schema=_result_schema(
            {"publication_id": "string", "space_id": "string", "notified": "integer"}
        ),
        outcome_deadline_s=outcome_deadline_s,
        disclosure=_disclosure(),
    )


#: The contracts with the default deadline (what ``describe`` says unless configured).
DRAFT_CONTRACT = draft_contract()
PUBLISH_CONTRACT = publish_contract()


def _exit(status: int) -> NoReturn:
    os._exit(status)


class _ItemsAdapter(Adapter):
    """What both servers' adapters share: arguments, facts, faults, the send boundary."""

    server: ClassVar[str]
    destination_prefix: ClassVar[str]

    def __init__(
        self,
        world: World,
        credential: str,
        *,
        outcome_deadline_s: float = DEFAULT_OUTCOME_DEADLINE_S,
        exit_process: Callable[[int], NoReturn] = _exit,
    ) -> None:
        self.contract = self._contract(outcome_deadline_s)
        self._world = world
        self._credential = credential
        # Tests replace it; the worker dies for real (os._exit: no cleanup, no report).
        self._exit_process = exit_process

    @staticmethod
    def _contract(outcome_deadline_s: float) -> CapabilityContract:
        raise NotImplementedError

    async def normalize(self, req: NormalizeRequest) -> NormalizeResult:
        """Trim the title, check both sizes, take the space from run context."""
        title = req.arguments.get("title")
        if not isinstance(title, str):
            return NormalizeResult(reason="argument.title.invalid", field="title")
        title = title.strip()
        if not title:
            return NormalizeResult(reason="argument.title.empty", field="title")
        if len(title) > TITLE_MAX_CHARS:
            return NormalizeResult(reason="argument.title.too-long", field="title")
        body = req.arguments.get("body")
        if not isinstance(body, str):
            return NormalizeResult(reason="argument.body.invalid", field="body")
        # The body is kept as written (its layout may matter); only blank is empty.
        if not body.strip():
            return NormalizeResult(reason="argument.body.empty", field="body")
        if len(body.encode()) > BODY_MAX_BYTES:
            return NormalizeResult(reason="argument.body.too-long", field="body")
        # Only the run's authoritative context names the space, never the model.
        space_id = req.context.get("space_id")
        if not space_id:
            return NormalizeResult(reason="run.context.missing")
        return NormalizeResult(
            arguments={"space_id": space_id, "title": title, "body": body},
            resource={"type": "space", "id": space_id, "tenant": req.tenant},
            destination=f"{self.destination_prefix}:{req.tenant}/{space_id}",
        )

    async def facts(self, req: FactsRequest) -> Facts:
        """Return the space's current facts; the revision is its version."""
        facts = await asyncio.to_thread(
            self._world.space_facts, self._credential, req.tenant, req.actor, req.resource["id"]
        )
        return Facts(facts=facts, revision=str(facts["version"]))

    async def execute(self, order: ExecutionOrder, boundary: SendBoundary) -> Completed:
        """Create the item on this adapter's server, honouring the faults armed for it."""
        space_id = str(order.arguments["space_id"])
        title = str(order.arguments["title"])
        body = str(order.arguments["body"])
        if await self._take("fail_before_send"):
            raise NotSent("items.fault-injected", f"server {self.server}: failed before sending")
        existing = await self._already_done(order)
        if existing is not None:
            return existing
        await boundary.cross()
        if await self._take("crash_after_send"):
            self._exit_process(CRASH_EXIT_STATUS)
        stall_s = self.contract.outcome_deadline_s + STALL_PAST_DEADLINE_S \
            if await self._take("stall_before_write") else 0.0
        try:
            # The server is told when the write stops being wanted (the boundary's
            # not_after), and refuses it after that: a write held up past the attempt's
            # deadline cannot land beside the retry of an outcome found absent.
            receipt = await asyncio.to_thread(
                self._send, order, space_id, title, body, boundary.not_after, stall_s)
        except ItemsWorldError as exc:
            raise Rejected(exc.reason, str(exc)) from exc
        except ResponseLost as exc:
            # Past the boundary the SDK reports nothing for an error: the executor's
            # deadline turns the silence into OutcomeUnknown, as for a real lost reply.
            raise RuntimeError(f"server {self.server}: no response") from exc
        if await self._take("crash_after_commit"):
            self._exit_process(CRASH_EXIT_STATUS)
        return Completed(receipt=receipt, result=self._result(receipt))

    async def query(self, req: QueryRequest) -> QueryResult:
        """Look the item up by the intent key it was created with."""
        if await self._take("query_unavailable"):
            return QueryResult(finding=QueryFinding.UNKNOWN)  # the server did not answer the lookup
        receipt = await asyncio.to_thread(self._find, req.tenant, req.intent_key)
        if receipt is None:
            return QueryResult(finding=QueryFinding.ABSENT)
        return QueryResult(finding=QueryFinding.FOUND, receipt=receipt)

    def _send(
        self, order: ExecutionOrder, space_id: str, title: str, body: str,
        not_after: datetime | None, stall_s: float,
    ) -> dict[str, str]:
        """The write, in a worker thread: it goes on even when ``execute`` is given up on."""
        if stall_s:
            time.sleep(stall_s)  # an injected stall: this thread frozen past the deadline
        return self._write(order, space_id, title, body, not_after)

    async def _take(self, fault: str) -> bool:
        return await asyncio.to_thread(self._world.take_fault, self.server, fault)

    async def _already_done(self, order: ExecutionOrder) -> Completed | None:
        """The effect of this intent, if the server already has it and cannot deduplicate."""
        return None

    def _write(self, order: ExecutionOrder, space_id: str, title: str, body: str,
               not_after: datetime | None) -> dict[str, str]:
        raise NotImplementedError

    def _find(self, tenant: str, intent_key: str) -> dict[str, str] | None:
        raise NotImplementedError

    def _result(self, receipt: dict[str, str]) -> dict[str, Any]:
        raise NotImplementedError


class DraftAdapter(_ItemsAdapter):
    """Serves ``draft.prepare_private`` against server P (idempotent by the intent key)."""

    server = "P"
    destination_prefix = "items-P"

    @staticmethod
    def _contract(outcome_deadline_s: float) -> CapabilityContract:
        return draft_contract(outcome_deadline_s)

    def _write(self, order: ExecutionOrder, space_id: str, title: str, body: str,
               not_after: datetime | None) -> dict[str, str]:
        return self._world.create_draft(
            self._credential, order.tenant, order.actor, space_id, title, body,
            order.intent_key, order.intent_id, not_after=not_after,
        )

    def _find(self, tenant: str, intent_key: str) -> dict[str, str] | None:
        return self._world.find_draft(self._credential, tenant, intent_key)

    def _result(self, receipt: dict[str, str]) -> dict[str, Any]:
        return {"draft_id": receipt["draft_id"], "space_id": receipt["space_id"]}


class PublishAdapter(_ItemsAdapter):
    """Serves ``item.publish`` against server Q (not idempotent; queried by client reference)."""

    server = "Q"
    destination_prefix = "items-Q"

    @staticmethod
    def _contract(outcome_deadline_s: float) -> CapabilityContract:
        return publish_contract(outcome_deadline_s)

    async def _already_done(self, order: ExecutionOrder) -> Completed | None:
        # Q cannot tell a repeat from a new request. The SDK does not repeat redelivered
        # orders of a capability without idempotency, but a later attempt of the same
        # intent (retried after a query said absent, then the first landed late) or an
        # order published twice would publish twice: look first, a read before the boundary.
        receipt = await asyncio.to_thread(self._find, order.tenant, order.intent_key)
        if receipt is None:
            return None
        return Completed(receipt=receipt, result=self._result(receipt))

    def _write(self, order: ExecutionOrder, space_id: str, title: str, body: str,
               not_after: datetime | None) -> dict[str, str]:
        return self._world.publish(
            self._credential, order.tenant, order.actor, space_id, title, body,
            order.intent_key, order.intent_id, not_after=not_after,
        )

    def _find(self, tenant: str, intent_key: str) -> dict[str, str] | None:
        return self._world.find_publication(self._credential, tenant, intent_key)

    def _result(self, receipt: dict[str, str]) -> dict[str, Any]:
        return {
            "publication_id": receipt["publication_id"],
            "space_id": receipt["space_id"],
            "notified": int(receipt["notified"]),
        }


def build_adapters(
    settings: ItemsWorldSettings,
    *,
    exit_process: Callable[[int], NoReturn] = _exit,
) -> tuple[DraftAdapter, PublishAdapter]:
    """Open (seeding it if empty) the world the settings name; return both adapters over it."""
    credential = settings.credential.get_secret_value()
    world = World.open_or_seed(settings.dir, credential=credential)
    deadline = settings.outcome_deadline_s
    return (
        DraftAdapter(world, credential, outcome_deadline_s=deadline, exit_process=exit_process),
        PublishAdapter(world, credential, outcome_deadline_s=deadline, exit_process=exit_process),
    )
