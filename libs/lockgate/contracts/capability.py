"""A capability contract: a product verb with everything Lockgate needs to govern it."""

from __future__ import annotations

from enum import StrEnum
from functools import lru_cache
from typing import Any

import msgspec

from lockgate.contracts.consequence import Consequence
from lockgate.contracts.offer import Offer
from lockgate.core.canonical import digest


@lru_cache(maxsize=256)
def _revision(encoded: bytes) -> str:
    # Canonical JSON is slow in pure Python and contracts are compared on every step;
    # msgspec's encoding is a cheap, exact cache key for the same contract.
    return digest(msgspec.json.decode(encoded))


class EffectClass(StrEnum):
    """How far an effect reaches, from harmless to irreversible."""

    READ = "read"
    DERIVE = "derive"
    WRITE = "write"
    PUBLISH = "publish"
    DESTROY = "destroy"


class Disclosure(msgspec.Struct, frozen=True):
    """What the model may learn of one internal reason code.

    ``persistent``: retrying will not help (``True``) or may help later (``False``);
    ``alternatives``: safe next steps the model may take instead.
    """

    status: str
    code: str
    field: str | None = None
    persistent: bool | None = None
    alternatives: tuple[str, ...] = ()


class Idempotency(msgspec.Struct, frozen=True):
    """How the remote system deduplicates: the argument carrying the key, and for how long."""

    key_field: str
    retention_s: int


class CapabilityContract(msgspec.Struct, frozen=True, kw_only=True):
    """Everything declared once about a capability.

    ``argument_schema`` covers only the arguments the model controls; the arguments
    listed in ``context_arguments`` are taken from the run's authoritative context and
    a model that supplies them is refused.
    """

    name: str
    description: str
    argument_schema: dict[str, Any]
    schema_revision: int = 1
    context_arguments: tuple[str, ...] = ()
    effect_class: EffectClass = EffectClass.WRITE
    max_argument_bytes: int = 16 * 1024
    idempotency: Idempotency | None = None
    query_by_identity: bool = False
    send_boundary: str = "request written to the remote system"
    interruptible: bool = False
    postconditions: tuple[str, ...] = ()
    recovery: tuple[str, ...] = ("query", "operator")
    approval_hint: str = ""
    #: How the effect reads to a reviewer (``None``: a generic sentence and every argument).
    consequence: Consequence | None = None
    budget_cost: int = 1
    data_classes: tuple[str, ...] = ()
    #: Its results carry content from outside the tenant's control (mail, files, web
    #: pages, remote tools): once one is authorized, untrusted content may enter the run
    #: (``context.history.untrusted`` in a policy).
    outside_results: bool = False
    #: The normalized arguments naming whom or where the effect reaches (recipients,
    #: accounts, people it is shared with): each a text or a list of texts
    #: (``context.destinations`` in a policy).
    destination_arguments: tuple[str, ...] = ()
    #: The normalized argument whose number the run's totals add up (an amount of money,
    #: say; ``context.amount`` and ``context.history.run.amount`` in a policy).
    amount_argument: str | None = None
    #: When it is offered in a turn (stage, roles, what the run did first).
    offer: Offer = msgspec.field(default_factory=Offer)
    result_max_bytes: int = 4096
    #: JSON Schema the adapter's result must satisfy (``None``: any object).
    result_schema: dict[str, Any] | None = None
    outcome_deadline_s: float = 30.0
    #: Effects on the same resource run one at a time: the final gate holds a lock on
    #: the resource from authorization until the attempt is settled (conditional
    #: writes on a version token would otherwise refuse each other).
    serialize_per_resource: bool = False
    #: Safe next steps a model may take when this capability is denied: narrow_scope,
    #: use_read_capability, request_approval, ask_owner, wait, stop.
    alternatives: tuple[str, ...] = ("stop",)
    #: internal reason code -> what the model sees; unlisted codes collapse.
    disclosure: dict[str, Disclosure] = msgspec.field(default_factory=dict)

    @property
    def revision(self) -> str:
        """Content digest of the contract: any change is a new mapping revision."""
        return _revision(msgspec.json.encode(self))

    def model_tool(self) -> dict[str, Any]:
        """The tool as offered to the model: name, description, JSON Schema."""
        return {
            "name": self.name,
            "description": self.description,
            "parameters": self.argument_schema,
        }
