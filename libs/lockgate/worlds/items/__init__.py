"""The items world: two ``create_item`` servers, a private-draft one and a publisher.

Mapped as two capabilities: ``draft.prepare_private`` (server P) and ``item.publish``
(server Q).
"""

from lockgate.worlds.items.adapter import (
    DRAFT_CONTRACT,
    PUBLISH_CONTRACT,
    DraftAdapter,
    ItemsWorldSettings,
    PublishAdapter,
    build_adapters,
    draft_contract,
    publish_contract,
)
from lockgate.worlds.items.world import (
    DEMO_CREDENTIAL,
    FAULTS,
    SERVERS,
    InvalidCredential,
    ItemsWorldError,
    NotAuthorized,
    ResponseLost,
    SpaceArchived,
    SpaceNotFound,
    TenantMismatch,
    World,
    print_ledger,
)

__all__ = [
    "DEMO_CREDENTIAL",
    "DRAFT_CONTRACT",
    "FAULTS",
    "PUBLISH_CONTRACT",
    "SERVERS",
    "DraftAdapter",
    "InvalidCredential",
    "ItemsWorldError",
    "ItemsWorldSettings",
    "NotAuthorized",
    "PublishAdapter",
    "ResponseLost",
    "SpaceArchived",
    "SpaceNotFound",
    "TenantMismatch",
    "World",
    "build_adapters",
    "draft_contract",
    "print_ledger",
    "publish_contract",
]
