"""The case-notes world: a simulated case system and the ``case.add_note`` adapter."""

from lockgate.worlds.casenotes.adapter import CONTRACT, CaseNotesAdapter, CaseWorldSettings
from lockgate.worlds.casenotes.world import (
    DEMO_CREDENTIAL,
    CaseClosed,
    CaseNotFound,
    CaseWorldError,
    InvalidCredential,
    NotAuthorized,
    TenantMismatch,
    VersionConflict,
    World,
    WritesSuspended,
    print_ledger,
)

__all__ = [
    "CONTRACT",
    "DEMO_CREDENTIAL",
    "CaseClosed",
    "CaseNotFound",
    "CaseNotesAdapter",
    "CaseWorldError",
    "CaseWorldSettings",
    "InvalidCredential",
    "NotAuthorized",
    "TenantMismatch",
    "VersionConflict",
    "World",
    "WritesSuspended",
    "print_ledger",
]
