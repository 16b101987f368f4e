"""When a capability is offered in a turn: the run's stage, the actor's roles, the data
classes the run may touch, what the run has done, the budgets left and the adapter's health.

A turn's catalogue is built from these rules when the turn opens and snapshotted by
digest, with every capability withheld and why (``Catalogue.withheld``). A tool the turn
did not offer is refused at intake (``tool.not-offered``); one offered but no longer
offered when policy decides is denied there (``tool.no-longer-offered``): the record says
it was valid when proposed and refused now.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import msgspec

#: A capability is offered while its adapter's last heartbeat is this recent: three of
#: the adapter SDK's beats, so a busy or restarting adapter is not dropped at once.
ALIVE_WITHIN_S = 15.0


def alive(alive_at: datetime | None, now: datetime) -> bool:
    """True when an adapter's last heartbeat (``Describe.alive_at``) is recent."""
    return alive_at is not None and abs((now - alive_at).total_seconds()) < ALIVE_WITHIN_S


class Offer(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A capability's own rules for being offered (empty: always).

    ``stages``: the run stages it is offered in; ``roles``: the actor needs one of them;
    ``after``: capabilities that must have executed in the run first (a patch is offered
    once a file of the workspace was read, say).
    """

    stages: tuple[str, ...] = ()
    roles: tuple[str, ...] = ()
    after: tuple[str, ...] = ()


@dataclass(frozen=True)
class Circumstances:
    """What a turn's catalogue is built from, for one capability.

    ``data_classes``: the classes the run may touch (``None``: the host set none, any);
    ``capabilities``: the capabilities the run's agent uses (``None``: any);
    ``done``: the capabilities executed in the run so far (only those some ``after`` names
    need be known); ``budget_left``: what the budgets counting it still admit (``None``:
    not known, offered); ``alive``: its adapter's heartbeat is recent.
    """

    stage: str
    roles: tuple[str, ...]
    data_classes: tuple[str, ...] | None
    done: frozenset[str]
    budget_left: int | None
    alive: bool
    capabilities: tuple[str, ...] | None = None


def withheld_because(offer: Offer, *, data_classes: tuple[str, ...], cost: int,
                     now: Circumstances, name: str = "") -> str | None:
    """Why the capability ``name`` is not offered now (``None``: it is)."""
    if now.capabilities is not None and name not in now.capabilities:
        return "not among the capabilities the run uses"
    if not now.alive:
        return "adapter not alive"
    if offer.stages and now.stage not in offer.stages:
        return f"not offered in stage {now.stage!r}"
    if offer.roles and not set(offer.roles) & set(now.roles):
        return "the actor has none of the roles it needs"
    if now.data_classes is not None:
        outside = sorted(set(data_classes) - set(now.data_classes))
        if outside:
            return f"touches data classes the run may not: {', '.join(outside)}"
    missing = [name for name in offer.after if name not in now.done]
    if missing:
        return f"offered after {', '.join(missing)} executed in the run"
    if now.budget_left is not None and now.budget_left < cost:
        return "its budget is spent"
    return None
