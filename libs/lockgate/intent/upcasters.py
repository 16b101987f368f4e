"""How events stored at an older version read today: one function per (event type, version).

An upcaster takes the stored ``data`` of an event of type ``name`` at version ``n`` and
rewrites it, in place, as version ``n + 1`` stored it. ``lockgate.intent.codec`` applies
them in order, from the stored version up to the event's ``version``. An event whose
stored form changes in a way old bytes do not read as (a field added without a default,
a meaning changed) gets a higher ``version`` and its upcaster here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lockgate.contracts.vocabulary import Finding, Resolution

#: A stored event's ``data``, as JSON decoded it.
Data = dict[str, Any]


def policy_decided_v1(data: Data) -> None:
    """Version 1 had no budgets."""
    data["reservations"] = []


def effect_completed_v1(data: Data) -> None:
    """Version 1 recorded no provenance."""
    data["provenance"] = {}


def reconciled_v1(data: Data) -> None:
    """Version 1 had no resolution: confirmed completed, anything else needed a person."""
    confirmed = data.get("finding") == Finding.CONFIRMED
    data["resolution"] = (Resolution.COMPLETED if confirmed else Resolution.OPERATOR).value


#: Each upcaster by the event type and the version it reads.
UPCASTERS: dict[tuple[str, int], Callable[[Data], None]] = {
    ("PolicyDecided", 1): policy_decided_v1,
    ("EffectCompleted", 1): effect_completed_v1,
    ("Reconciled", 1): reconciled_v1,
}


def upcast(event_type: str, stored_version: int, current_version: int, data: Data) -> None:
    """Rewrite ``data``, stored at ``stored_version``, as ``current_version`` stores it.

    Raises:
        KeyError: a version in between has no upcaster.
    """
    for version in range(stored_version, current_version):
        UPCASTERS[event_type, version](data)
