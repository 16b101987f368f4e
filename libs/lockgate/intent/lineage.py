"""How a candidate relates to the one it corrects or follows in its run.

A runtime names the call a candidate follows (``Candidate.follows``), or intake links it
to the latest refused call of the same tool in the same turn. Normalization then
compares the two consequences:

- ``equivalent``: the same normalized digest (a syntax repair, another spelling of the
  same thing);
- ``narrowing``: the same capability, effect class and destination, the resource and
  every argument equal or narrower (a path below the earlier one, a subset of a list);
- ``branch``: anything else (the effect class, destination, visibility or bytes changed);
- ``repair``: no earlier candidate in the lineage got as far as a consequence (the ones
  before were refused at intake: syntax, schema), so there is nothing to compare.

Decisions never flow across a branch: an approval binds one intent's digest and flows
nowhere; a reviewer's denial flows only to an equivalent successor (the same
consequence, asked again). The progress checkpoint counts the lineage's refusals (by
policy, a reviewer, or normalization on anything but an argument's form), so a model
probing for another spelling of a forbidden action is stopped, and one that repaired
its syntax is not.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from lockgate.intent.aggregate import EffectIntent, State

#: How far back a lineage is walked through candidates that never got a consequence.
MAX_WALK = 16

#: Reason prefixes of refusals that are about a call's form, not its consequence: a
#: lineage does not count them (fixing them is progress).
FORM = ("tool.", "candidate.", "run.", "turn.", "proposal.", "stream.", "provider.", "rate.",
        "lineage.", "argument.", "capability.")


class Kind(StrEnum):
    """How a candidate's consequence relates to its predecessor's."""

    EQUIVALENT = "equivalent"
    NARROWING = "narrowing"
    BRANCH = "branch"
    REPAIR = "repair"


@dataclass(frozen=True)
class Place:
    """A candidate's place in its lineage, as ``CandidateNormalized`` records it."""

    kind: Kind
    root: str
    denials: int
    predecessor_denied: bool


def refused_for_its_consequence(intent: EffectIntent) -> bool:
    """True when the intent ended refused for what it would do (not for its form)."""
    if intent.state is State.DENIED:
        return True
    return (intent.state is State.REJECTED and intent.digest is None
            and intent.contract_revision != "" and not (intent.reason or "").startswith(FORM))


def denied_by_reviewer(intent: EffectIntent) -> bool:
    """True when a reviewer refused this consequence (not edited it into another)."""
    return intent.state is State.DENIED and intent.reason == "review.denied" and intent.edited_into is None


def _within(narrow: Any, wide: Any) -> bool:
    """True when ``narrow`` asks for no more than ``wide``."""
    if narrow == wide:
        return True
    if isinstance(narrow, str) and isinstance(wide, str):
        return bool(wide) and narrow.startswith(wide.rstrip("/") + "/")
    if isinstance(narrow, list) and isinstance(wide, list):
        return all(item in wide for item in narrow)
    if isinstance(narrow, dict) and isinstance(wide, dict):
        return all(k in wide and _within(v, wide[k]) for k, v in narrow.items())
    return False


def compare(earlier: EffectIntent, tool: str, *, digest: str, effect_class: str, destination: str,
            resource: dict[str, str], arguments: dict[str, Any]) -> Kind:
    """How a consequence relates to ``earlier``'s (which has one)."""
    if digest == earlier.digest:
        return Kind.EQUIVALENT
    same_reach = (tool == earlier.tool and effect_class == earlier.effect_class
                  and destination == earlier.destination)
    if (same_reach and all(k in resource and _within(resource[k], v) for k, v in earlier.resource.items())
            and _within(arguments, earlier.normalized_arguments)):
        return Kind.NARROWING
    return Kind.BRANCH


async def place(intent: EffectIntent, load: Callable[[str], Awaitable[EffectIntent | None]], *,
                digest: str, effect_class: str, destination: str, resource: dict[str, str],
                arguments: dict[str, Any]) -> Place | None:
    """Where ``intent`` (about to be normalized with this consequence) sits in its lineage.

    Walks back through predecessors that never got a consequence (refused at intake) to
    the nearest that did, which carries the count of refusals before it; ``None`` for a
    candidate that follows none.
    """
    if not intent.follows:
        return None
    denials, current, root = 0, intent.follows, intent.follows
    for _ in range(MAX_WALK):
        earlier = await load(current)
        if earlier is None:
            break
        root = earlier.lineage_root or earlier.intent_id
        denials += 1 if refused_for_its_consequence(earlier) else 0
        if earlier.digest is not None:
            kind = compare(earlier, intent.tool, digest=digest, effect_class=effect_class,
                           destination=destination, resource=resource, arguments=arguments)
            return Place(kind, root, earlier.lineage_denials + denials, denied_by_reviewer(earlier))
        if not earlier.follows:
            break
        current = earlier.follows
    return Place(Kind.REPAIR, root, denials, False)
