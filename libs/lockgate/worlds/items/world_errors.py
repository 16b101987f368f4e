"""The items world's refusals, each with its stable reason code, and the lost response it can fake."""

from __future__ import annotations

from lockgate.core.errors import LockgateError
from lockgate.worlds.storage import WorldError


class ItemsWorldError(WorldError):
    """Root of the items world's refusals; ``reason`` is the stable code."""

    reason = "items.error"


class InvalidCredential(ItemsWorldError):
    """The caller did not present the world's credential."""

    reason = "items.credential-invalid"


class SpaceNotFound(ItemsWorldError):
    """No space has this id."""

    reason = "space.not-found"


class TenantMismatch(ItemsWorldError):
    """The space belongs to another tenant."""

    reason = "space.tenant-mismatch"


class SpaceArchived(ItemsWorldError):
    """The space is archived; it takes no new items."""

    reason = "space.archived"


class NotAuthorized(ItemsWorldError):
    """The actor may not create items in this space."""

    reason = "item.not-authorized"


class WriteTooLate(ItemsWorldError):
    """The write reached the server after the latest moment it could take effect."""

    reason = "items.write-too-late"


#: Every reason code the world can raise, for the test that lists them.
REASONS: tuple[str, ...] = tuple(
    cls.reason
    for cls in (InvalidCredential, SpaceNotFound, TenantMismatch, SpaceArchived, NotAuthorized,
                WriteTooLate)
)


class ResponseLost(LockgateError):
    """An injected fault: the call committed, but its response never reached the caller.

    Deliberately not an ``ItemsWorldError``: it is not a refusal, and the caller cannot
    know whether the effect happened.
    """

    def __init__(self, server: str) -> None:
        super().__init__(f"server {server}: the response was lost", code="items.response-lost")
        self.server = server
