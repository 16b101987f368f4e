"""What every ``EffectIntent`` event is: a frozen record with Lockgate's envelope.

An event is a ``msgspec.Struct`` (frozen): the envelope first, by position, then its own
fields, by name only. Deciding functions build one with ``Event.next``, whose signature
is the event's own constructor after the envelope, so a misspelt, missing or mistyped
field fails ``mypy --strict`` where the event is built, not when it is folded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import ClassVar, Concatenate, ParamSpec, Protocol, TypeVar
from uuid import UUID

import msgspec

from lockgate.contracts.vocabulary import Settles

E = TypeVar("E", bound="Event")
P = ParamSpec("P")


class Followed(Protocol):
    """What an event takes of the state it follows (the intent's state is one)."""

    @property
    def id(self) -> UUID: ...

    @property
    def version(self) -> int: ...

    @property
    def run_id(self) -> str: ...

    @property
    def reservations(self) -> tuple[str, ...]: ...

#: What the first event of every intent names as its origin (``originator_topic``). The
#: name of the class that held the intent when the first events were stored: kept as it
#: was, so stored first events and new ones read alike.
INTENT_TOPIC = "lockgate.intent.aggregate:EffectIntent"


@dataclass(frozen=True)
class Stamp:
    """What a deciding function says of an event it builds: when, its id, and its cause.

    ``offset`` places the event after the state it follows: 1 for the next one, 2 for
    the one after it in the same batch.
    """

    now: datetime
    event_id: str
    causation_id: str
    offset: int = 1


class Event(msgspec.Struct, frozen=True):
    """Base of every ``EffectIntent`` event: the envelope, then the event's own fields."""

    #: The version its stored form has (``{"v": version, "data": ...}``); an older one is
    #: read through ``lockgate.intent.upcasters``.
    version: ClassVar[int] = 1
    #: True for an event that records something beside the intent's state (it may
    #: follow a terminal state); any other event after a terminal state moves nothing.
    neutral: ClassVar[bool] = False
    #: The field whose value is the event's route (its subject's last token), for an
    #: event whose consumers act on one value of it only; empty for every other.
    routed_by: ClassVar[str] = ""
    #: True for an event that starts an intent's history (it follows no state).
    creates: ClassVar[bool] = False

    originator_id: UUID
    originator_version: int
    timestamp: datetime
    event_id: str
    correlation_id: str
    causation_id: str

    @classmethod
    def next(
        cls: Callable[Concatenate[UUID, int, datetime, str, str, str, P], E],
        state: Followed, stamp: Stamp, /, *args: P.args, **fields: P.kwargs,
    ) -> E:
        """Build the event that would follow ``state``, its own fields given by name.

        The envelope comes from ``state`` (the intent, its version, its run) and
        ``stamp``; ``cls``'s constructor after the envelope types ``fields``, so
        ``AttemptSent.next(intent, stamp, atempt_id=...)`` fails type
        checking. Not for an intent's first event, which follows nothing.

        Raises:
            TypeError: ``cls`` is an event that creates an intent.
        """
        if getattr(cls, "creates", False):
            raise TypeError(f"{cls!r} creates an intent: it follows no state")
        if getattr(cls, "routed_by", "") == "settles" and "settles" not in fields:
            # Computed here, never left to a caller to remember: an end routed past
            # policy would leave its budget holds behind.
            fields["settles"] = Settles.BUDGET if state.reservations else Settles.NOTHING
        return cls(
            state.id, state.version + stamp.offset, stamp.now, stamp.event_id, state.run_id,
            stamp.causation_id, *args, **fields,
        )


class Created(Event, frozen=True, kw_only=True):
    """Base of an event that starts an intent's history: it names the intent's origin."""

    creates: ClassVar[bool] = True

    #: ``INTENT_TOPIC``, as every first event stored so far says.
    originator_topic: str
